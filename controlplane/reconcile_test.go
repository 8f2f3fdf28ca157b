package controlplane

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/sqldb"
)

// TestReconcileReachesEveryPayment: with more payments stuck in flight
// than one pass reads, the passes reach every one of them in turn (each
// look puts its payment off), not the oldest batch forever; a 429 of the
// provider pauses the passes for its Retry-After; the age of the oldest
// unsettled payment is a metric.
func TestReconcileReachesEveryPayment(t *testing.T) {
	const n = 230 // more than one pass reads
	pe := &payEnv{prov: newFakeProvider(), yield: map[string]func(ctx context.Context){}}
	reg := prometheus.NewRegistry()
	pe.env = newEnv(t, sqliteDSN(t), func(c *Config) {
		c.Metrics = reg
		c.Payments, c.PaymentStore = pe.prov, c.Store.(*sqldb.DB)
		c.PaymentWindow, c.PaymentGrace = time.Minute, time.Second
		c.PaymentReconcileRate = 100000 // the budget is not what this test measures
	})
	pe.openSale("s1", n, 3)
	if got := pe.reserveMany("s1", "u", n); got != n {
		t.Fatalf("reserved %d, want %d", got, n)
	}
	orders := pe.persist("s1")
	for i, o := range orders {
		pe.clock.Add(time.Millisecond) // created in this order
		in, err := pe.prov.Checkout(pe.ctx, o, 500, "usd")
		if err != nil {
			t.Fatal(err)
		}
		pe.prov.set(in.ID, flashgate.IntentProcessing)
		if _, err := pe.db.InsertPayment(pe.ctx, flashgate.Payment{OrderID: o.ID, IntentID: in.ID, Status: flashgate.IntentProcessing,
			AmountCents: 500, Currency: "usd"}, pe.clock.Now()); err != nil {
			t.Fatalf("payment %d: %v", i, err)
		}
	}
	pe.clock.Add(2 * time.Minute) // every payment past window + grace
	passes := 0
	for ; passes < 10 && len(pe.prov.askedIntents()) < n; passes++ {
		if _, err := pe.svc.ReconcilePayments(pe.ctx); err != nil {
			t.Fatal(err)
		}
		pe.clock.Add(200 * time.Millisecond)
	}
	if got := len(pe.prov.askedIntents()); got != n {
		t.Fatalf("after %d passes %d of %d stuck payments were asked about: the newest starve", passes, got, n)
	}
	for id, c := range pe.prov.askedIntents() {
		if c > 2 {
			t.Errorf("intent %s asked %d times before every payment was asked once", id, c)
		}
	}
	if age, _ := gauge(t, reg, "flashgate_payment_oldest_unsettled_seconds", ""); age < 120 {
		t.Errorf("oldest unsettled payment: got %v s, want at least 120", age)
	}
	// A 429: the pass stops, and none asks until its Retry-After (5 s).
	pe.clock.Add(10 * time.Minute)
	before := pe.prov.totalAsked()
	pe.prov.mu.Lock()
	pe.prov.limited = 1
	pe.prov.mu.Unlock()
	if _, err := pe.svc.ReconcilePayments(pe.ctx); err != nil {
		t.Fatal(err)
	}
	pe.clock.Add(time.Second)
	if _, err := pe.svc.ReconcilePayments(pe.ctx); err != nil {
		t.Fatal(err)
	}
	if got := pe.prov.totalAsked(); got != before {
		t.Errorf("within the Retry-After: %d calls, want none", got-before)
	}
	pe.clock.Add(5 * time.Second)
	if _, err := pe.svc.ReconcilePayments(pe.ctx); err != nil {
		t.Fatal(err)
	}
	if got := pe.prov.totalAsked(); got == before {
		t.Errorf("after the Retry-After: no call, want the passes to go on")
	}
}

func (f *fakeProvider) askedIntents() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]int, len(f.asked))
	for k, v := range f.asked {
		out[k] = v
	}
	return out
}

func (f *fakeProvider) totalAsked() int {
	n := 0
	for _, c := range f.askedIntents() {
		n += c
	}
	return n
}
