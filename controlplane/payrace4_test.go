package controlplane

import (
	"context"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
)

// TestRefundAfterRecordedRetake: a late payment whose retake was recorded
// in Redis but never honoured (the settler stopped between the retake and
// the honour step) and whose sale then closed is refunded, and the refund
// gives the retaken unit back: booked and reserved come back to their
// figures before the retake, and the buyer entry no longer names the
// order. Before, the unit stayed in reserved with no row to match it, so
// every re-sync kept it booked.
func TestRefundAfterRecordedRetake(t *testing.T) {
	for name, dsn := range payBackends(t) {
		t.Run(name, func(t *testing.T) {
			pe := newPayEnv(t, dsn(t))
			pe.openSale("s1", 2, 3)
			o := pe.buy("s1", "u1")
			intent := pe.latePayment(o)
			booked, reserved := field(t, pe.rdb, "s1", "booked"), field(t, pe.rdb, "s1", "reserved")
			// Settler A retakes the unit, then stops before its honour step.
			actx, stopA := context.WithCancel(pe.ctx)
			defer stopA()
			pe.on("retake:done", func(context.Context) { stopA() })
			pe.stoppedRetake(actx, intent, o.ID)
			if err := pe.svc.Stop(pe.ctx, "s1"); err != nil {
				t.Fatal(err)
			}
			pe.clock.Add(time.Minute)
			if _, err := pe.svc.ReconcilePayments(pe.ctx); err != nil {
				t.Fatal(err)
			}
			if st, p := pe.order(o.ID).Status, pe.payment(o.ID); st != flashgate.StatusExpired || p.Outcome != "refunded_late" {
				t.Fatalf("after the close: order %s outcome %q, want expired and refunded_late", st, p.Outcome)
			}
			if got := field(t, pe.rdb, "s1", "booked"); got != booked {
				t.Errorf("booked after the refund: got %d, want %d", got, booked)
			}
			if got := field(t, pe.rdb, "s1", "reserved"); got != reserved {
				t.Errorf("reserved after the refund: got %d, want %d (no row counts the retaken unit)", got, reserved)
			}
			if got := pe.rdb.HGet(pe.ctx, "fg:{s1}:buyers", "u1").Val(); got == o.ID {
				t.Errorf("buyer entry after the refund: still names the refunded order %s", o.ID)
			}
		})
	}
}

// TestRetakeAfterRebuildDecidesAnew: a retake recorded before a rebuild
// (the sale marked for the restore path, as a failover does) and asked
// about again after it is not answered from the retaken set as a take:
// the rebuild holds its units (the database recorded the retake as
// pending), so no one else buys them, and the retake asked again answers
// held: the late payment is refunded, never honoured on top of the sale's
// total, and the unit then sells.
func TestRetakeAfterRebuildDecidesAnew(t *testing.T) {
	for name, dsn := range payBackends(t) {
		t.Run(name, func(t *testing.T) {
			pe := newPayEnv(t, dsn(t))
			pe.openSale("s1", 1, 3)
			o := pe.buy("s1", "u1")
			intent := pe.latePayment(o)
			actx, stopA := context.WithCancel(pe.ctx)
			defer stopA()
			pe.on("retake:done", func(context.Context) { stopA() })
			pe.stoppedRetake(actx, intent, o.ID)
			// A failover's recovery: the hash is marked for the restore
			// path, rebuilt from the rows, and the sale reopens.
			if err := pe.rdb.HSet(pe.ctx, "fg:{s1}:sale", "reserved", -1).Err(); err != nil {
				t.Fatal(err)
			}
			for range 2 {
				if _, _, err := pe.svc.Resync(pe.ctx, "s1"); err != nil {
					t.Fatal(err)
				}
			}
			if got := pe.rdb.HGet(pe.ctx, "fg:{s1}:sale", "start").Val(); got != "1" {
				t.Fatalf("after the rebuild: start %q, want 1 (reopened)", got)
			}
			// The database recorded the retake as pending before Redis made
			// it: the rebuild holds its unit (the settler past the retake
			// may still honour it), so it does not sell again meanwhile.
			if code, _ := pe.reserve("s1", "u2"); code == 0 {
				t.Fatalf("u2 bought the unit the rebuild held for the pending retake")
			}
			pe.clock.Add(time.Minute)
			if _, err := pe.svc.ReconcilePayments(pe.ctx); err != nil {
				t.Fatal(err)
			}
			// Asked again after the rebuild, the held retake is refunded
			// (the rebuilt sale cannot tell whether the lost take fitted),
			// and its unit goes back to the crowd.
			if st, p := pe.order(o.ID).Status, pe.payment(o.ID); st == flashgate.StatusPaid || p.Outcome != "refunded_late" {
				t.Fatalf("late payment after the rebuild: order %s outcome %q, want refunded_late (the retake was held)", st, p.Outcome)
			}
			if code, _ := pe.reserve("s1", "u2"); code != 0 {
				t.Fatalf("u2 buys the unit the refund gave back: code %d, want 0", code)
			}
			pe.persist("s1")
			if live := pe.liveUnits("s1"); live > 1 {
				t.Fatalf("live units %d, above the total 1", live)
			}
		})
	}
}

