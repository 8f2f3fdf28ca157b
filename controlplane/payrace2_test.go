package controlplane

import (
	"context"
	"errors"
	"testing"

	"github.com/flashgate/flashgate"
)

// TestAdminRefundOfProcessingPayment: an admin refund of an order whose
// payment is processing (a debit the provider will not cancel) is 503
// with the refund still owning the payment and the order unchanged; once
// the payment lands the reconciliation finishes the refund: a success is
// refunded, a failure ends canceled and refunded without money moved.
func TestAdminRefundOfProcessingPayment(t *testing.T) {
	for name, dsn := range payBackends(t) {
		for _, lands := range []string{flashgate.IntentSucceeded, "requires_payment_method"} {
			t.Run(name+"/"+lands, func(t *testing.T) {
				pe := newPayEnv(t, dsn(t))
				pe.openSale("s1", 2, 3)
				o := pe.buy("s1", "u1")
				paying, err := pe.svc.Pay(pe.ctx, o.ID, "u1")
				if err != nil {
					t.Fatal(err)
				}
				intent := paying.PaymentIntent
				pe.prov.set(intent, flashgate.IntentProcessing)
				if _, err := pe.svc.Refund(pe.ctx, o.ID); !errors.Is(err, flashgate.ErrUnavailable) {
					t.Fatalf("Refund of a processing payment: got %v, want ErrUnavailable", err)
				}
				if st, p := pe.order(o.ID).Status, pe.payment(o.ID); st != flashgate.StatusPendingPayment || p.Outcome != "refunding" {
					t.Fatalf("after the 503: order %s outcome %q, want pending_payment and refunding", st, p.Outcome)
				}
				// The debit lands; its webhook is lost.
				pe.prov.set(intent, lands)
				if _, err := pe.svc.ReconcilePayments(pe.ctx); err != nil {
					t.Fatal(err)
				}
				st, p, refunds := pe.order(o.ID).Status, pe.payment(o.ID), pe.prov.refunded(intent)
				if st != flashgate.StatusRefunded || p.Outcome != "refunded" {
					t.Fatalf("after the payment landed: order %s outcome %q, want refunded", st, p.Outcome)
				}
				want := 0
				if lands == flashgate.IntentSucceeded {
					want = 1
				}
				if refunds != want {
					t.Fatalf("the payment %s: %d refunds, want %d (refunded in the database means refunded at the provider)", lands, refunds, want)
				}
				if lands != flashgate.IntentSucceeded && pe.prov.status(intent) != flashgate.IntentCanceled {
					t.Errorf("the failed payment's intent: got %s, want canceled", pe.prov.status(intent))
				}
			})
		}
	}
}

// TestBuyerCancelOfProcessingPayment: a buyer's cancel of an order whose
// payment is processing is 409 not_payable (payment in progress) and
// changes nothing: the order keeps its unit, and the success that lands
// then pays it.
func TestBuyerCancelOfProcessingPayment(t *testing.T) {
	for name, dsn := range payBackends(t) {
		t.Run(name, func(t *testing.T) {
			pe := newPayEnv(t, dsn(t))
			pe.openSale("s1", 1, 3)
			o := pe.buy("s1", "u1")
			paying, err := pe.svc.Pay(pe.ctx, o.ID, "u1")
			if err != nil {
				t.Fatal(err)
			}
			pe.prov.set(paying.PaymentIntent, flashgate.IntentProcessing)
			if _, err := pe.svc.Cancel(pe.ctx, o.ID, "u1"); !errors.Is(err, flashgate.ErrNotPayable) {
				t.Fatalf("Cancel of a processing payment: got %v, want ErrNotPayable", err)
			}
			if st := pe.order(o.ID).Status; st != flashgate.StatusPendingPayment {
				t.Fatalf("order after the refused cancel: got %s, want pending_payment", st)
			}
			if code, _ := pe.reserve("s1", "u2"); code == 0 {
				t.Fatal("a second buyer reserved the unit of an order whose payment is coming")
			}
			pe.prov.set(paying.PaymentIntent, flashgate.IntentSucceeded)
			pe.hook(flashgate.EventIntentSucceeded, paying.PaymentIntent, flashgate.IntentSucceeded)
			if st, p := pe.order(o.ID).Status, pe.payment(o.ID); st != flashgate.StatusPaid || p.Outcome != "paid" {
				t.Fatalf("after the success: order %s outcome %q, want paid", st, p.Outcome)
			}
		})
	}
}

