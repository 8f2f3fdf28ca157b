package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stripe/stripe-go/v82"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/stripelocal"
	"github.com/flashgate/flashgate/internal/testenv/pgtest"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/lua"
)

// payServe is one `serve` with --payments stripe against a local stand-in
// of Stripe's API.
type payServe struct {
	t              *testing.T
	ctx            context.Context
	s              *system
	stand          *stripelocal.Server
	public, admin  string
	secret, tokAdm string
	standBase      string
	rdb            redis.UniversalClient
}

const payKey, payHookSecret = "sk_test_local", "whsec_local"

func startPayServe(t *testing.T, ctx context.Context, db string, window, grace time.Duration, extra ...string) *payServe {
	t.Helper()
	rs := redistest.Start(t)
	stand := stripelocal.New(payKey, payHookSecret)
	ts := httptest.NewServer(stand)
	t.Cleanup(ts.Close)
	var errb bytes.Buffer
	p := &payServe{t: t, ctx: ctx, stand: stand, secret: "pay-secret", tokAdm: "pay-admin", standBase: ts.URL}
	cfg, err := parseConfig("serve", append([]string{"--redis", rs.URL, "--db", db,
		"--jwt-secret", p.secret, "--admin-token", p.tokAdm,
		"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
		"--state-refresh", "20ms", "--log-level", "error",
		"--payments", "stripe", "--stripe-api-base", ts.URL,
		"--payment-window", window.String(), "--payment-grace", grace.String()}, extra...),
		&errb, env(map[string]string{"FLASHGATE_STRIPE_KEY": payKey, "FLASHGATE_STRIPE_WEBHOOK_SECRET": payHookSecret}))
	if err != nil {
		t.Fatalf("parseConfig: %v (%s)", err, errb.String())
	}
	st := newStack(cfg, &errb)
	t.Cleanup(st.close)
	s, c, g, public, admin, err := serveAll(ctx, st, cfg)
	if err != nil {
		t.Fatalf("serveAll: %v", err)
	}
	t.Cleanup(func() { g.cancel(); _ = g.wait() })
	p.s, p.public, p.admin, p.rdb = s, public, admin, c.primary
	return p
}

type payAnswer struct {
	status int
	body   map[string]any
	raw    string
}

