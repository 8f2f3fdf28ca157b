package systemtest

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane"
	"github.com/flashgate/flashgate/gateway"
	"github.com/flashgate/flashgate/internal/stripelocal"
	"github.com/flashgate/flashgate/internal/testenv/browsertest"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/payments"
	"github.com/flashgate/flashgate/sqldb"
)

// pagePay is the payments of a page system: none (the zero value), or
// --payments stripe against stand (the stand-in provider, served at
// standURL) with the item page's publishable key and the stand-in's
// Stripe.js, as cmd/flashgate wires them.
type pagePay struct {
	stand    *stripelocal.Server
	standURL string
	prov     *payments.Stripe
}

// controlplane gives the control plane the provider and the database as
// the payments' store.
func (p pagePay) controlplane(cfg *controlplane.Config, db *sqldb.DB) {
	if p.prov != nil {
		cfg.Payments, cfg.PaymentStore = p.prov, db
	}
}

// gateway gives the gateway the webhook route and the page its form.
func (p pagePay) gateway(cfg *gateway.Config, cp *controlplane.Service) {
	if p.prov != nil {
		cfg.Webhooks, cfg.MaxBodySize = cp, 64<<10
		cfg.StripePublishableKey, cfg.StripeJS = p.stand.PublishableKey, p.standURL+stripelocal.JSPath
	}
}

// newPagePay serves a stand-in provider on loopback for t.
func newPagePay(t *testing.T) pagePay {
	t.Helper()
	stand := stripelocal.New("sk_test_page", "whsec_page")
	stand.PublishableKey = "pk_test_page"
	ts := httptest.NewServer(stand)
	t.Cleanup(func() { ts.Close(); stand.Deliveries.Wait() })
	prov, err := payments.NewStripe(payments.StripeConfig{Key: stand.Key, WebhookSecret: stand.WebhookSecret, APIBase: ts.URL})
	if err != nil {
		t.Fatal(err)
	}
	return pagePay{stand: stand, standURL: ts.URL, prov: prov}
}

// payingPage opens a one-unit sale's item page with a publishable key in
// Chromium, buys, presses pay and waits for the stand-in's Payment Element:
// the page, the order id, and the system.
func payingPage(t *testing.T) (*pageSystem, pagePay, context.Context, string, func(string) string) {
	t.Helper()
	pay := newPagePay(t)
	s := startPageSystemPaying(t, nil, pay)
	pay.stand.SetWebhookURL(s.url + "/webhooks/stripe")
	const id = "paid-drop"
	if _, err := s.cp.CreateSale(s.ctx, flashgate.Sale{ID: id, Name: "Paid sneakers", PriceCents: 12900, Total: 1}); err != nil {
		t.Fatal(err)
	}
	if err := s.cp.Start(s.ctx, id); err != nil {
		t.Fatal(err)
	}
	ctx := browsertest.New(t, s.ctx, 900, 900, 60*time.Second)
	if err := chromedp.Do(ctx,
		chromedp.Navigate(s.url+"/sales/"+id+"#token="+s.token(t, "payer")),
		chromedp.WaitVisible(chromedp.CSS(`#buy`)),
	); err != nil {
		t.Fatalf("opening the item page: %v", err)
	}
	waitJS(t, ctx, "the buy button", `!document.getElementById('buy').disabled`, 10*time.Second)
	if _, err := chromedp.Run(ctx, chromedp.Click(chromedp.CSS(`#buy`))); err != nil {
		t.Fatalf("clicking buy: %v", err)
	}
	got := waitJS(t, ctx, "the order id", `(function(){ var s = document.getElementById('status');
		return s.textContent.indexOf("Got it!") === 0 ? s.textContent : ""; })()`, 10*time.Second)
	m := orderRe.FindStringSubmatch(got)
	if m == nil {
		t.Fatalf("page says %q, want an order id", got)
	}
	// The order is stored before it can be paid (the pay route waits 2 s
	// for the sink, then says not_payable).
	if _, ok := testwait.For(10*time.Second, func() bool { _, err := s.db.Order(s.ctx, m[1]); return err == nil }); !ok {
		t.Fatalf("order %s never reached the database", m[1])
	}
	waitJS(t, ctx, "the pay button", `!document.getElementById('pay').hidden && !document.getElementById('pay').disabled`, 5*time.Second)
	if _, err := chromedp.Run(ctx, chromedp.Click(chromedp.CSS(`#pay`))); err != nil {
		t.Fatalf("clicking pay: %v", err)
	}
	waitJS(t, ctx, "the Payment Element", `!document.getElementById('payment').hidden &&
		document.querySelector('#payment-element input[data-stripelocal=card]') &&
		document.getElementById('pay').textContent === "Pay now" && !document.getElementById('pay').disabled`, 10*time.Second)
	// The page's policy holds: a script from an origin it does not name
	// is refused (and the stand-in's, which it names, ran).
	blocked, err := chromedp.Run(ctx, chromedp.Evaluate[string](`new Promise(function (done) {
		document.addEventListener("securitypolicyviolation", function (e) { done(e.effectiveDirective + " " + e.blockedURI); });
		var el = document.createElement("script"); el.src = "http://127.0.0.2:9/evil.js"; document.head.appendChild(el);
	})`, chromedp.EvalAwaitPromise))
	if err != nil || !strings.HasPrefix(blocked, "script-src") || !strings.Contains(blocked, "127.0.0.2") {
		t.Fatalf("a script from another origin: violation %q (%v), want script-src refusing it", blocked, err)
	}
	// payWith types card into the Payment Element, presses Pay now and
	// returns the status line once the page has an answer.
	payWith := func(card string) string {
		t.Helper()
		if err := chromedp.Do(ctx,
			chromedp.SetValue(chromedp.CSS(`#payment-element input[data-stripelocal=card]`), card),
			chromedp.Click(chromedp.CSS(`#pay`)),
		); err != nil {
			t.Fatalf("paying with %s: %v", card, err)
		}
		return waitJS(t, ctx, "the payment's answer", `(function(){ var s = document.getElementById('status');
			return s.textContent.indexOf("Paid:") === 0 || s.className === "status err" ? s.className + " | " + s.textContent : ""; })()`, 20*time.Second)
	}
	return s, pay, ctx, m[1], payWith
}

