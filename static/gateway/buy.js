// buy.js drives the item page's buy button: it polls the sale's status, keeps
// the buyer token in sessionStorage, and posts the order. On a draw sale's
// page it only takes the token in (draw.js does the rest).
(function () {
  "use strict";
  var root = document.getElementById("sale");
  if (!root) { return; }
  var saleID = root.getAttribute("data-sale");
  var buy = document.getElementById("buy");
  var statusLine = document.getElementById("status");
  var countdown = document.getElementById("countdown");
  var remaining = document.getElementById("remaining");
  var tokenBox = document.getElementById("token-box");
  var tokenInput = document.getElementById("token");
  var state = "";
  var startsAt = null;
  var busy = false;
  var done = false;
  var payBtn = document.getElementById("pay");
  var orderID = "";

  // The size picker, for a sale sold in variants: one button per variant,
  // built from the polled sale; a variant with nothing left (from the poll,
  // or a 409 sold_out naming it) is greyed and cannot be chosen, without a
  // reload. A sale without variants never shows it.
  var sizes = document.getElementById("sizes");
  var sizeList = document.getElementById("size-list");
  var variants = [];    // the sale's variants, from the last poll
  var sizeBtns = {};    // variant id → its button
  var soldOut = {};     // variant id → until when a 409 named it sold out (ms)
  var chosen = "";      // the chosen variant's id
  function variantGone(v) {
    return v.remaining <= 0 || (soldOut[v.id] || 0) > Date.now();
  }
  function renderSizes() {
    if (!variants.length) { sizes.hidden = true; return; }
    sizes.hidden = false;
    variants.forEach(function (v) {
      var b = sizeBtns[v.id];
      if (!b) {
        b = document.createElement("button");
        b.type = "button";
        b.setAttribute("data-variant", v.id);
        b.addEventListener("click", function () {
          if (b.disabled) { return; }
          chosen = v.id;
          renderSizes();
          render();
        });
        sizeBtns[v.id] = b;
        sizeList.appendChild(b);
      }
      var gone = variantGone(v);
      if (gone && chosen === v.id) { chosen = ""; }
      b.textContent = v.name || v.id;
      b.disabled = gone;
      b.setAttribute("aria-disabled", gone ? "true" : "false");
      b.setAttribute("aria-pressed", chosen === v.id ? "true" : "false");
      b.setAttribute("aria-label", (v.name || v.id) + (gone ? ", sold out" : ", " + v.remaining + " left"));
      b.title = gone ? "Sold out" : v.remaining + " left";
    });
  }

  // A token given in the URL is moved into sessionStorage and taken out of
  // the address bar (and so out of the history, bookmarks and Referer); the
  // server never reads it from the URL. The fragment form (#token=...) is the
  // one to hand out: browsers never send a fragment, so the token reaches no
  // server's or proxy's log. The query form (?token=...) is still accepted.
  var params = new URLSearchParams(window.location.search);
  var frag = new URLSearchParams(window.location.hash.replace(/^#/, ""));
  var given = frag.get("token") || params.get("token");
  // A payment method that left the page comes back with the intent and
  // its client secret in the query: they are taken out of the address too.
  var returned = params.get("redirect_status");
  if (given || params.has("token") || frag.has("token") || params.has("redirect_status")) {
    if (given) { sessionStorage.setItem("flashgate-token", given); }
    params.delete("token");
    frag.delete("token");
    ["payment_intent", "payment_intent_client_secret", "redirect_status"].forEach(function (k) { params.delete(k); });
    var q = params.toString(), h = frag.toString();
    history.replaceState(null, "", window.location.pathname + (q ? "?" + q : "") + (h ? "#" + h : ""));
  }
  function token() { return sessionStorage.getItem("flashgate-token") || ""; }
  if (token()) { tokenInput.value = token(); } else { tokenBox.open = true; }
  // A draw sale's page has no buy button: draw.js drives it, with the
  // token taken in above.
  var drawSale = root.hasAttribute("data-draw");
  document.getElementById("save-token").addEventListener("click", function () {
    sessionStorage.setItem("flashgate-token", tokenInput.value.trim());
    tokenBox.open = false;
    if (drawSale) { window.dispatchEvent(new Event("fg-token")); return; }
    render();
  });
  if (drawSale) { return; }

  function say(text, kind) {
    statusLine.textContent = text;
    statusLine.className = "status" + (kind ? " " + kind : "");
  }

  function pad(n) { return (n < 10 ? "0" : "") + n; }
  function tick() {
    if (state !== "upcoming" || !startsAt) { return; }
    var ms = startsAt - Date.now();
    if (ms <= 0) { countdown.textContent = "Starting…"; return; }
    var s = Math.floor(ms / 1000);
    var d = Math.floor(s / 86400);
    countdown.textContent = "Starts in " + (d > 0 ? d + "d " : "") +
      pad(Math.floor(s / 3600) % 24) + ":" + pad(Math.floor(s / 60) % 60) + ":" + pad(s % 60);
  }

  // A fair queue (queue.js) holds the button until the buyer is admitted.
  var fq = window.flashgateQueue;
  function held() { return !!(fq && fq.fair() && !fq.admitted()); }
  window.addEventListener("fq-change", function () { render(); });

  function render() {
    buy.disabled = done || busy || state !== "open" || held() || (variants.length > 0 && !chosen);
    if (done || busy) { return; }
    if (state === "open" && variants.length > 0 && !chosen) {
      say(variants.every(variantGone) ? "Every size is sold out." : "Choose a size.");
      countdown.textContent = "On sale now";
      return;
    }
    switch (state) {
      case "open": say(token() ? "The sale is open." : "The sale is open: paste your token below to buy."); countdown.textContent = "On sale now"; break;
      case "upcoming": say("Not started yet."); tick(); break;
      case "sold_out": say("Sold out.", "err"); countdown.textContent = "Sale over"; break;
      case "closed": say("This sale is closed.", "err"); countdown.textContent = "Sale over"; break;
      default: break;
    }
  }

  function poll() {
    fetch("/api/sales/" + encodeURIComponent(saleID), { headers: { "Accept": "application/json" } })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (s) {
        if (!s) { return; }
        state = s.state;
        startsAt = s.starts_at ? Date.parse(s.starts_at) : null;
        remaining.textContent = String(s.remaining);
        variants = s.variants || [];
        renderSizes();
        if (fq) { fq.onSale(s); }
        render();
      })
      .catch(function () { /* The next poll tries again. */ });
  }

  var messages = {
    not_started: "The sale has not started yet.",
    sold_out: "Sold out, sorry.",
    closed: "This sale is closed.",
    rate_limited: "Too many tries: wait a moment and press again.",
    unauthorized: "Your token was not accepted: paste a valid one below.",
    not_found: "This sale does not exist.",
    bad_request: "The request was not understood.",
    unavailable: "The shop is busy: press again in a moment.",
    not_admitted: "Not your turn yet: wait for the queue.",
    not_payable: "This order can no longer be paid."
  };

  buy.addEventListener("click", function () {
    if (!token()) { tokenBox.open = true; say("Paste your buyer token first.", "err"); return; }
    busy = true;
    buy.disabled = true;
    say("Buying…");
    fetch("/api/sales/" + encodeURIComponent(saleID) + "/orders", {
      method: "POST",
      headers: fq && fq.ticket() ? { "Authorization": "Bearer " + token(), "Content-Type": "application/json", "X-Queue-Ticket": fq.ticket() } :
        { "Authorization": "Bearer " + token(), "Content-Type": "application/json" },
      body: JSON.stringify(chosen ? { variant: chosen, quantity: 1 } : { quantity: 1 })
    }).then(function (r) {
      return r.json().then(function (b) { return { status: r.status, body: b, ticket: r.headers.get("X-Queue-Ticket") }; });
    }).then(function (res) {
      busy = false;
      if (res.status === 201) {
        done = true;
        if (fq && fq.fair()) { fq.bought(res.ticket); }
        say("Got it! Your order is " + res.body.order_id + ".", "ok");
        offerPay(res.body.order_id);
      } else if (res.body.error === "already_purchased") {
        done = true;
        say("Already purchased: your order is " + res.body.order_id + ".", "ok");
        offerPay(res.body.order_id);
      } else if (res.body.error === "sold_out" && res.body.variant) {
        // One size sold out while others sell: grey it now, not at the
        // next poll (which may still count its last units for a moment).
        soldOut[res.body.variant] = Date.now() + 5000;
        var gone = sizeBtns[res.body.variant];
        renderSizes();
        say((gone ? gone.textContent : "That size") + " just sold out: choose another size.", "err");
      } else {
        if (res.body.error === "unauthorized") { tokenBox.open = true; }
        say(messages[res.body.error] || "Something went wrong: " + res.body.error, "err");
      }
      buy.disabled = done || state !== "open" || held() || (variants.length > 0 && !chosen);
    }).catch(function () {
      busy = false;
      say("The network failed: press again.", "err");
      buy.disabled = state !== "open";
    });
  });

  // The pay button: with simulated payments the order is paid at once;
  // with a payment provider the answer is "paying" with the intent and
  // its client secret. With the shop's publishable key (data-stripe-key)
  // the page mounts Stripe's Payment Element with that secret, and the
  // next press confirms the payment there (a declined card's message is
  // shown, and the buyer may try again); without it the page only says
  // the payment started. Either way it then follows the order until the
  // provider's webhook marks it paid.
  var stripeKey = root.getAttribute("data-stripe-key") || "";
  var payBox = document.getElementById("payment");
  var stripe = null;
  var elements = null; // the mounted Payment Element's group, once paying
  var payingKey = "flashgate-paying-" + saleID;
  function offerPay(id) {
    if (!payBtn || !id) { return; }
    orderID = id;
    payBtn.hidden = false;
    payBtn.disabled = false;
  }
  // follow looks at the order every second, n times at most, until it is
  // settled; a newer follow ends the older one.
  var followGen = 0;
  function follow(n) { followChain(++followGen, n); }
  function followChain(gen, n) {
    if (gen !== followGen) { return; }
    var again = function () { if (n > 0) { setTimeout(function () { followChain(gen, n - 1); }, 1000); } };
    fetch("/api/orders/" + encodeURIComponent(orderID), { headers: { "Authorization": "Bearer " + token() } })
      .then(function (r) { return r.json(); })
      .then(function (o) {
        if (o.status === "paid") { payBtn.hidden = true; payBox.hidden = true; sessionStorage.removeItem(payingKey); say("Paid: thank you! Order " + orderID + ".", "ok"); return; }
        if (o.status === "expired" || o.status === "cancelled" || o.status === "refunded") { payBtn.hidden = true; payBox.hidden = true; say("The order is " + o.status + ".", "err"); return; }
        again();
      })
      .catch(again); // The next look tries again.
  }
  function mountPayment(secret) {
    if (!stripeKey || !secret) { return false; }
    if (typeof window.Stripe !== "function") {
      say("The payment form could not be loaded: reload the page and press pay again.", "err");
      payBtn.disabled = false;
      return true;
    }
    try {
      stripe = stripe || window.Stripe(stripeKey);
      elements = stripe.elements({ clientSecret: secret });
      elements.create("payment").mount("#payment-element");
    } catch (e) {
      elements = null;
      say("The payment form could not be loaded: reload the page and press pay again.", "err");
      payBtn.disabled = false;
      return true;
    }
    sessionStorage.setItem(payingKey, orderID);
    payBox.hidden = false;
    payBtn.textContent = "Pay now";
    payBtn.disabled = false;
    say("Enter your payment details, then press Pay now.");
    return true;
  }
  function confirmPayment() {
    payBtn.disabled = true;
    say("Confirming the payment…");
    // A payment method that must leave the page (a bank's page) comes
    // back to this page without the token in its address; the order id
    // waits in sessionStorage (payingKey).
    stripe.confirmPayment({ elements: elements, redirect: "if_required",
      confirmParams: { return_url: window.location.origin + window.location.pathname } })
      .then(function (res) {
        if (res && res.error) {
          payBtn.disabled = false;
          say(res.error.message || "The payment failed: check the details and press Pay now again.", "err");
          return;
        }
        payBtn.hidden = true;
        payBox.hidden = true;
        say("Payment sent: waiting for the shop to confirm it…", "ok");
        follow(300);
      }, function () {
        payBtn.disabled = false;
        say("The network failed: press Pay now again.", "err");
      });
  }
  if (payBtn) {
    payBtn.addEventListener("click", function () {
      if (elements && stripe) { confirmPayment(); return; }
      payBtn.disabled = true;
      say("Paying…");
      fetch("/api/orders/" + encodeURIComponent(orderID) + "/pay", {
        method: "POST", headers: { "Authorization": "Bearer " + token() }
      }).then(function (r) {
        return r.json().then(function (b) { return { status: r.status, body: b }; });
      }).then(function (res) {
        if (res.status === 200 && res.body.status === "paid") {
          payBtn.hidden = true;
          say("Paid: thank you! Order " + orderID + ".", "ok");
        } else if (res.status === 200 && res.body.status === "paying") {
          payBtn.setAttribute("data-intent", res.body.payment_intent || "");
          if (mountPayment(res.body.client_secret)) { return; }
          say("Payment started (" + res.body.payment_intent + "): complete it at the payment provider; this page shows when it is paid.", "ok");
          follow(300);
        } else {
          payBtn.disabled = false;
          say(messages[res.body.error] || "Payment failed: " + res.body.error, "err");
        }
      }).catch(function () {
        payBtn.disabled = false;
        say("The network failed: press pay again.", "err");
      });
    });
  }
  // Back from a payment method that left the page: follow the order it
  // was paying.
  if (returned && sessionStorage.getItem(payingKey)) {
    done = true;
    orderID = sessionStorage.getItem(payingKey);
    if (returned === "failed") {
      offerPay(orderID);
      say("The payment did not go through: press pay to try again.", "err");
    } else {
      say("Checking your payment…");
      follow(300);
    }
  }

  poll();
  setInterval(poll, 1000);
  setInterval(tick, 250);
})();