func (p *payServe) do(method, url, token string, body []byte, hdr map[string]string) payAnswer {
	p.t.Helper()
	req, _ := http.NewRequestWithContext(p.ctx, method, url, bytes.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	a := payAnswer{status: res.StatusCode, raw: string(raw)}
	_ = json.Unmarshal(raw, &a.body)
	return a
}

// sale creates and opens a sale of total units at price cents.
func (p *payServe) sale(id string, total, price int64) {
	p.t.Helper()
	if _, err := p.s.cp.CreateSale(p.ctx, flashgate.Sale{ID: id, Name: id, PriceCents: price, Total: total, AdmitRatio: 3}); err != nil {
		p.t.Fatalf("CreateSale: %v", err)
	}
	if err := p.s.cp.Start(p.ctx, id); err != nil {
		p.t.Fatalf("Start: %v", err)
	}
	if err := waitOpen(p.ctx, p.public, id, 20*time.Second); err != nil {
		p.t.Fatal(err)
	}
}

func (p *payServe) token(user string) string {
	tok, err := mintToken([]byte(p.secret), user, time.Now().Add(time.Hour))
	if err != nil {
		p.t.Fatal(err)
	}
	return tok
}

// buy reserves a unit of sale for user and waits until its row is stored.
func (p *payServe) buy(sale, user string) (orderID, tok string) {
	p.t.Helper()
	tok = p.token(user)
	a := p.do("POST", p.public+"/api/sales/"+sale+"/orders", tok, nil, nil)
	if a.status != 201 {
		p.t.Fatalf("buy %s: got %d %s, want 201", user, a.status, a.raw)
	}
	orderID, _ = a.body["order_id"].(string)
	testwait.Eventually(p.t, 20*time.Second, func() bool {
		_, err := p.s.db.Order(p.ctx, orderID)
		return err == nil
	}, "order %s stored", orderID)
	return orderID, tok
}

func (p *payServe) pay(orderID, tok string) payAnswer {
	p.t.Helper()
	return p.do("POST", p.public+"/api/orders/"+orderID+"/pay", tok, nil, nil)
}

// hook delivers a webhook signed at t with secret.
func (p *payServe) hook(payload []byte, t time.Time, secret string) payAnswer {
	p.t.Helper()
	sig := stripelocal.New("", secret).Sign(payload, t)
	return p.do("POST", p.public+"/webhooks/stripe", "", payload, map[string]string{"Stripe-Signature": sig, "Content-Type": "application/json"})
}

// event delivers a well-signed event of typ about intent.
func (p *payServe) event(evID, typ, intent, status string) payAnswer {
	p.t.Helper()
	a := p.hook(p.stand.Event(evID, typ, intent, status), time.Now(), payHookSecret)
	if a.status != 200 {
		p.t.Fatalf("webhook %s %s: got %d %s, want 200", evID, typ, a.status, a.raw)
	}
	return a
}

func (p *payServe) order(id string) flashgate.Order {
	p.t.Helper()
	o, err := p.s.db.Order(p.ctx, id)
	if err != nil {
		p.t.Fatalf("order %s: %v", id, err)
	}
	return o
}

func (p *payServe) payment(id string) flashgate.Payment {
	p.t.Helper()
	pm, err := p.s.db.Payment(p.ctx, id)
	if err != nil {
		p.t.Fatalf("payment of %s: %v", id, err)
	}
	return pm
}

func (p *payServe) waitOrder(id string, want flashgate.OrderStatus, outcome string) {
	p.t.Helper()
	if d, ok := testwait.For(20*time.Second, func() bool {
		o, err := p.s.db.Order(p.ctx, id)
		if err != nil || o.Status != want {
			return false
		}
		pm, err := p.s.db.Payment(p.ctx, id)
		return err == nil && pm.Outcome == outcome
	}); !ok {
		p.t.Fatalf("waited %v for order %s %s with payment outcome %q: got %s and %+v",
			d, id, want, outcome, p.order(id).Status, p.paymentOrZero(id))
	}
}

func (p *payServe) paymentOrZero(id string) flashgate.Payment {
	pm, _ := p.s.db.Payment(p.ctx, id)
	return pm
}

// intentsOf returns the stand-in's intents of an order.
func (p *payServe) intentsOf(orderID string) []stripelocal.Intent {
	var out []stripelocal.Intent
	for _, in := range p.stand.Intents() {
		if in.Metadata["order_id"] == orderID {
			out = append(out, in)
		}
	}
	return out
}

// refundsOf returns the stand-in's refunds of an intent.
func (p *payServe) refundsOf(intent string) int {
	n := 0
	for _, r := range p.stand.Refunds() {
		if r.PaymentIntent == intent {
			n++
		}
	}
	return n
}

// checkout pays orderID and checks the answer: 200 paying, an intent and
// its client secret.
func (p *payServe) checkout(orderID, tok string) string {
	p.t.Helper()
	a := p.pay(orderID, tok)
	pi, _ := a.body["payment_intent"].(string)
	if a.status != 200 || a.body["status"] != "paying" || pi == "" || a.body["client_secret"] == "" || a.body["order_id"] != orderID {
		p.t.Fatalf("pay %s: got %d %s, want 200 paying with payment_intent and client_secret", orderID, a.status, a.raw)
	}
	return pi
}

// createIntent creates an order's intent at the stand-in the way the
// checkout does (same idempotency key and metadata), without flashgate:
// a checkout whose answer was lost before its payment was stored.
func (p *payServe) createIntent(orderID string, amount int64) string {
	p.t.Helper()
	sc := stripe.NewClient(payKey, stripe.WithBackends(stripe.NewBackendsWithConfig(&stripe.BackendConfig{
		URL: stripe.String(p.standBase), LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull}})))
	params := &stripe.PaymentIntentCreateParams{Amount: stripe.Int64(amount), Currency: stripe.String("usd")}
	params.SetIdempotencyKey("flashgate-order-" + orderID)
	params.AddMetadata("order_id", orderID)
	pi, err := sc.V1PaymentIntents.Create(p.ctx, params)
	if err != nil {
		p.t.Fatalf("creating intent: %v", err)
	}
	return pi.ID
}

