// The stand-in's Stripe.js: the subset of Stripe.js flashgate's item page
// uses — Stripe(key), stripe.elements({clientSecret}),
// elements.create("payment"), element.mount(target) and
// stripe.confirmPayment({elements, redirect: "if_required"}) — talking to
// the stand-in's API on the origin this script came from. Its Payment
// Element is one card-number field: the test card 4000000000000002 is
// declined, as Stripe's is; any other number pays.
(function () {
  "use strict";
  var api = new URL(document.currentScript.src).origin;

  function fail(type, code, message) {
    return { error: { type: type, code: code, message: message } };
  }

  window.Stripe = function (key) {
    if (typeof key !== "string" || key.indexOf("pk_") !== 0) {
      throw new Error("Stripe(): a publishable key (pk_…) is required");
    }
    return {
      elements: function (opts) {
        var secret = opts && opts.clientSecret;
        if (!secret) { throw new Error("elements(): clientSecret is required"); }
        var group = { _secret: secret, _input: null };
        group.create = function (type) {
          if (type !== "payment") { throw new Error("create(): only the Payment Element"); }
          return {
            mount: function (target) {
              var el = typeof target === "string" ? document.querySelector(target) : target;
              if (!el) { throw new Error("mount(): no such element"); }
              var label = document.createElement("label");
              label.textContent = "Card number ";
              var input = document.createElement("input");
              input.name = "cardnumber";
              input.autocomplete = "cc-number";
              input.inputMode = "numeric";
              input.setAttribute("data-stripelocal", "card");
              label.appendChild(input);
              el.replaceChildren(label);
              group._input = input;
            }
          };
        };
        return group;
      },
      confirmPayment: function (opts) {
        var group = opts && opts.elements;
        if (!group || !group._input) {
          return Promise.resolve(fail("invalid_request_error", "", "confirmPayment(): a mounted Payment Element is required"));
        }
        var number = group._input.value.replace(/\s+/g, "");
        if (!/^\d{12,19}$/.test(number)) {
          return Promise.resolve(fail("validation_error", "incomplete_number", "Your card number is incomplete."));
        }
        var secret = group._secret;
        var id = secret.split("_secret_")[0];
        var body = new URLSearchParams({
          key: key, client_secret: secret,
          "payment_method_data[type]": "card", "payment_method_data[card][number]": number,
          return_url: (opts.confirmParams && opts.confirmParams.return_url) || ""
        });
        return fetch(api + "/v1/payment_intents/" + encodeURIComponent(id) + "/confirm", { method: "POST", body: body })
          .then(function (r) { return r.json(); })
          .then(function (b) { return b.error ? { error: b.error } : { paymentIntent: b }; },
            function () { return fail("api_connection_error", "", "The payment provider could not be reached."); });
      }
    };
  };
})();