// stoppedRetake delivers intent's success to a settler whose ctx the test
// cancels at retake:done: its retake is recorded in Redis, and its honour
// step never runs (the payment stays late_pending).
func (pe *payEnv) stoppedRetake(ctx context.Context, intent, order string) {
	pe.t.Helper()
	if err := pe.svc.Webhook(ctx, []byte("evt_a|"+flashgate.EventIntentSucceeded+"|"+intent+"|"+flashgate.IntentSucceeded), "ok"); err != nil {
		pe.t.Fatalf("webhook: %v", err)
	}
	if p := pe.payment(order); p.Outcome != "late_pending" {
		pe.t.Fatalf("settler stopped after its retake: outcome %q, want late_pending", p.Outcome)
	}
	if !pe.rdb.SIsMember(pe.ctx, "fg:{s1}:retaken", order).Val() {
		pe.t.Fatalf("settler stopped after its retake: %s not in the retaken set", order)
	}
}

// TestAdminRefundRetriedAfterCrash: an admin refund of an order a late
// payment honoured that stops after its refund step, before giving the
// retaken unit back, leaves the buyer blocked only until the refund is
// asked again: the retry gives the unit back (lua.Unretake is idempotent),
// and the buyer buys in the sale again.
func TestAdminRefundRetriedAfterCrash(t *testing.T) {
	for name, dsn := range payBackends(t) {
		t.Run(name, func(t *testing.T) {
			pe := newPayEnv(t, dsn(t))
			pe.openSale("s1", 1, 3)
			o := pe.buy("s1", "u1")
			intent := pe.latePayment(o)
			pe.hook(flashgate.EventIntentSucceeded, intent, flashgate.IntentSucceeded)
			if p := pe.payment(o.ID); p.Outcome != "honoured_late" {
				t.Fatalf("late payment: outcome %q, want honoured_late", p.Outcome)
			}
			actx, stop := context.WithCancel(pe.ctx)
			defer stop()
			pe.on("refund:done", func(context.Context) { stop() })
			if _, err := pe.svc.Refund(actx, o.ID); err == nil {
				t.Fatalf("Refund stopped after its step: want an error")
			}
			if st := pe.order(o.ID).Status; st != flashgate.StatusRefunded {
				t.Fatalf("after the stopped refund: order %s, want refunded", st)
			}
			if _, err := pe.svc.Refund(pe.ctx, o.ID); err != nil {
				t.Fatalf("Refund again: %v", err)
			}
			if got := field(t, pe.rdb, "s1", "booked"); got != 0 {
				t.Errorf("booked after the retried refund: got %d, want 0", got)
			}
			if code, _ := pe.reserve("s1", "u1"); code != 0 {
				t.Fatalf("the refunded buyer buys again: got code %d, want 0", code)
			}
		})
	}
}

// TestCheckoutInsideCancel: a checkout that stores its payment after a
// cancel read none, and finds the order still pending, gets its client
// secret; the cancel that then commits cancels that intent, so the buyer's
// page cannot pay a cancelled order (before, the intent stayed live until
// the reconciliation's window passed, and a payment settled late).
func TestCheckoutInsideCancel(t *testing.T) {
	for name, dsn := range payBackends(t) {
		t.Run(name, func(t *testing.T) {
			pe := newPayEnv(t, dsn(t))
			pe.openSale("s1", 2, 3)
			o := pe.buy("s1", "u1")
			var intent string
			pe.on("cancel:intent", func(ctx context.Context) {
				paying, err := pe.svc.Pay(ctx, o.ID, "u1")
				if err != nil || paying.ClientSecret == "" {
					t.Errorf("checkout during the cancel: %v (secret %q), want a client secret", err, paying.ClientSecret)
				}
				intent = paying.PaymentIntent
			})
			if _, err := pe.svc.Cancel(pe.ctx, o.ID, "u1"); err != nil {
				t.Fatalf("Cancel: %v", err)
			}
			if st := pe.order(o.ID).Status; st != flashgate.StatusCancelled {
				t.Fatalf("order %s, want cancelled", st)
			}
			if intent == "" {
				t.Fatal("no checkout ran during the cancel")
			}
			if got := pe.prov.status(intent); got != flashgate.IntentCanceled {
				t.Errorf("intent of the cancelled order: %s, want %s", got, flashgate.IntentCanceled)
			}
		})
	}
}

