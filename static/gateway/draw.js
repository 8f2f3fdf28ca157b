// draw.js drives a draw sale's item page: it counts down the entry window,
// enters the buyer (the size and quantity chosen, the proof of work solved
// in a Web Worker as the fair queue's page does), authorises the entry's
// card hold in Stripe's Payment Element when the answer carries a client
// secret, shows the entry's state, withdraws it before the close, and after
// the close follows GET /api/sales/{id}/entry until the result is known.
// Everything about the buyer comes from the entry routes: the page itself
// is the sale's, one cached answer for everyone.
(function () {
  "use strict";
  var root = document.getElementById("sale");
  if (!root || !root.hasAttribute("data-draw")) { return; }
  var saleID = root.getAttribute("data-sale");
  var opensAt = Date.parse(root.getAttribute("data-entries-open"));
  var closesAt = Date.parse(root.getAttribute("data-entries-close"));
  var perUser = parseInt(root.getAttribute("data-per-user"), 10) || 1;
  var priceCents = parseInt(root.getAttribute("data-price-cents"), 10) || 0;
  var stripeKey = root.getAttribute("data-stripe-key") || "";
  var countdown = document.getElementById("countdown");
  var enterBtn = document.getElementById("draw-enter");
  var withdrawBtn = document.getElementById("draw-withdraw");
  var entryLine = document.getElementById("draw-entry");
  var work = document.getElementById("pow-bar");
  var qtyInput = document.getElementById("draw-qty");
  var payBox = document.getElementById("payment");
  var payBtn = document.getElementById("pay");
  var statusLine = document.getElementById("status");
  var tokenBox = document.getElementById("token-box");
  var radios = Array.prototype.slice.call(document.querySelectorAll("input[name=draw-variant]"));
  var base = "/api/sales/" + encodeURIComponent(saleID);

  var entry = null;       // the last entry an entry route answered, or null
  var busy = false;       // a request of the buyer's is in flight
  var closedSeen = false; // the server answered closed before our clock said so
  var stripe = null, elements = null; // the mounted Payment Element's group, while holding
  var lastPhase = "";

  // The window's times, shown in the reader's own time zone.
  [["entries-open", opensAt], ["entries-close", closesAt]].forEach(function (p) {
    var el = document.getElementById(p[0]);
    if (el && !isNaN(p[1])) { el.textContent = new Date(p[1]).toLocaleString(); }
  });

  function token() { return sessionStorage.getItem("flashgate-token") || ""; }
  function say(text, kind) {
    statusLine.textContent = text;
    statusLine.className = "status" + (kind ? " " + kind : "");
  }
  function phase() {
    var now = Date.now();
    if (closedSeen || now >= closesAt) { return "closed"; }
    return now < opensAt ? "before" : "open";
  }
  function live() { return !!entry && (entry.state === "pending" || entry.state === "entered"); }
  function chosen() {
    for (var i = 0; i < radios.length; i++) { if (radios[i].checked) { return radios[i].value; } }
    return "";
  }
  function sizeName(id) {
    for (var i = 0; i < radios.length; i++) {
      if (radios[i].value === id) { return radios[i].getAttribute("data-name") || id; }
    }
    return id;
  }
  function quantity() {
    var n = qtyInput ? parseInt(qtyInput.value, 10) : 1;
    return n >= 1 && n <= perUser ? n : 0;
  }
  function money(cents) { return (cents / 100).toFixed(2); }
  function what(e) {
    return (e.variant ? "size " + sizeName(e.variant) + ", " : "") + "quantity " + e.quantity;
  }

  // describe says where the entry stands, in the entry line.
  function describe(e) {
    if (!e) { return ""; }
    switch (e.result) {
      case "won":
        return "You won: " + what(e) + ". Your card was charged " + money(priceCents * e.quantity) +
          (e.order_id ? "; your order is " + e.order_id + "." : ".");
      case "lost":
        return "Not drawn this time (" + what(e) + "). Your hold was released: nothing was charged.";
      case "withdrawn":
        return "You withdrew your entry (" + what(e) + "). Your hold was released.";
    }
    if (e.state === "pending") {
      return phase() === "closed" ? "Your card was not held before the close: this entry (" + what(e) + ") is not in the draw, and nothing is charged." :
        "Your entry (" + what(e) + ") counts once your card is held.";
    }
    if (e.state === "entered") {
      return phase() === "closed" ? "You are in the draw (" + what(e) + "): the draw is being made." :
        "You are in the draw: " + what(e) + ". You are charged " + money(priceCents * e.quantity) + " only if you win.";
    }
    return "Your entry (" + what(e) + ") is being settled: the result follows.";
  }

  function render() {
    var ph = phase();
    var open = ph === "open";
    enterBtn.hidden = live() || ph === "closed";
    enterBtn.disabled = busy || !open || (radios.length > 0 && !chosen()) || !quantity();
    enterBtn.textContent = entry && entry.state === "withdrawn" ? "Enter again" : "Enter the draw";
    withdrawBtn.hidden = !live() || !open;
    withdrawBtn.disabled = busy;
    // The size and quantity are fixed once entered.
    radios.forEach(function (r) { r.disabled = live() || !open; });
    if (qtyInput) { qtyInput.disabled = live() || !open; }
    if (!live() || !open || (entry && entry.state !== "pending")) {
      payBtn.hidden = true;
      payBox.hidden = true;
    }
    entryLine.hidden = !entry;
    entryLine.textContent = describe(entry);
  }

  function pad(n) { return (n < 10 ? "0" : "") + n; }
  function span(ms) {
    var s = Math.max(0, Math.floor(ms / 1000)), d = Math.floor(s / 86400);
    return (d > 0 ? d + "d " : "") + pad(Math.floor(s / 3600) % 24) + ":" + pad(Math.floor(s / 60) % 60) + ":" + pad(s % 60);
  }
  function tick() {
    var ph = phase();
    if (ph === "before") { countdown.textContent = "Entries open in " + span(opensAt - Date.now()); }
    else if (ph === "open") { countdown.textContent = "Entries close in " + span(closesAt - Date.now()); }
    else { countdown.textContent = "Entries are closed"; }
    if (ph !== lastPhase) {
      var was = lastPhase;
      lastPhase = ph;
      if (ph === "closed") { closed(); }
      else if (!busy && !entry) {
        if (ph === "open") { say(token() ? (radios.length ? "Entries are open: choose a size and enter." : "Entries are open.") : "Entries are open: paste your buyer token below to enter.", ""); }
        else { say("Entries are not open yet."); }
      }
      if (was !== "") { render(); }
    }
  }

  var messages = {
    not_started: "Entries are not open yet.",
    closed: "Entries are closed.",
    rate_limited: "Too many tries: wait a moment and press again.",
    unauthorized: "Your token was not accepted: paste a valid one below.",
    not_found: "This draw does not exist.",
    bad_request: "The entry was refused: check the size and quantity, and press again.",
    unavailable: "The shop is busy: press again in a moment.",
    not_payable: "This entry can no longer be held."
  };
  function failed(res, fallback) {
    var code = res.body && res.body.error;
    if (code === "unauthorized") { tokenBox.open = true; }
    if (code === "closed") { closedSeen = true; closed(); }
    say(messages[code] || fallback + (code ? ": " + code : ""), "err");
  }
  function call(method, path, body) {
    var h = { "Authorization": "Bearer " + token(), "Accept": "application/json" };
    if (body) { h["Content-Type"] = "application/json"; }
    return fetch(base + path, { method: method, headers: h, body: body ? JSON.stringify(body) : undefined })
      .then(function (r) {
        return r.json().then(function (b) { return { status: r.status, body: b }; },
          function () { return { status: r.status, body: {} }; });
      });
  }

  // solve finds the challenge's number in a Web Worker (pow.js) and
  // answers the payload the entry carries.
  function solve(c) {
    return new Promise(function (resolve, reject) {
      var w = new Worker("/static/pow.js");
      work.hidden = false;
      work.value = 0;
      w.onmessage = function (e) {
        if (e.data.progress != null) { work.value = Math.floor(100 * e.data.progress); return; }
        w.terminate();
        work.value = 100;
        if (e.data.number < 0) { reject(new Error("no solution")); return; }
        resolve(btoa(JSON.stringify({ algorithm: c.algorithm, challenge: c.challenge, number: e.data.number,
          salt: c.salt, signature: c.signature })));
      };
      w.onerror = function () { w.terminate(); reject(new Error("worker failed")); };
      w.postMessage(c);
    });
  }

  // enter fetches a challenge, solves it and posts the entry; a solution
  // refused (400: its challenge expired meanwhile) is tried once more.
  function enter(tries) {
    return fetch(base + "/challenge", { headers: { "Accept": "application/json" } }).then(function (r) {
      return r.json().then(function (b) { return { status: r.status, body: b }; });
    }).then(function (res) {
      if (res.status !== 200) { return res; }
      return solve(res.body).then(function (payload) {
        var body = { quantity: quantity(), payload: payload };
        if (chosen()) { body.variant = chosen(); }
        return call("POST", "/entry", body);
      }).then(function (res) {
        return res.status === 400 && tries > 1 ? enter(tries - 1) : res;
      });
    });
  }

  enterBtn.addEventListener("click", function () {
    if (!token()) { tokenBox.open = true; say("Paste your buyer token first.", "err"); return; }
    if (radios.length && !chosen()) { say("Choose a size first.", "err"); return; }
    if (!quantity()) { say("Choose a quantity from 1 to " + perUser + ".", "err"); return; }
    busy = true;
    render();
    say("Proving you are not a bot (this takes a moment)…");
    enter(2).then(function (res) {
      busy = false;
      work.hidden = true;
      if (res.status === 200 || res.status === 201) {
        entry = res.body;
        render();
        held(entry);
        return;
      }
      failed(res, "Could not enter");
      render();
    }).catch(function () {
      busy = false;
      work.hidden = true;
      say("The network failed: press enter again.", "err");
      render();
    });
  });

  // held goes on from an entry's answer: entered, or its card hold to
  // authorise (in the Payment Element with the shop's publishable key).
  function held(e) {
    if (e.state === "entered") { say("You are in the draw. Results come when entries close.", "ok"); return; }
    if (e.state !== "pending") { return; }
    if (e.client_secret && mountPayment(e.client_secret)) { return; }
    if (e.payment_intent && !stripeKey) {
      say("Your card hold started (" + e.payment_intent + "): complete it at the payment provider; this page shows when your entry counts.", "ok");
      follow(300);
      return;
    }
    // No hold yet (the provider could not be reached): ask for it again.
    payBtn.hidden = false;
    payBtn.disabled = false;
    payBtn.textContent = "Hold my card";
    say("Your entry counts once your card is held: press Hold my card.");
  }

  function mountPayment(secret) {
    if (!stripeKey) { return false; }
    payBtn.hidden = false;
    payBtn.disabled = false;
    if (typeof window.Stripe !== "function") {
      say("The payment form could not be loaded: reload the page and press Hold my card.", "err");
      return true;
    }
    try {
      stripe = stripe || window.Stripe(stripeKey);
      elements = stripe.elements({ clientSecret: secret });
      elements.create("payment").mount("#payment-element");
    } catch (err) {
      elements = null;
      say("The payment form could not be loaded: reload the page and press Hold my card.", "err");
      return true;
    }
    payBox.hidden = false;
    payBtn.textContent = "Hold my card";
    say("Enter your card to hold " + money(priceCents * (entry ? entry.quantity : 1)) + ", then press Hold my card. You are charged only if you win.");
    return true;
  }

  function confirmHold() {
    payBtn.disabled = true;
    say("Holding your card…");
    stripe.confirmPayment({ elements: elements, redirect: "if_required",
      confirmParams: { return_url: window.location.origin + window.location.pathname } })
      .then(function (res) {
        if (res && res.error) {
          payBtn.disabled = false;
          say(res.error.message || "The card hold failed: check the details and press Hold my card again.", "err");
          return;
        }
        elements = null;
        payBtn.hidden = true;
        payBox.hidden = true;
        say("Card held: waiting for the shop to count your entry…", "ok");
        follow(300);
      }, function () {
        payBtn.disabled = false;
        say("The network failed: press Hold my card again.", "err");
      });
  }

  payBtn.addEventListener("click", function () {
    if (elements && stripe) { confirmHold(); return; }
    payBtn.disabled = true;
    say("Asking for the card hold…");
    call("POST", "/entry/pay").then(function (res) {
      if (res.status === 200) {
        entry = res.body;
        render();
        if (entry.state === "pending" && !entry.client_secret && !entry.payment_intent) {
          payBtn.disabled = false;
          say("The payment provider did not answer: press Hold my card again.", "err");
          return;
        }
        held(entry);
        return;
      }
      payBtn.disabled = false;
      failed(res, "The card hold failed");
      refresh();
    }).catch(function () {
      payBtn.disabled = false;
      say("The network failed: press Hold my card again.", "err");
    });
  });

  withdrawBtn.addEventListener("click", function () {
    busy = true;
    render();
    say("Withdrawing…");
    call("DELETE", "/entry").then(function (res) {
      busy = false;
      if (res.status === 200) {
        entry = res.body;
        elements = null;
        say("Entry withdrawn: your card hold was released.", "ok");
        render();
        return;
      }
      failed(res, "Could not withdraw");
      render();
      refresh(); // a withdrawal answered 503 may stand: show the entry as it is
    }).catch(function () {
      busy = false;
      say("The network failed: press withdraw again.", "err");
      render();
    });
  });

  // refresh reads the buyer's entry; done, when given, gets it (null for
  // none) after the page shows it.
  function refresh(done) {
    if (!token()) { if (done) { done(null); } return; }
    call("GET", "/entry").then(function (res) {
      if (res.status === 200) { entry = res.body; }
      else if (res.status === 404) { entry = null; }
      else { if (done) { done(undefined); } return; }
      render();
      if (done) { done(entry); }
    }).catch(function () { if (done) { done(undefined); } });
  }

  // follow reads the entry every second, n times at most, until its hold
  // is authorised (entered) or it left the draw; a newer follow ends an
  // older one.
  var followGen = 0;
  function follow(n) { followChain(++followGen, n); }
  function followChain(gen, n) {
    if (gen !== followGen) { return; }
    refresh(function (e) {
      if (gen !== followGen) { return; }
      if (e && e.state === "entered") { say("You are in the draw. Results come when entries close.", "ok"); return; }
      if (e === null || (e && e.state !== "pending")) { return; }
      if (n > 0) { setTimeout(function () { followChain(gen, n - 1); }, 1000); }
    });
  }

  // closed follows the entry after the close until its result is final
  // (won, lost or withdrawn): every 2 s for a minute, then less often, at
  // most every 30 s.
  var resultsGen = 0;
  function closed() {
    var gen = ++resultsGen;
    followGen++; // the hold's follow ends here
    render();
    var wait = 2000, waited = 0;
    function look() {
      if (gen !== resultsGen) { return; }
      refresh(function (e) {
        if (gen !== resultsGen) { return; }
        if (e === null) { say("Entries are closed." + (token() ? " You did not enter this draw." : "")); return; }
        if (e && (e.result === "won" || e.result === "lost" || e.result === "withdrawn")) {
          if (e.result === "won") { say(describe(e), "ok"); }
          else if (e.result === "lost") { say("The draw is made: you were not drawn. Your hold was released.", ""); }
          else { say("Entries are closed. You withdrew your entry."); }
          return;
        }
        if (e) { say("Entries are closed: the draw is being made. This page shows your result."); }
        waited += wait;
        if (waited >= 60000) { wait = Math.min(30000, wait * 2); }
        setTimeout(look, wait);
      });
    }
    look();
  }

  radios.forEach(function (r) { r.addEventListener("change", function () { render(); if (!busy && !live()) { say("Size " + sizeName(r.value) + " chosen."); } }); });
  if (qtyInput) { qtyInput.addEventListener("input", render); }
  window.addEventListener("fg-token", function () {
    refresh(function (e) {
      if (phase() !== "open") { return; }
      if (e) { held(e); } else if (e === null) { say(radios.length ? "Entries are open: choose a size and enter." : "Entries are open."); }
    });
  });

  tick();
  render();
  if (phase() !== "closed") {
    // Back on the page (a reload, or from a payment method that left it):
    // show the entry, and a pending one's hold to authorise.
    refresh(function (e) {
      if (!e || phase() !== "open") { return; }
      if (e.state === "pending") { held(e); }
      else if (e.state === "entered") { say("You are in the draw. Results come when entries close.", "ok"); }
    });
  }
  setInterval(tick, 250);
})();