// TestPaymentsStripe runs `serve` with --payments stripe against a local
// stand-in of Stripe's API on real Redis and on SQLite and PostgreSQL,
// through the public routes: checkout (idempotency key and amount checked
// at the stand-in, paying twice gives one intent), webhooks signed by
// stripe-go's test signer (duplicated three times, reordered, before the
// payment row, failed then succeeded, a bad signature, a stale timestamp),
// the provider answering 500 or stalling during checkout, late payments
// honoured or refunded, and the reconciliation of a lost webhook and of a
// payment never made.
func TestPaymentsStripe(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	dbs := []struct {
		name string
		url  func(t *testing.T) string
	}{
		{"sqlite", func(t *testing.T) string { return "sqlite://" + filepath.Join(t.TempDir(), "fg.db") }},
		{"postgres", func(t *testing.T) string { return pgtest.New(t) }},
	}
	for _, d := range dbs {
		t.Run(d.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			t.Run("webhooks", func(t *testing.T) { paymentWebhookCases(t, ctx, d.url(t)) })
			t.Run("late", func(t *testing.T) { paymentLateCases(t, ctx, d.url(t)) })
		})
	}
}

func paymentWebhookCases(t *testing.T, ctx context.Context, db string) {
	p := startPayServe(t, ctx, db, time.Minute, time.Minute)
	const price = 1250
	p.sale("pw", 50, price)

	t.Run("checkout", func(t *testing.T) {
		p.t = t
		o, tok := p.buy("pw", "u-checkout")
		pi := p.checkout(o, tok)
		if again := p.checkout(o, tok); again != pi {
			t.Errorf("paying twice: got intent %s, want %s", again, pi)
		}
		if ins := p.intentsOf(o); len(ins) != 1 || ins[0].Amount != price || ins[0].Currency != "usd" {
			t.Errorf("intents at the provider: got %+v, want one of %d usd", ins, price)
		}
		creates := 0
		for _, r := range p.stand.Requests() {
			if r.Method == "POST" && r.Path == "/v1/payment_intents" && r.Form["metadata[order_id]"] == o {
				creates++
				if r.IdempotencyKey != "flashgate-order-"+o || r.Form["amount"] != strconv.Itoa(price) {
					t.Errorf("create request: got key %q amount %q, want key %q amount %d", r.IdempotencyKey, r.Form["amount"], "flashgate-order-"+o, price)
				}
			}
		}
		if creates == 0 {
			t.Errorf("no create request for %s", o)
		}
		if a := p.do("GET", p.public+"/api/orders/"+o, tok, nil, nil); a.body["status"] != "paying" || a.body["payment_intent"] != pi {
			t.Errorf("GET order: got %s, want paying with %s", a.raw, pi)
		}
	})

	t.Run("sale currency", func(t *testing.T) {
		p.t = t
		if _, err := p.s.cp.CreateSale(p.ctx, flashgate.Sale{ID: "peur", Name: "peur", PriceCents: 300, Total: 5, Currency: "eur"}); err != nil {
			t.Fatal(err)
		}
		if err := p.s.cp.Start(p.ctx, "peur"); err != nil {
			t.Fatal(err)
		}
		if err := waitOpen(p.ctx, p.public, "peur", 20*time.Second); err != nil {
			t.Fatal(err)
		}
		o, tok := p.buy("peur", "u-eur")
		p.checkout(o, tok)
		if ins := p.intentsOf(o); len(ins) != 1 || ins[0].Currency != "eur" || ins[0].Amount != 300 {
			t.Errorf("intent of a eur sale: got %+v, want one of 300 eur", ins)
		}
		a := p.do("POST", p.admin+"/admin/sales", p.tokAdm, []byte(`{"id":"pbad","name":"x","price_cents":1,"total":1,"currency":"EUR"}`), nil)
		if a.status != 400 || a.body["field"] != "currency" {
			t.Errorf("a bad currency: got %d %s, want 400 naming currency", a.status, a.raw)
		}
	})

	t.Run("duplicate x3", func(t *testing.T) {
		p.t = t
		o, tok := p.buy("pw", "u-dup")
		pi := p.checkout(o, tok)
		p.stand.SetStatus(pi, "succeeded")
		for range 3 {
			p.event("evt_dup_"+o, flashgate.EventIntentSucceeded, pi, "")
		}
		p.waitOrder(o, flashgate.StatusPaid, "paid")
		if n := p.refundsOf(pi); n != 0 {
			t.Errorf("refunds: got %d, want 0", n)
		}
		if a := p.pay(o, tok); a.status != 200 || a.body["status"] != "paid" || a.body["payment_intent"] != pi {
			t.Errorf("pay after paid: got %d %s, want 200 paid with %s", a.status, a.raw, pi)
		}
	})

	t.Run("reordered", func(t *testing.T) {
		p.t = t
		o, tok := p.buy("pw", "u-reorder")
		pi := p.checkout(o, tok)
		p.stand.SetStatus(pi, "succeeded")
		// The success arrives first, then the failure of an earlier try.
		p.event("evt_ro2_"+o, flashgate.EventIntentSucceeded, pi, "")
		p.event("evt_ro1_"+o, flashgate.EventIntentFailed, pi, "requires_payment_method")
		p.waitOrder(o, flashgate.StatusPaid, "paid")
		if pm := p.payment(o); pm.Status != "succeeded" {
			t.Errorf("payment status after a late failure event: got %q, want succeeded", pm.Status)
		}
	})

	t.Run("failed then succeeded", func(t *testing.T) {
		p.t = t
		o, tok := p.buy("pw", "u-retry")
		pi := p.checkout(o, tok)
		p.event("evt_f1_"+o, flashgate.EventIntentFailed, pi, "requires_payment_method")
		if got := p.order(o).Status; got != flashgate.StatusPendingPayment {
			t.Fatalf("after a failed payment: got order %s, want pending_payment", got)
		}
		if a := p.do("GET", p.public+"/api/orders/"+o, tok, nil, nil); a.body["status"] != "paying" {
			t.Errorf("after a failed payment the buyer may retry: got %s, want paying", a.raw)
		}
		if again := p.checkout(o, tok); again != pi {
			t.Errorf("retry: got intent %s, want %s", again, pi)
		}
		p.stand.SetStatus(pi, "succeeded")
		p.event("evt_f2_"+o, flashgate.EventIntentSucceeded, pi, "")
		p.waitOrder(o, flashgate.StatusPaid, "paid")
	})

	t.Run("before the row", func(t *testing.T) {
		p.t = t
		o, tok := p.buy("pw", "u-before")
		// The intent exists at the provider, and its event arrives, before
		// flashgate stored the payment (a checkout whose answer was lost).
		pi := p.createIntent(o, price)
		p.stand.SetStatus(pi, "succeeded")
		p.event("evt_before_"+o, flashgate.EventIntentSucceeded, pi, "")
		p.waitOrder(o, flashgate.StatusPaid, "paid")
		if a := p.pay(o, tok); a.body["payment_intent"] != pi || a.body["status"] != "paid" {
			t.Errorf("pay after: got %s, want paid with %s", a.raw, pi)
		}
		if ins := p.intentsOf(o); len(ins) != 1 {
			t.Errorf("intents: got %d, want 1", len(ins))
		}
	})

	t.Run("bad and stale signatures", func(t *testing.T) {
		p.t = t
		o, tok := p.buy("pw", "u-sig")
		pi := p.checkout(o, tok)
		p.stand.SetStatus(pi, "succeeded")
		ev := p.stand.Event("evt_sig_"+o, flashgate.EventIntentSucceeded, pi, "")
		if a := p.hook(ev, time.Now(), "whsec_wrong"); a.status != 400 || a.body["error"] != "bad_signature" {
			t.Errorf("bad signature: got %d %s, want 400 bad_signature", a.status, a.raw)
		}
		if a := p.hook(ev, time.Now().Add(-6*time.Minute), payHookSecret); a.status != 400 || a.body["error"] != "bad_signature" {
			t.Errorf("stale timestamp: got %d %s, want 400 bad_signature", a.status, a.raw)
		}
		if a := p.do("POST", p.public+"/webhooks/stripe", "", ev, nil); a.status != 400 || a.body["error"] != "bad_signature" {
			t.Errorf("no signature: got %d %s, want 400 bad_signature", a.status, a.raw)
		}
		if got := p.order(o).Status; got != flashgate.StatusPendingPayment {
			t.Errorf("after refused webhooks: got order %s, want pending_payment (nothing changed)", got)
		}
		if pm := p.payment(o); pm.Status == "succeeded" {
			t.Errorf("after refused webhooks: payment status %q changed", pm.Status)
		}
		// The same event, well signed, is not taken for a redelivery.
		p.event("evt_sig_"+o, flashgate.EventIntentSucceeded, pi, "")
		p.waitOrder(o, flashgate.StatusPaid, "paid")
	})

	t.Run("provider 500 at checkout", func(t *testing.T) {
		p.t = t
		o, tok := p.buy("pw", "u-500")
		p.stand.FailNext(4)
		if a := p.pay(o, tok); a.status != 503 || a.body["error"] != "unavailable" {
			t.Errorf("provider down: got %d %s, want 503 unavailable", a.status, a.raw)
		}
		if got := p.order(o).Status; got != flashgate.StatusPendingPayment {
			t.Errorf("after a failed checkout: got %s, want pending_payment", got)
		}
		p.stand.FailNext(0)
		pi := p.checkout(o, tok)
		if again := p.checkout(o, tok); again != pi {
			t.Errorf("got intent %s, want %s", again, pi)
		}
		if ins := p.intentsOf(o); len(ins) != 1 {
			t.Errorf("intents after retries: got %d, want 1", len(ins))
		}
		for _, r := range p.stand.Requests() {
			if r.Method == "POST" && r.Path == "/v1/payment_intents" && r.Form["metadata[order_id]"] == o && r.IdempotencyKey != "flashgate-order-"+o {
				t.Errorf("retried create without the order's idempotency key: %q", r.IdempotencyKey)
			}
		}
	})

	t.Run("provider stalls at checkout", func(t *testing.T) {
		p.t = t
		o, tok := p.buy("pw", "u-stall")
		p.stand.Stall(30 * time.Second)
		a := p.pay(o, tok)
		p.stand.Stall(0)
		if a.status != 503 || a.body["error"] != "unavailable" {
			t.Errorf("provider stalled: got %d %s, want 503 unavailable", a.status, a.raw)
		}
		pi := p.checkout(o, tok)
		if ins := p.intentsOf(o); len(ins) != 1 || ins[0].ID != pi {
			t.Errorf("intents after a stall: got %+v, want one, %s", ins, pi)
		}
	})

	t.Run("dispute and refund events", func(t *testing.T) {
		p.t = t
		o, tok := p.buy("pw", "u-dispute")
		pi := p.checkout(o, tok)
		p.stand.SetStatus(pi, "succeeded")
		p.event("evt_dp1_"+o, flashgate.EventIntentSucceeded, pi, "")
		p.waitOrder(o, flashgate.StatusPaid, "paid")
		p.event("evt_dp2_"+o, flashgate.EventDisputeCreated, pi, "")
		if pm := p.payment(o); !pm.Disputed {
			t.Errorf("dispute: got %+v, want disputed", pm)
		}
		p.event("evt_dp3_"+o, flashgate.EventChargeRefunded, pi, "")
		if pm := p.payment(o); !pm.Refunded {
			t.Errorf("charge.refunded: got %+v, want refunded", pm)
		}
	})

	t.Run("admin refund refunds at the provider", func(t *testing.T) {
		p.t = t
		o, tok := p.buy("pw", "u-adminrefund")
		pi := p.checkout(o, tok)
		p.stand.SetStatus(pi, "succeeded")
		p.event("evt_ar_"+o, flashgate.EventIntentSucceeded, pi, "")
		p.waitOrder(o, flashgate.StatusPaid, "paid")
		for range 2 {
			if a := p.do("POST", p.admin+"/admin/orders/"+o+"/refund", p.tokAdm, nil, nil); a.status != 200 || a.body["status"] != "refunded" {
				t.Fatalf("admin refund: got %d %s, want 200 refunded", a.status, a.raw)
			}
		}
		if n := p.refundsOf(pi); n != 1 {
			t.Errorf("refunds at the provider: got %d, want 1", n)
		}
		if pm := p.payment(o); !pm.Refunded || pm.RefundID == "" {
			t.Errorf("payment after the admin refund: got %+v, want refunded with its refund id", pm)
		}
	})
}