// TestChargeEventAdoptedOnRedelivery: a charge.succeeded (it names the
// intent, not the order) about an intent no payment row names, delivered
// while the provider cannot be read, is applied: refused, and adopted by
// the provider's redelivery of the same event (a late payment whose
// payment_intent.succeeded was lost; explorer seed 20261639 left it
// charged, neither honoured nor refunded).
func TestChargeEventAdoptedOnRedelivery(t *testing.T) {
	for name, dsn := range payBackends(t) {
		t.Run(name, func(t *testing.T) {
			pe := newPayEnv(t, dsn(t))
			pe.openSale("s1", 1, 3)
			o := pe.buy("s1", "u1")
			// The checkout's answer was lost: the intent exists, no row.
			in, err := pe.prov.Checkout(pe.ctx, o, o.PriceCents, "usd")
			if err != nil {
				t.Fatal(err)
			}
			pe.prov.set(in.ID, flashgate.IntentSucceeded)
			pe.prov.mu.Lock()
			pe.prov.limited = 1 // the first read of the intent: 429
			pe.prov.mu.Unlock()
			payload := []byte("evt_charge|charge.succeeded|" + in.ID + "|")
			delivered := false
			for try := 0; try < 3 && !delivered; try++ {
				delivered = pe.svc.Webhook(pe.ctx, payload, "ok") == nil
			}
			if !delivered {
				t.Fatal("charge.succeeded: refused three times")
			}
			if _, err := pe.svc.ReconcilePayments(pe.ctx); err != nil {
				t.Fatal(err)
			}
			p, err := pe.db.Payment(pe.ctx, o.ID)
			if err != nil {
				t.Fatalf("payment of %s: got %v; want the intent adopted", o.ID, err)
			}
			if p.Outcome != "paid" || pe.order(o.ID).Status != flashgate.StatusPaid {
				t.Fatalf("payment %s/%q, order %s; want succeeded/paid, paid", p.Status, p.Outcome, pe.order(o.ID).Status)
			}
		})
	}
}

// TestAdminRefundStoppedGivenBackByResync: an admin refund of an order a
// late payment honoured that stops after its refund step, before giving
// the retaken unit back, and is never asked again, leaves the unit taken
// only until the next re-sync pass, which gives it back (the step marked
// the retake owed back); a unit sold meanwhile is never sold twice.
func TestAdminRefundStoppedGivenBackByResync(t *testing.T) {
	for name, dsn := range payBackends(t) {
		t.Run(name, func(t *testing.T) {
			pe := newPayEnv(t, dsn(t))
			pe.openSale("s1", 1, 3)
			o := pe.buy("s1", "u1")
			intent := pe.latePayment(o)
			pe.hook(flashgate.EventIntentSucceeded, intent, flashgate.IntentSucceeded)
			if p := pe.payment(o.ID); p.Outcome != "honoured_late" {
				t.Fatalf("late payment: outcome %q, want honoured_late", p.Outcome)
			}
			actx, stop := context.WithCancel(pe.ctx)
			defer stop()
			pe.on("refund:done", func(context.Context) { stop() })
			if _, err := pe.svc.Refund(actx, o.ID); err == nil {
				t.Fatalf("Refund stopped after its step: want an error")
			}
			if got := field(t, pe.rdb, "s1", "booked"); got != 1 {
				t.Fatalf("booked after the stopped refund: got %d, want 1 (the unit taken until given back)", got)
			}
			for i := range 2 {
				if _, _, err := pe.svc.Resync(pe.ctx, "s1"); err != nil {
					t.Fatalf("Resync %d: %v", i+1, err)
				}
				if got := field(t, pe.rdb, "s1", "booked"); got != 0 {
					t.Fatalf("booked after re-sync %d: got %d, want 0 (the owed unit given back once)", i+1, got)
				}
			}
			if code, _ := pe.reserve("s1", "u1"); code != 0 {
				t.Fatalf("the refunded buyer buys again: got code %d, want 0", code)
			}
			if code, _ := pe.reserve("s1", "u2"); code == 0 {
				t.Fatalf("a second buyer of the one unit: got code 0, want refused")
			}
		})
	}
}
