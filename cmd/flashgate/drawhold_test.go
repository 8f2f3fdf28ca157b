package main

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
)

const okCard = "4242424242424242"

// drawSale creates draw sale id of total units at price, taking entries
// from now for an hour, and waits until the gateway takes an entry route.
func (p *payServe) drawSale(id string, total, price int64) {
	p.t.Helper()
	open := time.Now().Add(-time.Second).Truncate(time.Second)
	closeAt := open.Add(time.Hour)
	if _, err := p.s.cp.CreateSale(p.ctx, flashgate.Sale{ID: id, Name: id, PriceCents: price, Total: total, PerUser: 2,
		Queue: flashgate.QueueDraw, EntriesOpenAt: &open, EntriesCloseAt: &closeAt}); err != nil {
		p.t.Fatalf("CreateSale: %v", err)
	}
	tok := p.token("nobody")
	testwait.Eventually(p.t, 20*time.Second, func() bool {
		return p.do("GET", p.public+"/api/sales/"+id+"/entry", tok, nil, nil).status == 404 &&
			p.do("GET", p.public+"/api/sales/"+id+"/entry", tok, nil, nil).body["error"] == "not_found" &&
			p.do("POST", p.public+"/api/sales/"+id+"/entry/pay", tok, nil, nil).status == 404
	}, "draw sale %s served", id)
}

// entry calls an entry route of sale for user.
func (p *payServe) entry(method, sale, user, suffix string) payAnswer {
	p.t.Helper()
	var body []byte
	if method == "POST" && suffix == "" {
		body = []byte(`{"quantity":1}`)
	}
	return p.do(method, p.public+"/api/sales/"+sale+"/entry"+suffix, p.token(user), body, nil)
}

// waitEntry waits until user's entry in sale is in state st.
func (p *payServe) waitEntry(sale, user, st string) {
	p.t.Helper()
	testwait.Eventually(p.t, 30*time.Second, func() bool {
		return p.entry("GET", sale, user, "").body["state"] == st
	}, "%s's entry %s", user, st)
}

// TestDrawHoldsStripe: through `serve` with the stand-in provider, an
// entry's 201 carries its card hold (manual capture, the sale's price);
// the buyer's confirm comes back as a webhook and enters it, duplicates
// changing nothing; the hold's intent reaches draw_entries; a withdrawal
// releases the hold, again harmlessly. (The payment grace, which the read
// path waits for, is longer than the waits here: the webhook entered it.)
// With the webhooks lost, the read path of a serve with a short grace
// enters a confirmed entry.
func TestDrawHoldsStripe(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p := startPayServe(t, ctx, "sqlite://"+filepath.Join(t.TempDir(), "fg.db"), time.Minute, time.Minute)
	p.stand.SetWebhookURL(p.public + "/webhooks/stripe")
	t.Cleanup(p.stand.Deliveries.Wait)
	const price = 1900
	p.drawSale("dh", 10, price)

	a := p.entry("POST", "dh", "ann", "")
	pi, _ := a.body["payment_intent"].(string)
	if a.status != 201 || a.body["state"] != "pending" || pi == "" || a.body["client_secret"] == nil {
		t.Fatalf("enter: got %d %s, want 201 pending with its hold", a.status, a.raw)
	}
	if in, ok := p.stand.Intent(pi); !ok || in.CaptureMethod != "manual" || in.Amount != price || in.Metadata["sale_id"] != "dh" {
		t.Errorf("the hold at the provider: got %+v; want %d held for sale dh", in, price)
	}
	if again := p.entry("POST", "dh", "ann", "/pay"); again.status != 200 || again.body["payment_intent"] != pi || again.body["client_secret"] != a.body["client_secret"] {
		t.Errorf("pay again: got %d %s, want 200 with the same hold", again.status, again.raw)
	}
	if _, err := p.stand.Confirm(pi, okCard); err != nil {
		t.Fatal(err)
	}
	p.waitEntry("dh", "ann", "entered")
	for i := 0; i < 2; i++ {
		p.event("evt_dh_dup", flashgate.EventIntentHeld, pi, "")
	}
	if g := p.entry("GET", "dh", "ann", ""); g.body["state"] != "entered" || g.body["result"] != "pending" {
		t.Errorf("after duplicates: got %s, want entered, result pending", g.raw)
	}
	testwait.Eventually(t, 20*time.Second, func() bool {
		rows, err := p.s.db.DrawEntries(ctx, "dh")
		return err == nil && len(rows) == 1 && rows[0].PaymentIntent == pi && rows[0].State == flashgate.DrawEntered
	}, "ann's row entered with intent %s", pi)

	// bob withdraws: his hold is released, and withdrawing again is
	// harmless; his entry can no longer ask for a hold.
	b := p.entry("POST", "dh", "bob", "")
	bpi, _ := b.body["payment_intent"].(string)
	if b.status != 201 || bpi == "" {
		t.Fatalf("bob enters: got %d %s", b.status, b.raw)
	}
	for i := 0; i < 2; i++ {
		if w := p.entry("DELETE", "dh", "bob", ""); w.status != 200 || w.body["state"] != "withdrawn" {
			t.Errorf("withdraw %d: got %d %s, want 200 withdrawn", i, w.status, w.raw)
		}
	}
	if in, _ := p.stand.Intent(bpi); in.Status != flashgate.IntentCanceled {
		t.Errorf("bob's hold after the withdrawal: got %s, want canceled", in.Status)
	}
	if w := p.entry("POST", "dh", "bob", "/pay"); w.status != 409 {
		t.Errorf("pay of a withdrawn entry: got %d %s, want 409", w.status, w.raw)
	}

	// cyd's webhooks are lost: the leader's read path enters her entry.
	p = startPayServe(t, ctx, "sqlite://"+filepath.Join(t.TempDir(), "fg.db"), time.Minute, time.Second)
	p.drawSale("dh", 10, price)
	c := p.entry("POST", "dh", "cyd", "")
	cpi, _ := c.body["payment_intent"].(string)
	if c.status != 201 || cpi == "" {
		t.Fatalf("cyd enters: got %d %s", c.status, c.raw)
	}
	if _, err := p.stand.Confirm(cpi, okCard); err != nil {
		t.Fatal(err)
	}
	p.waitEntry("dh", "cyd", "entered")
}

// TestDrawSimulatedEntersAtOnce: with simulated payments (no provider) an
// entry is entered in its 201, with no hold, and its withdrawal answers
// 200.
func TestDrawSimulatedEntersAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rs := redistest.Start(t)
	var errb bytes.Buffer
	p := &payServe{t: t, ctx: ctx, secret: "sim-secret", tokAdm: "sim-admin"}
	cfg, err := parseConfig("serve", []string{"--redis", rs.URL, "--db", "sqlite://" + filepath.Join(t.TempDir(), "fg.db"),
		"--jwt-secret", p.secret, "--admin-token", p.tokAdm,
		"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
		"--state-refresh", "20ms", "--log-level", "error"}, &errb, env(nil))
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
	p.drawSale("ds", 5, 500)
	a := p.entry("POST", "ds", "ann", "")
	if a.status != 201 || a.body["state"] != "entered" || a.body["payment_intent"] != nil || a.body["client_secret"] != nil {
		t.Fatalf("enter: got %d %s, want 201 entered without a hold", a.status, a.raw)
	}
	if w := p.entry("DELETE", "ds", "ann", ""); w.status != 200 || w.body["state"] != "withdrawn" {
		t.Errorf("withdraw: got %d %s, want 200 withdrawn", w.status, w.raw)
	}
}
