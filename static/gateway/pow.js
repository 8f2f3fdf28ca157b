// pow.js is the item page's proof-of-work worker (ALTCHA's format): given a
// challenge, it finds the number n in 0..maxnumber with
// hex(SHA-256(salt + n)) = challenge, reporting its progress as it goes.
"use strict";
function hex(buf) {
  var b = new Uint8Array(buf), s = "";
  for (var i = 0; i < b.length; i++) { s += (b[i] < 16 ? "0" : "") + b[i].toString(16); }
  return s;
}
self.onmessage = async function (e) {
  var c = e.data, enc = new TextEncoder();
  var step = Math.max(1, Math.floor(c.maxnumber / 100));
  for (var n = 0; n <= c.maxnumber; n++) {
    var h = hex(await crypto.subtle.digest("SHA-256", enc.encode(c.salt + n)));
    if (h === c.challenge) { self.postMessage({ done: true, number: n }); return; }
    if (n % step === 0) { self.postMessage({ progress: n / c.maxnumber }); }
  }
  self.postMessage({ done: true, number: -1 });
};
