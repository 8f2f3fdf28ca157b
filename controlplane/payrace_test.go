package controlplane

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/lua"
)

// TestRetakeCountedByResync: a re-sync that runs between a late payment's
// retake in Redis and the database step that honours it counts the unit
// retaken: Redis booked stays at the live units, and the unit does not
// sell a second time.
func TestRetakeCountedByResync(t *testing.T) {
	for name, dsn := range payBackends(t) {
		t.Run(name, func(t *testing.T) {
			pe := newPayEnv(t, dsn(t))
			pe.openSale("s1", 1, 3)
			o := pe.buy("s1", "u1")
			intent := pe.latePayment(o)
			resynced := false
			pe.on("retake:done", func(ctx context.Context) {
				if _, _, err := pe.svc.Resync(ctx, "s1"); err != nil {
					t.Errorf("Resync between the retake and the honour: %v", err)
				}
				resynced = true
			})
			pe.hook(flashgate.EventIntentSucceeded, intent, flashgate.IntentSucceeded)
			if !resynced {
				t.Fatal("the re-sync did not run between the retake and the honour")
			}
			if got := pe.order(o.ID).Status; got != flashgate.StatusPaid {
				t.Fatalf("order: got %s, want paid (honoured)", got)
			}
			if got, want := field(t, pe.rdb, "s1", "booked"), pe.liveUnits("s1"); got != want {
				t.Errorf("booked after the honour: got %d, want %d (the live units)", got, want)
			}
			if code, _ := pe.reserve("s1", "u2"); code != lua.ReserveSoldOut {
				t.Errorf("a second buyer: got code %d, want sold out (%d): the retaken unit sold twice", code, lua.ReserveSoldOut)
			}
			pe.persist("s1")
			if _, _, err := pe.svc.Resync(pe.ctx, "s1"); err != nil {
				t.Fatal(err)
			}
			if got, want := field(t, pe.rdb, "s1", "booked"), pe.liveUnits("s1"); got != want || want > 1 {
				t.Errorf("after a re-sync: booked %d, live units %d, want equal and at most the 1 unit", got, want)
			}
		})
	}
}

// TestRetakeRetriedAfterFailedHonour: a settle whose honour step fails
// after the retake leaves the unit counted: a re-sync before the retry
// keeps it booked, and the retry honours the payment.
func TestRetakeRetriedAfterFailedHonour(t *testing.T) {
	for name, dsn := range payBackends(t) {
		t.Run(name, func(t *testing.T) {
			pe := newPayEnv(t, dsn(t))
			pe.openSale("s1", 1, 3)
			o := pe.buy("s1", "u1")
			intent := pe.latePayment(o)
			pe.on("retake:done", func(context.Context) {
				// The settle stops here (a crash, a lost connection):
				// its context ends before the honour step.
				panic(stopHere{})
			})
			func() {
				defer func() {
					if r := recover(); r != nil {
						if _, ok := r.(stopHere); !ok {
							panic(r)
						}
					}
				}()
				pe.hook(flashgate.EventIntentSucceeded, intent, flashgate.IntentSucceeded)
			}()
			if _, _, err := pe.svc.Resync(pe.ctx, "s1"); err != nil {
				t.Fatal(err)
			}
			if code, _ := pe.reserve("s1", "u2"); code != lua.ReserveSoldOut {
				t.Fatalf("a second buyer after the re-sync: got code %d, want sold out (%d): the retaken unit was freed", code, lua.ReserveSoldOut)
			}
			if _, err := pe.svc.ReconcilePayments(pe.ctx); err != nil {
				t.Fatal(err)
			}
			if got, p := pe.order(o.ID).Status, pe.payment(o.ID); got != flashgate.StatusPaid || p.Outcome != "honoured_late" {
				t.Fatalf("after the retry: order %s outcome %q, want paid and honoured_late", got, p.Outcome)
			}
			if _, _, err := pe.svc.Resync(pe.ctx, "s1"); err != nil {
				t.Fatal(err)
			}
			if got, want := field(t, pe.rdb, "s1", "booked"), pe.liveUnits("s1"); got != want || want != 1 {
				t.Errorf("booked: got %d, want %d = 1 live unit", got, want)
			}
		})
	}
}