// TestAdminRefundRacingCheckout: an admin refund that read no payment,
// with the buyer's checkout and its success landing before the refund's
// step, refunds the money: it never moves a paid order to refunded
// without owning its payment.
func TestAdminRefundRacingCheckout(t *testing.T) {
	for name, dsn := range payBackends(t) {
		t.Run(name, func(t *testing.T) {
			pe := newPayEnv(t, dsn(t))
			pe.openSale("s1", 2, 3)
			o := pe.buy("s1", "u1")
			var intent string
			pe.on("refund:nopayment", func(ctx context.Context) {
				paying, err := pe.svc.Pay(ctx, o.ID, "u1")
				if err != nil {
					t.Errorf("Pay: %v", err)
					return
				}
				intent = paying.PaymentIntent
				pe.prov.set(intent, flashgate.IntentSucceeded)
				pe.hook(flashgate.EventIntentSucceeded, intent, flashgate.IntentSucceeded)
				if st := pe.order(o.ID).Status; st != flashgate.StatusPaid {
					t.Errorf("the buyer's order before the admin's step: got %s, want paid", st)
				}
			})
			got, err := pe.svc.Refund(pe.ctx, o.ID)
			if err != nil || got.Status != flashgate.StatusRefunded {
				t.Fatalf("Refund: got %s, %v, want refunded", got.Status, err)
			}
			if intent == "" {
				t.Fatal("the checkout did not run between the refund's read and its step")
			}
			if n := pe.prov.refunded(intent); n != 1 {
				t.Fatalf("order refunded, its payment succeeded with %d refunds: want 1", n)
			}
			if p := pe.payment(o.ID); p.Outcome != "refunded" || !p.Refunded {
				t.Errorf("payment: outcome %q refunded %v, want refunded and true", p.Outcome, p.Refunded)
			}
		})
	}
}

// TestCancelRacingCheckout: a buyer's cancel that runs while their own
// checkout creates the intent (the cancel finds no payment to cancel)
// leaves no live intent: the checkout, finding the order no longer
// pending, cancels it and answers not_payable.
func TestCancelRacingCheckout(t *testing.T) {
	for name, dsn := range payBackends(t) {
		t.Run(name, func(t *testing.T) {
			pe := newPayEnv(t, dsn(t))
			pe.openSale("s1", 2, 3)
			o := pe.buy("s1", "u1")
			cancelled := false
			pe.on("checkout:intent", func(ctx context.Context) {
				got, err := pe.svc.Cancel(ctx, o.ID, "u1")
				if err != nil || got.Status != flashgate.StatusCancelled {
					t.Errorf("Cancel: got %s, %v, want cancelled", got.Status, err)
				}
				cancelled = true
			})
			paying, err := pe.svc.Pay(pe.ctx, o.ID, "u1")
			if !cancelled {
				t.Fatal("the cancel did not run between the intent's creation and its row")
			}
			if !errors.Is(err, flashgate.ErrNotPayable) {
				t.Errorf("Pay racing a cancel: got %s, %v, want ErrNotPayable", paying.Status, err)
			}
			p := pe.payment(o.ID)
			if st := pe.prov.status(p.IntentID); st != flashgate.IntentCanceled {
				t.Fatalf("intent of a cancelled order: got %s, want canceled (a page could still confirm it)", st)
			}
			if p.Status != flashgate.IntentCanceled {
				t.Errorf("stored intent status: got %s, want canceled", p.Status)
			}
		})
	}
}
