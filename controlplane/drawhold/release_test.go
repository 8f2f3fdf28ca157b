package drawhold_test

import (
	"strings"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
)

// cancels counts the cancels the stand-in was asked for intent.
func (e *env) cancels(intent string) int {
	n := 0
	for _, r := range e.stand.Requests() {
		if r.Method == "POST" && strings.HasSuffix(r.Path, "/payment_intents/"+intent+"/cancel") {
			n++
		}
	}
	return n
}

// TestReleaseOnce: a withdrawn entry's hold is released at the provider
// once: a buyer's DELETE repeated (each one a Release) asks the provider
// nothing more, so that one buyer cannot spend the provider's rate, which
// every buyer shares, by withdrawing again and again.
func TestReleaseOnce(t *testing.T) {
	e := newEnv(t, true)
	for _, user := range []string{"ann", "bob"} {
		e.enter(user, 1)
		d, err := e.h.Hold(e.ctx, sale, user)
		if err != nil {
			t.Fatal(err)
		}
		if user == "ann" { // ann's hold is authorised, bob's never confirmed
			if _, err := e.stand.Confirm(d.PaymentIntent, "4242424242424242"); err != nil {
				t.Fatal(err)
			}
			testwait.Eventually(t, 10*time.Second, func() bool { return e.state("ann") == flashgate.DrawEntered }, "ann's entry entered")
		}
		if _, err := e.withdraw(user); err != nil {
			t.Fatalf("%s withdraws: %v", user, err)
		}
		for i := 0; i < 5; i++ {
			if w, err := e.h.Release(e.ctx, sale, user); err != nil || w.State != flashgate.DrawWithdrawn {
				t.Errorf("%s's release again: got %+v, %v; want withdrawn, no error", user, w, err)
			}
		}
		if got := e.intent(d.PaymentIntent).Status; got != flashgate.IntentCanceled {
			t.Errorf("%s's hold: got %s, want canceled", user, got)
		}
		if got := e.cancels(d.PaymentIntent); got != 1 {
			t.Errorf("%s's hold: got %d cancels at the provider, want 1", user, got)
		}
	}
}

// TestReleaseAfterLostWithdrawal: an entered entry withdrawn by a gateway
// that died before it released the hold (the withdrawal made, no Release)
// is released by the read path, not left held until the close.
func TestReleaseAfterLostWithdrawal(t *testing.T) {
	e := newEnv(t, true)
	e.enter("ann", 1)
	d, err := e.h.Hold(e.ctx, sale, "ann")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.stand.Confirm(d.PaymentIntent, "4242424242424242"); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 10*time.Second, func() bool { return e.state("ann") == flashgate.DrawEntered }, "ann's entry entered")
	e.withdrawOnly("ann")
	e.clock.Add(grace)
	if _, err := e.h.Reconcile(e.ctx, []flashgate.Sale{{ID: sale, Queue: flashgate.QueueDraw}}); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	if got := e.intent(d.PaymentIntent).Status; got != flashgate.IntentCanceled {
		t.Errorf("ann's hold after the read path: got %s, want canceled", got)
	}
}
