// queue.js drives the item page's fair queue: it shows the queue, solves the
// entry's proof of work in a Web Worker (pow.js), enters, polls the buyer's
// place at the pace the server asks for, and tells buy.js (through
// window.flashgateQueue and the "fq-change" event) when the buyer is
// admitted, and which ticket to send with the purchase.
(function () {
  "use strict";
  var root = document.getElementById("sale");
  var box = document.getElementById("queue");
  if (!root || !box) { return; }
  var saleID = root.getAttribute("data-sale");
  var line = document.getElementById("queue-line");
  var bar = document.getElementById("queue-bar");
  var pos = document.getElementById("queue-pos");
  var ahead = document.getElementById("queue-ahead");
  var eta = document.getElementById("queue-eta");
  var enterBtn = document.getElementById("enter");
  var work = document.getElementById("pow-bar");
  var key = "flashgate-ticket-" + saleID;
  // entryKey keeps the ticket from before a purchase: a purchased ticket
  // stands for its order only while the order holds the unit.
  var entryKey = "flashgate-entry-" + saleID;
  var fair = false, state = "", entering = false, timer = null, queueOpen = false;

  function token() { return sessionStorage.getItem("flashgate-token") || ""; }
  function ticket() { return sessionStorage.getItem(key) || ""; }
  function changed() { window.dispatchEvent(new Event("fq-change")); }

  window.flashgateQueue = {
    fair: function () { return fair; },
    admitted: function () { return state === "admitted"; },
    ticket: ticket,
    bought: function (t) {
      if (t) {
        if (ticket()) { sessionStorage.setItem(entryKey, ticket()); }
        sessionStorage.setItem(key, t);
      }
      state = "purchased";
      line.textContent = words.purchased;
      bar.value = 100;
      ahead.textContent = eta.textContent = "";
    },
    onSale: onSale
  };

  var words = {
    prequeue: "You are in the queue. Places are drawn at random at the start: arriving early buys nothing.",
    waiting: "You are in the queue.",
    admitted: "It's your turn: buy now.",
    purchased: "You bought your unit.",
    expired: "Your turn passed without a purchase.",
    closed: "The queue is closed.",
    reset: "The queue was started again: join it again."
  };

  function show(s) {
    enterBtn.hidden = !!ticket() || !queueOpen;
    enterBtn.disabled = entering;
    if (!s) { return; }
    line.textContent = words[s.state] || s.state;
    pos.textContent = s.position != null ? "Position " + s.position : "";
    ahead.textContent = s.ahead != null ? s.ahead + " ahead of you" : "";
    eta.textContent = s.eta_seconds != null ? "about " + Math.max(1, Math.round(s.eta_seconds / 60)) + " min" : "";
    if (s.state === "admitted" || s.state === "purchased") { bar.value = 100; }
    else if (s.position) { bar.value = Math.min(99, Math.floor(100 * s.admitted_position / s.position)); }
    else { bar.value = 0; }
  }

  function onSale(s) {
    if (!s.queue) { return; }
    fair = true;
    box.hidden = false;
    queueOpen = s.queue.open && s.state !== "closed";
    if (!ticket() && !entering) {
      line.textContent = queueOpen ? "Join the queue to buy: " + s.queue.entrants + " in it so far." :
        "The queue opens at " + new Date(s.queue.opens_at).toLocaleString() + ".";
    }
    show();
    if (ticket() && !timer) { poll(); }
  }

  function poll() {
    timer = null;
    if (!ticket() || !token()) { return; }
    fetch("/api/sales/" + encodeURIComponent(saleID) + "/queue", {
      headers: { "Authorization": "Bearer " + token(), "X-Queue-Ticket": ticket(), "Accept": "application/json" }
    }).then(function (r) {
      if (r.status === 404) { sessionStorage.removeItem(key); show(); return null; }
      if (r.status === 409) {
        // queue_reset: the ticket's queue is gone; the buyer joins anew.
        sessionStorage.removeItem(key);
        sessionStorage.removeItem(entryKey);
        line.textContent = words.reset;
        show();
        return "stop";
      }
      // A reissued ticket (the entry with its rank key) is cheaper to judge.
      var t = r.headers.get("X-Queue-Ticket");
      if (r.ok && t) { sessionStorage.setItem(key, t); }
      return r.ok ? r.json() : null;
    }).then(function (s) {
      if (s === "stop") { return; }
      if (s && s.state === "purchased" && s.order_id) { return orderLive(s); }
      return s;
    }).then(function (s) {
      if (s === "stop" || s === "again") {
        if (s === "again") { timer = setTimeout(poll, 0); }
        return;
      }
      var next = 2000;
      if (s) {
        var was = state;
        state = s.state;
        show(s);
        if (was !== state) { changed(); }
        next = s.poll_after_ms;
      }
      if (next > 0) { timer = setTimeout(poll, next); }
    }).catch(function () { timer = setTimeout(poll, 3000); });
  }

  // orderLive checks the order a purchased ticket bought: while it holds
  // the unit the state stands (an unpaid one is looked at again in 30 s);
  // once it is expired, cancelled or refunded, the ticket from before the
  // purchase takes over ("again": poll with it).
  function orderLive(s) {
    return fetch("/api/orders/" + encodeURIComponent(s.order_id), {
      headers: { "Authorization": "Bearer " + token(), "Accept": "application/json" }
    }).then(function (r) { return r.ok ? r.json() : null; }).then(function (o) {
      if (o && (o.status === "reserved" || o.status === "pending_payment")) {
        // Not paid yet: it may still expire or be cancelled; look again.
        s.poll_after_ms = 30000;
        return s;
      }
      if (!o || ["expired", "cancelled", "refunded"].indexOf(o.status) < 0) { return s; }
      var before = sessionStorage.getItem(entryKey);
      sessionStorage.removeItem(entryKey);
      if (before) { sessionStorage.setItem(key, before); } else { sessionStorage.removeItem(key); }
      line.textContent = "Your order " + o.status + ".";
      return before ? "again" : "stop";
    }, function () { return s; });
  }

  function solve(c) {
    return new Promise(function (resolve, reject) {
      if (c.maxnumber <= 0 && c.challenge === "") { resolve(null); return; }
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

  enterBtn.addEventListener("click", function () {
    if (!token()) { document.getElementById("token-box").open = true; line.textContent = "Paste your buyer token first."; return; }
    entering = true;
    show();
    line.textContent = "Proving you are not a bot (this takes a moment)…";
    // A solution is refused (400) when its challenge expired or the
    // difficulty rose meanwhile: one more try with a fresh challenge.
    function attempt(tries) {
      return fetch("/api/sales/" + encodeURIComponent(saleID) + "/challenge").then(function (r) {
        if (!r.ok) { throw new Error("challenge " + r.status); }
        return r.json();
      }).then(solve).then(function (payload) {
        return fetch("/api/sales/" + encodeURIComponent(saleID) + "/queue", {
          method: "POST",
          headers: { "Authorization": "Bearer " + token(), "Content-Type": "application/json" },
          body: JSON.stringify(payload ? { payload: payload } : {})
        });
      }).then(function (r) {
        return r.json().then(function (b) { return { status: r.status, body: b }; });
      }).then(function (res) {
        return res.status === 400 && tries > 1 ? attempt(tries - 1) : res;
      });
    }
    attempt(2).then(function (res) {
      entering = false;
      work.hidden = true;
      if (res.body.ticket) {
        sessionStorage.setItem(key, res.body.ticket);
        state = res.body.state;
        show(res.body);
        changed();
        if (!timer) { timer = setTimeout(poll, res.body.poll_after_ms || 1000); }
      } else {
        line.textContent = "Could not join the queue: " + res.body.error + ".";
        show();
      }
    }).catch(function () {
      entering = false;
      work.hidden = true;
      line.textContent = "Could not join the queue: press again.";
      show();
    });
  });
})();
