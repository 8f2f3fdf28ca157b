package controlplane

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/sqldb"
)

// outside adds, at the fake provider, an intent whose metadata names
// order (a payment made outside the checkout) with the given status.
func (f *fakeProvider) outside(id, order, status string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.intents[id] = &flashgate.Intent{ID: id, Status: status, OrderID: order, AmountCents: 500, Currency: "usd"}
}

// TestSecondCharges: an intent whose order's payment is another intent is
// a second charge, never the order's payment: refunded once when it
// succeeded (a redelivery and the reconciliation refund nothing more),
// canceled while it has taken nothing, looked at again while in
// progress and refunded once it lands; each is recorded and never
// adopted again, and the order keeps its own payment.
func TestSecondCharges(t *testing.T) {
	for name, dsn := range payBackends(t) {
		t.Run(name, func(t *testing.T) {
			pe := newPayEnv(t, dsn(t))
			pe.openSale("s1", 5, 3)
			o := pe.buy("s1", "u1")
			paid, err := pe.svc.Pay(pe.ctx, o.ID, "u1")
			if err != nil {
				t.Fatal(err)
			}
			pe.prov.set(paid.PaymentIntent, flashgate.IntentSucceeded)
			pe.hook(flashgate.EventIntentSucceeded, paid.PaymentIntent, flashgate.IntentSucceeded)
			if got := pe.order(o.ID).Status; got != flashgate.StatusPaid {
				t.Fatalf("order: got %s, want paid", got)
			}
			pe.prov.outside("pi_x_ok", o.ID, flashgate.IntentSucceeded)
			pe.prov.outside("pi_x_open", o.ID, "requires_payment_method")
			pe.prov.outside("pi_x_slow", o.ID, flashgate.IntentProcessing)
			pe.hook(flashgate.EventIntentSucceeded, "pi_x_ok", flashgate.IntentSucceeded)
			pe.hook(flashgate.EventIntentSucceeded, "pi_x_ok", flashgate.IntentSucceeded) // another delivery
			pe.hook(flashgate.EventIntentFailed, "pi_x_open", flashgate.IntentFailed)
			pe.hook(flashgate.EventIntentSucceeded, "pi_x_slow", flashgate.IntentProcessing)
			for range 3 {
				pe.clock.Add(10 * time.Minute)
				if _, err := pe.svc.ReconcilePayments(pe.ctx); err != nil {
					t.Fatal(err)
				}
			}
			if ids, err := pe.db.UnadoptedIntents(pe.ctx, time.Time{}, 10); err != nil || len(ids) != 0 {
				t.Errorf("unadopted intents: got %v, %v, want none", ids, err)
			}
			pe.prov.set("pi_x_slow", flashgate.IntentSucceeded)
			pe.clock.Add(10 * time.Minute)
			if _, err := pe.svc.ReconcilePayments(pe.ctx); err != nil {
				t.Fatal(err)
			}
			tests := []struct {
				intent, outcome, status string
				refunds                 int
			}{
				{"pi_x_ok", "refunded", flashgate.IntentSucceeded, 1},
				{"pi_x_open", "canceled", flashgate.IntentCanceled, 0},
				{"pi_x_slow", "refunded", flashgate.IntentSucceeded, 1},
			}
			for _, tc := range tests {
				c, err := pe.db.SecondCharge(pe.ctx, tc.intent)
				if err != nil || c.Outcome != tc.outcome || c.OrderID != o.ID {
					t.Errorf("%s: got %+v, %v, want outcome %s", tc.intent, c, err, tc.outcome)
				}
				if got := pe.prov.status(tc.intent); got != tc.status {
					t.Errorf("%s at the provider: got %s, want %s", tc.intent, got, tc.status)
				}
				if got := pe.prov.refunded(tc.intent); got != tc.refunds {
					t.Errorf("%s: got %d refunds, want %d", tc.intent, got, tc.refunds)
				}
			}
			if p := pe.payment(o.ID); p.IntentID != paid.PaymentIntent || p.Outcome != "paid" || pe.prov.refunded(p.IntentID) != 0 {
				t.Errorf("the order's own payment: got %+v (%d refunds), want %s paid, never refunded", p, pe.prov.refunded(p.IntentID), paid.PaymentIntent)
			}
			if got := pe.order(o.ID).Status; got != flashgate.StatusPaid {
				t.Errorf("order: got %s, want paid", got)
			}
		})
	}
}