func paymentLateCases(t *testing.T, ctx context.Context, db string) {
	const window, grace = 1500 * time.Millisecond, 500 * time.Millisecond
	p := startPayServe(t, ctx, db, window, grace)
	const price = 700
	p.sale("pl", 20, price)
	p.sale("pone", 1, price)

	booked := func(sale string) int64 {
		v, err := p.rdb.HGet(ctx, lua.SaleKey(sale), "booked").Int64()
		if err != nil {
			t.Fatalf("booked: %v", err)
		}
		return v
	}

	t.Run("late with a unit free", func(t *testing.T) {
		p.t = t
		o, _ := p.buy("pl", "u-late-free")
		// No checkout reached flashgate: the order expires and its unit
		// goes back.
		testwait.Eventually(t, 20*time.Second, func() bool { return p.order(o).Status == flashgate.StatusExpired }, "order expired")
		testwait.Eventually(t, 20*time.Second, func() bool { return booked("pl") == 0 }, "unit released")
		pi := p.createIntent(o, price)
		p.stand.SetStatus(pi, "succeeded")
		p.event("evt_late_"+o, flashgate.EventIntentSucceeded, pi, "")
		p.waitOrder(o, flashgate.StatusPaid, "honoured_late")
		if b := booked("pl"); b != 1 {
			t.Errorf("booked after a late payment honoured: got %d, want 1", b)
		}
		if n := p.refundsOf(pi); n != 0 {
			t.Errorf("refunds of an honoured payment: got %d, want 0", n)
		}
		// The buyer holds the order again: a second purchase is refused.
		if a := p.do("POST", p.public+"/api/sales/pl/orders", p.token("u-late-free"), nil, nil); a.status != 409 || a.body["error"] != "already_purchased" {
			t.Errorf("second purchase: got %d %s, want 409 already_purchased", a.status, a.raw)
		}
	})

	t.Run("late when sold out", func(t *testing.T) {
		p.t = t
		o, _ := p.buy("pone", "u-late-a")
		testwait.Eventually(t, 20*time.Second, func() bool { return p.order(o).Status == flashgate.StatusExpired }, "order expired")
		testwait.Eventually(t, 20*time.Second, func() bool { return booked("pone") == 0 }, "unit released")
		// The unit is sold again (once the gateway's cached state shows
		// it back).
		var o2, tok2 string
		testwait.Eventually(t, 20*time.Second, func() bool {
			tok2 = p.token("u-late-b")
			a := p.do("POST", p.public+"/api/sales/pone/orders", tok2, nil, nil)
			o2, _ = a.body["order_id"].(string)
			return a.status == 201
		}, "the released unit sold again")
		testwait.Eventually(t, 20*time.Second, func() bool {
			_, err := p.s.db.Order(ctx, o2)
			return err == nil
		}, "order %s stored", o2)
		pi2 := p.checkout(o2, tok2)
		pi := p.createIntent(o, price)
		p.stand.SetStatus(pi, "succeeded")
		for range 2 {
			p.event("evt_lateso_"+o, flashgate.EventIntentSucceeded, pi, "")
		}
		p.waitOrder(o, flashgate.StatusExpired, "refunded_late")
		if n := p.refundsOf(pi); n != 1 {
			t.Errorf("refunds of a late payment with no unit: got %d, want 1", n)
		}
		if a := p.do("GET", p.admin+"/admin/orders/"+o+"/payment", p.tokAdm, nil, nil); a.status != 200 ||
			a.body["payment_intent"] != pi || a.body["outcome"] != "refunded_late" || a.body["refund_id"] == "" || a.body["refunded"] != true {
			t.Errorf("admin payment: got %d %s, want the intent, refunded_late and its refund", a.status, a.raw)
		}
		if a := p.do("GET", p.admin+"/admin/sales/pone/payments", p.tokAdm, nil, nil); a.status != 200 || len(a.body["payments"].([]any)) != 2 {
			t.Errorf("admin sale payments: got %d %s, want 2", a.status, a.raw)
		}
		p.stand.SetStatus(pi2, "succeeded")
		p.event("evt_lateso2_"+o2, flashgate.EventIntentSucceeded, pi2, "")
		p.waitOrder(o2, flashgate.StatusPaid, "paid")
		if b := booked("pone"); b != 1 {
			t.Errorf("booked: got %d, want 1", b)
		}
	})

	t.Run("webhook lost", func(t *testing.T) {
		p.t = t
		o, tok := p.buy("pl", "u-lost")
		pi := p.checkout(o, tok)
		p.stand.SetStatus(pi, "succeeded") // and no webhook ever comes
		p.waitOrder(o, flashgate.StatusPaid, "paid")
		if time.Since(p.order(o).CreatedAt) < window {
			t.Errorf("paid before the window ended: the reconciliation must wait for the webhook")
		}
	})

	t.Run("never paid", func(t *testing.T) {
		p.t = t
		o, tok := p.buy("pl", "u-never")
		pi := p.checkout(o, tok)
		testwait.Eventually(t, 20*time.Second, func() bool { return p.order(o).Status == flashgate.StatusExpired }, "order expired")
		if in, _ := p.stand.Intent(pi); in.Status != "canceled" {
			t.Errorf("intent of an expired order: got %s, want canceled before the unit went back", in.Status)
		}
	})
}

// TestDemoStripeLocal: demo --payments stripe-local runs a checkout
// against the in-process stand-in: paying, confirmed at the provider, paid
// by the stand-in's signed webhook.
func TestDemoStripeLocal(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := run(ctx, []string{"demo", "--payments", "stripe-local", "--units", "10", "--users", "500", "--concurrency", "16", "--progress=false"}, &out, &errb, env(nil))
	if err != nil {
		t.Fatalf("demo: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errb.String())
	}
	for _, want := range []string{": paying, intent pi_local", "paid\n", "every invariant held"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out.String())
		}
	}
}