// TestItemPagePays drives the item page with a publishable key in headless
// Chromium against every tier in-process (real redis-server, SQLite) and a
// stand-in of Stripe (its API and its Stripe.js, on loopback): buy, pay,
// the Payment Element mounted with the order's client secret, a card
// confirmed at the stand-in, whose signed webhook makes the order paid,
// which the page shows and the database holds.
func TestItemPagePays(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test")
	}
	s, pay, ctx, orderID, payWith := payingPage(t)
	if got := payWith("4242 4242 4242 4242"); got != "status ok | Paid: thank you! Order "+orderID+"." {
		t.Fatalf("after paying: page says %q, want paid", got)
	}
	o, err := s.db.Order(s.ctx, orderID)
	if err != nil || o.Status != flashgate.StatusPaid {
		t.Fatalf("order %s in the database: %v (%v), want paid", orderID, o.Status, err)
	}
	p, err := s.db.Payment(s.ctx, orderID)
	if err != nil || p.Status != "succeeded" || p.Outcome != "paid" {
		t.Errorf("payment of %s: %+v (%v), want succeeded, outcome paid", orderID, p, err)
	}
	if in, ok := pay.stand.Intent(p.IntentID); !ok || in.Status != "succeeded" || in.Metadata["order_id"] != orderID {
		t.Errorf("intent at the provider: %+v, want the order's, succeeded", in)
	}
	// Back from a payment method that left the page (Stripe appends the
	// intent, its client secret and redirect_status to return_url): the
	// page takes them out of the address and follows the order it was
	// paying.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`sessionStorage.setItem("flashgate-paying-paid-drop", "`+orderID+`"), true`)); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx,
		chromedp.Navigate(s.url+"/sales/paid-drop?payment_intent="+p.IntentID+"&payment_intent_client_secret=pi_secret_x&redirect_status=succeeded"),
	); err != nil {
		t.Fatalf("coming back from the provider: %v", err)
	}
	waitJS(t, ctx, "the order followed after the return", `document.getElementById('status').textContent === "Paid: thank you! Order `+orderID+`."`, 10*time.Second)
	if loc, err := chromedp.Run(ctx, chromedp.Location()); err != nil || strings.Contains(loc, "secret") || strings.Contains(loc, "?") {
		t.Errorf("address bar %q (%v): the provider's parameters should be taken out of it", loc, err)
	}
}

// TestItemPageCardDeclined: the same with Stripe's declined test card: the
// page shows the provider's message, the order stays payable (pending
// payment in the database, its intent waiting for a payment method), and
// another card then pays it.
func TestItemPageCardDeclined(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test")
	}
	s, pay, _, orderID, payWith := payingPage(t)
	if got := payWith(stripelocal.DeclinedCard); got != "status err | Your card was declined." {
		t.Fatalf("after a declined card: page says %q, want the decline's message", got)
	}
	p, err := s.db.Payment(s.ctx, orderID)
	if err != nil {
		t.Fatal(err)
	}
	if in, _ := pay.stand.Intent(p.IntentID); in.Status != "requires_payment_method" {
		t.Errorf("intent after the decline: %s, want requires_payment_method", in.Status)
	}
	// The stand-in's payment_failed event is stored (the payment's row
	// updated after its checkout) and leaves the order payable.
	if _, ok := testwait.For(10*time.Second, func() bool {
		p, err := s.db.Payment(s.ctx, orderID)
		return err == nil && p.UpdatedAt.After(p.CreatedAt)
	}); !ok {
		t.Errorf("the payment_failed event never reached the payment")
	}
	if o, err := s.db.Order(s.ctx, orderID); err != nil || o.Status != flashgate.StatusPendingPayment {
		t.Fatalf("order after the decline: %v (%v), want pending_payment", o.Status, err)
	}
	if got := payWith("4242424242424242"); got != "status ok | Paid: thank you! Order "+orderID+"." {
		t.Fatalf("paying again with another card: page says %q, want paid", got)
	}
	if o, err := s.db.Order(s.ctx, orderID); err != nil || o.Status != flashgate.StatusPaid {
		t.Fatalf("order after the second card: %v (%v), want paid", o.Status, err)
	}
	if n := len(pay.stand.Intents()); n != 1 {
		t.Errorf("intents at the provider: %d, want 1 (the same intent, paid on the second try)", n)
	}
}
