// pow.js is the item page's proof-of-work worker (ALTCHA's format): given a
// challenge, it finds the number n in 0..maxnumber with
// hex(SHA-256(salt + n)) = challenge, reporting its progress as it goes.
// SHA-256 runs here synchronously, written out for this one use: the
// salt's whole 64-byte blocks are hashed once (the midstate), each
// candidate hashes only the last one or two blocks, and the result is
// compared as eight words, so a person's tab works at a fair fraction of a
// bot's native rate (one awaited crypto.subtle.digest per candidate ran
// a thousand times slower). For the tests it also answers {digest:
// [strings]} with their hex SHA-256, {hashes: {salt, numbers}} with the
// hex SHA-256 of salt followed by each number, and {bench: {salt, count}}
// with the hashes per second of numbers 0..count-1.
"use strict";
var K = new Int32Array([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2]);
var H0 = new Int32Array([0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19]);
var W = new Int32Array(64);

// blocks runs SHA-256's compression over n 64-byte blocks of buf into st.
function blocks(st, buf, n) {
  var w = W, a, b, c, d, e, f, g, h, i, j, x, y, t1, t2;
  for (var off = 0; off < n * 64; off += 64) {
    for (i = 0; i < 16; i++) {
      j = off + i * 4;
      w[i] = (buf[j] << 24) | (buf[j + 1] << 16) | (buf[j + 2] << 8) | buf[j + 3];
    }
    for (i = 16; i < 64; i++) {
      x = w[i - 15]; y = w[i - 2];
      w[i] = (w[i - 16] + (((x >>> 7) | (x << 25)) ^ ((x >>> 18) | (x << 14)) ^ (x >>> 3)) + w[i - 7] +
        (((y >>> 17) | (y << 15)) ^ ((y >>> 19) | (y << 13)) ^ (y >>> 10))) | 0;
    }
    a = st[0]; b = st[1]; c = st[2]; d = st[3]; e = st[4]; f = st[5]; g = st[6]; h = st[7];
    for (i = 0; i < 64; i++) {
      t1 = (h + (((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7))) +
        ((e & f) ^ (~e & g)) + K[i] + w[i]) | 0;
      t2 = ((((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10))) +
        ((a & b) ^ (a & c) ^ (b & c))) | 0;
      h = g; g = f; f = e; e = (d + t1) | 0; d = c; c = b; b = a; a = (t1 + t2) | 0;
    }
    st[0] = (st[0] + a) | 0; st[1] = (st[1] + b) | 0; st[2] = (st[2] + c) | 0; st[3] = (st[3] + d) | 0;
    st[4] = (st[4] + e) | 0; st[5] = (st[5] + f) | 0; st[6] = (st[6] + g) | 0; st[7] = (st[7] + h) | 0;
  }
}

// hasher returns a function of n that hashes prefix (bytes) followed by n
// in decimal into an Int32Array of eight words (reused: read it at once).
function hasher(prefix) {
  var full = prefix.length - prefix.length % 64;
  var mid = new Int32Array(H0);
  blocks(mid, prefix, full / 64);
  var tail = prefix.length - full;
  var buf = new Uint8Array(128);
  buf.set(prefix.subarray(full));
  var st = new Int32Array(8), digits = new Uint8Array(20);
  return function (n) {
    var nd = 0, i, len = tail;
    do { digits[nd++] = 48 + n % 10; n = Math.floor(n / 10); } while (n > 0);
    while (nd > 0) { buf[len++] = digits[--nd]; }
    var bits = (prefix.length + len - tail) * 8;
    buf[len++] = 0x80;
    var end = len + 8 <= 64 ? 64 : 128;
    for (i = len; i < end - 8; i++) { buf[i] = 0; }
    var hi = Math.floor(bits / 4294967296);
    buf[end - 8] = hi >>> 24; buf[end - 7] = hi >>> 16; buf[end - 6] = hi >>> 8; buf[end - 5] = hi;
    buf[end - 4] = bits >>> 24; buf[end - 3] = bits >>> 16; buf[end - 2] = bits >>> 8; buf[end - 1] = bits;
    st.set(mid);
    blocks(st, buf, end / 64);
    return st;
  };
}

// sha256 returns the hex SHA-256 of bytes.
function sha256(bytes) {
  var n = bytes.length, total = (n + 9 + 63) & ~63, buf = new Uint8Array(total);
  buf.set(bytes);
  buf[n] = 0x80;
  var bits = n * 8, hi = Math.floor(bits / 4294967296);
  buf[total - 8] = hi >>> 24; buf[total - 7] = hi >>> 16; buf[total - 6] = hi >>> 8; buf[total - 5] = hi;
  buf[total - 4] = bits >>> 24; buf[total - 3] = bits >>> 16; buf[total - 2] = bits >>> 8; buf[total - 1] = bits;
  var st = new Int32Array(H0);
  blocks(st, buf, total / 64);
  return hexWords(st);
}

function hexWords(st) {
  var s = "";
  for (var i = 0; i < 8; i++) { s += ("0000000" + (st[i] >>> 0).toString(16)).slice(-8); }
  return s;
}

function solve(c) {
  var target = new Int32Array(8);
  if (!/^[0-9a-f]{64}$/.test(c.challenge)) { return -1; }
  for (var i = 0; i < 8; i++) { target[i] = parseInt(c.challenge.substr(i * 8, 8), 16) | 0; }
  var hash = hasher(new TextEncoder().encode(c.salt));
  var step = Math.max(1, Math.floor(c.maxnumber / 100));
  for (var n = 0; n <= c.maxnumber; n++) {
    var h = hash(n);
    if (h[0] === target[0] && h[1] === target[1] && h[2] === target[2] && h[3] === target[3] &&
      h[4] === target[4] && h[5] === target[5] && h[6] === target[6] && h[7] === target[7]) { return n; }
    if (n % step === 0) { self.postMessage({ progress: n / Math.max(c.maxnumber, 1) }); }
  }
  return -1;
}

self.onmessage = function (e) {
  var m = e.data, enc = new TextEncoder();
  if (m.digest) {
    self.postMessage({ hex: m.digest.map(function (s) { return sha256(enc.encode(s)); }) });
    return;
  }
  if (m.hashes) {
    var hs = hasher(enc.encode(m.hashes.salt));
    self.postMessage({ hex: m.hashes.numbers.map(function (n) { return hexWords(hs(n)); }) });
    return;
  }
  if (m.bench) {
    var hash = hasher(enc.encode(m.bench.salt)), t0 = performance.now(), last = "";
    for (var n = 0; n < m.bench.count; n++) { hash(n); }
    var ms = performance.now() - t0;
    last = hexWords(hash(m.bench.count - 1));
    self.postMessage({ ms: ms, rate: m.bench.count / (ms / 1000), last: last });
    return;
  }
  self.postMessage({ done: true, number: solve(m) });
};