// TestSecondChargesDoNotStarveDuePayments: with more second charges to
// adopt than a pass's budget (twice its burst), a payment stuck past
// window + grace is still asked about in the first pass (before, the
// adoption spent the whole budget first), and every second charge is
// refunded, each once, as the budget refills.
func TestSecondChargesDoNotStarveDuePayments(t *testing.T) {
	const outside, rate = 40, 20 // twice the budget's burst
	pe := &payEnv{prov: newFakeProvider(), yield: map[string]func(ctx context.Context){}}
	pe.env = newEnv(t, sqliteDSN(t), func(c *Config) {
		c.Payments, c.PaymentStore = pe.prov, c.Store.(*sqldb.DB)
		c.PaymentWindow, c.PaymentGrace = time.Minute, time.Second
		c.PaymentReconcileRate = rate
	})
	pe.openSale("s1", 5, 3)
	paidOrder := pe.buy("s1", "u1")
	stuck := pe.buy("s1", "u2")
	var own [2]string
	for i, o := range []flashgate.Order{paidOrder, stuck} {
		in, err := pe.svc.Pay(pe.ctx, o.ID, o.UserID)
		if err != nil {
			t.Fatal(err)
		}
		own[i] = in.PaymentIntent
	}
	pe.prov.set(own[0], flashgate.IntentSucceeded)
	pe.hook(flashgate.EventIntentSucceeded, own[0], flashgate.IntentSucceeded)
	// The outside intents' events are stored without being applied (as by
	// a gateway whose read of the intent failed): the reconciliation
	// adopts them.
	for i := range outside {
		id := fmt.Sprintf("pi_out_%02d", i)
		pe.prov.outside(id, paidOrder.ID, flashgate.IntentSucceeded)
		if _, err := pe.db.RecordEvent(pe.ctx, "evt_out_"+id, flashgate.EventIntentSucceeded, id, paidOrder.ID, flashgate.IntentSucceeded, pe.clock.Now()); err != nil {
			t.Fatal(err)
		}
	}
	pe.clock.Add(2 * time.Minute) // the stuck payment past window + grace
	if _, err := pe.svc.ReconcilePayments(pe.ctx); err != nil {
		t.Fatal(err)
	}
	if got := pe.prov.askedIntents()[own[1]]; got != 1 {
		t.Errorf("stuck payment: asked %d times in the first pass, want 1", got)
	}
	if got := pe.prov.status(own[1]); got != flashgate.IntentCanceled {
		t.Errorf("stuck payment at the provider: got %s, want canceled", got)
	}
	// The budget refills in real time: pass until every second charge
	// is settled.
	testwait.For(20*time.Second, func() bool {
		pe.clock.Add(time.Second)
		if _, err := pe.svc.ReconcilePayments(pe.ctx); err != nil {
			t.Fatal(err)
		}
		due, err := pe.db.DueSecondCharges(pe.ctx, pe.clock.Now().Add(time.Hour), 100)
		ids, err2 := pe.db.UnadoptedIntents(pe.ctx, time.Time{}, 100)
		return err == nil && err2 == nil && len(due) == 0 && len(ids) == 0
	})
	for i := range outside {
		id := fmt.Sprintf("pi_out_%02d", i)
		if got := pe.prov.refunded(id); got != 1 {
			t.Errorf("%s: got %d refunds, want 1", id, got)
		}
	}
	if ids, err := pe.db.UnadoptedIntents(pe.ctx, time.Time{}, 100); err != nil || len(ids) != 0 {
		t.Errorf("unadopted intents: got %v, %v, want none", ids, err)
	}
}

// TestCheckoutAfterAnOutsideIntentAdopted: an intent made outside the
// checkout and adopted as the order's payment between the checkout's
// intent and its row makes the checkout's own intent a second charge:
// it is canceled before the page can confirm it, and the checkout
// answers the order's payment.
func TestCheckoutAfterAnOutsideIntentAdopted(t *testing.T) {
	pe := newPayEnv(t, sqliteDSN(t))
	pe.openSale("s1", 5, 3)
	o := pe.buy("s1", "u1")
	pe.on("checkout:intent", func(ctx context.Context) {
		pe.prov.outside("pi_outside", o.ID, "requires_payment_method")
		pe.hook(flashgate.EventIntentFailed, "pi_outside", flashgate.IntentFailed)
	})
	got, err := pe.svc.Pay(pe.ctx, o.ID, "u1")
	if err != nil {
		t.Fatal(err)
	}
	if got.PaymentIntent != "pi_outside" || got.Status != flashgate.StatusPaying {
		t.Errorf("checkout: got %s %s, want paying with the order's payment pi_outside", got.Status, got.PaymentIntent)
	}
	c, err := pe.db.SecondCharge(pe.ctx, "pi_1")
	if err != nil || c.Outcome != "canceled" || pe.prov.status("pi_1") != flashgate.IntentCanceled {
		t.Errorf("the checkout's own intent: got %+v, %v (%s at the provider), want a canceled second charge", c, err, pe.prov.status("pi_1"))
	}
}