// stopHere stops an actor at a yield point, as a crash would.
type stopHere struct{}

// TestTwoSettlersOneOutcome: of two settlers of one late payment, one
// (a webhook) refused by the retake (sold out) and one (the
// reconciliation) that read the payment before the first recorded its
// refund and retakes after a unit was freed, exactly one outcome results:
// the payment is never both honoured and refunded.
func TestTwoSettlersOneOutcome(t *testing.T) {
	for name, dsn := range payBackends(t) {
		t.Run(name, func(t *testing.T) {
			pe := newPayEnv(t, dsn(t))
			pe.openSale("s1", 1, 3)
			o := pe.buy("s1", "u1")
			intent := pe.latePayment(o)
			// The unit is sold again to u2: the first settler's retake
			// finds the sale sold out.
			o2 := pe.buy("s1", "u2")
			arrived, goOn, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
			var once sync.Once
			pe.handler = func(ctx context.Context, point string) {
				switch {
				case actorOf(ctx) == "" && point == "retake:done":
					once.Do(func() {
						// u2 cancels: the unit is free again. The second
						// settler reads the payment, and waits there.
						if _, err := pe.svc.Cancel(ctx, o2.ID, "u2"); err != nil {
							t.Errorf("Cancel: %v", err)
						}
						go func() {
							defer close(done)
							if _, err := pe.svc.ReconcilePayments(withActor(pe.ctx, "B")); err != nil {
								t.Logf("second settler: %v", err)
							}
						}()
						<-arrived
					})
				case actorOf(ctx) == "B" && point == "settle:read":
					select {
					case <-arrived:
					default:
						close(arrived)
						<-goOn
					}
				}
			}
			pe.hook(flashgate.EventIntentSucceeded, intent, flashgate.IntentSucceeded)
			close(goOn)
			<-done
			pe.handler = nil
			if _, err := pe.svc.ReconcilePayments(pe.ctx); err != nil {
				t.Fatal(err)
			}
			st, p, refunds := pe.order(o.ID).Status, pe.payment(o.ID), pe.prov.refunded(intent)
			switch {
			case st == flashgate.StatusPaid && refunds > 0:
				t.Fatalf("order paid and its payment refunded (%d refunds, outcome %q): both", refunds, p.Outcome)
			case st != flashgate.StatusPaid && refunds != 1:
				t.Fatalf("order %s with %d refunds (outcome %q): want exactly one", st, refunds, p.Outcome)
			case st == flashgate.StatusPaid && p.Outcome != "honoured_late", st != flashgate.StatusPaid && p.Outcome != "refunded_late":
				t.Fatalf("order %s with outcome %q", st, p.Outcome)
			}
			if _, _, err := pe.svc.Resync(pe.ctx, "s1"); err != nil {
				t.Fatal(err)
			}
			if got, want := field(t, pe.rdb, "s1", "booked"), pe.liveUnits("s1"); got != want {
				t.Errorf("booked: got %d, want %d (the live units)", got, want)
			}
		})
	}
}

// TestAdminRefundRacingSuccess: an admin refund of an order whose payment
// is in flight, with the success landing (and its webhook settled) in the
// middle of the refund, refunds the money: refunded in the database means
// refunded (or never charged) at the provider.
func TestAdminRefundRacingSuccess(t *testing.T) {
	for name, dsn := range payBackends(t) {
		t.Run(name, func(t *testing.T) {
			pe := newPayEnv(t, dsn(t))
			pe.openSale("s1", 2, 3)
			o := pe.buy("s1", "u1")
			paying, err := pe.svc.Pay(pe.ctx, o.ID, "u1")
			if err != nil {
				t.Fatal(err)
			}
			intent := paying.PaymentIntent
			pe.on("refund:owned", func(ctx context.Context) {
				pe.prov.set(intent, flashgate.IntentSucceeded)
				pe.hook(flashgate.EventIntentSucceeded, intent, flashgate.IntentSucceeded)
			})
			got, err := pe.svc.Refund(pe.ctx, o.ID)
			if err != nil {
				t.Fatalf("Refund: %v", err)
			}
			if got.Status != flashgate.StatusRefunded || pe.order(o.ID).Status != flashgate.StatusRefunded {
				t.Fatalf("Refund answered %s, stored %s: want refunded", got.Status, pe.order(o.ID).Status)
			}
			if st := pe.prov.status(intent); st == flashgate.IntentSucceeded && pe.prov.refunded(intent) != 1 {
				t.Fatalf("the order is refunded but its payment succeeded at the provider with %d refunds: the money kept", pe.prov.refunded(intent))
			}
			p := pe.payment(o.ID)
			if p.Outcome != "refunded" || !p.Refunded {
				t.Errorf("payment: outcome %q refunded %v, want refunded and true", p.Outcome, p.Refunded)
			}
		})
	}
}

// TestCanceledEventAsksProvider: a signed payment_intent.canceled about an
// intent that succeeded at the provider (a stale or forged-order event)
// does not take the payment out of the reconciliation: the provider's
// state is applied, and the order is paid.
func TestCanceledEventAsksProvider(t *testing.T) {
	for name, dsn := range payBackends(t) {
		t.Run(name, func(t *testing.T) {
			pe := newPayEnv(t, dsn(t))
			pe.openSale("s1", 1, 3)
			o := pe.buy("s1", "u1")
			paying, err := pe.svc.Pay(pe.ctx, o.ID, "u1")
			if err != nil {
				t.Fatal(err)
			}
			pe.prov.set(paying.PaymentIntent, flashgate.IntentSucceeded)
			pe.hook(flashgate.EventIntentCanceled, paying.PaymentIntent, flashgate.IntentCanceled)
			if _, err := pe.svc.ReconcilePayments(pe.ctx); err != nil {
				t.Fatal(err)
			}
			if p := pe.payment(o.ID); p.Status != flashgate.IntentSucceeded || p.Outcome != "paid" || pe.order(o.ID).Status != flashgate.StatusPaid {
				t.Fatalf("after a canceled event about a succeeded intent: payment %s/%q, order %s; want succeeded/paid, paid",
					p.Status, p.Outcome, pe.order(o.ID).Status)
			}
			// An intent the provider does not know: acknowledged, nothing applied.
			pe.hook(flashgate.EventIntentCanceled, "pi_unknown", flashgate.IntentCanceled)
		})
	}
}

// TestBuyerCancelCancelsIntent: a buyer's cancel of an order whose payment
// is in flight cancels the intent at the provider, so the page can no
// longer confirm it; one whose payment succeeded meanwhile is not
// cancelled (409) and the order is paid.
func TestBuyerCancelCancelsIntent(t *testing.T) {
	for name, dsn := range payBackends(t) {
		t.Run(name, func(t *testing.T) {
			pe := newPayEnv(t, dsn(t))
			pe.openSale("s1", 2, 3)
			o := pe.buy("s1", "u1")
			paying, err := pe.svc.Pay(pe.ctx, o.ID, "u1")
			if err != nil {
				t.Fatal(err)
			}
			got, err := pe.svc.Cancel(pe.ctx, o.ID, "u1")
			if err != nil || got.Status != flashgate.StatusCancelled {
				t.Fatalf("Cancel: got %s, %v, want cancelled", got.Status, err)
			}
			if st := pe.prov.status(paying.PaymentIntent); st != flashgate.IntentCanceled {
				t.Errorf("intent after the buyer's cancel: got %s, want canceled", st)
			}
			o2 := pe.buy("s1", "u2")
			paying2, err := pe.svc.Pay(pe.ctx, o2.ID, "u2")
			if err != nil {
				t.Fatal(err)
			}
			pe.prov.set(paying2.PaymentIntent, flashgate.IntentSucceeded) // its webhook not yet delivered
			if _, err := pe.svc.Cancel(pe.ctx, o2.ID, "u2"); !errors.Is(err, flashgate.ErrNotPayable) {
				t.Errorf("cancel of an order whose payment succeeded: got %v, want ErrNotPayable", err)
			}
			if st := pe.order(o2.ID).Status; st != flashgate.StatusPaid {
				t.Errorf("that order: got %s, want paid", st)
			}
		})
	}
}
