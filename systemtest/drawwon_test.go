package systemtest

import (
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane"
	"github.com/flashgate/flashgate/controlplane/drawclose"
)

// wonDraw closes a draw of 10 entrants with card holds at the stand-in,
// through a control plane that takes payments there, and returns the
// control plane and a winner's entry (its hold captured, its order paid).
func wonDraw(t *testing.T, dsn string) (*drawStack, *controlplane.Service, flashgate.DrawEntry) {
	t.Helper()
	s := newDrawStack(t, dsn)
	cp, err := controlplane.New(controlplane.Config{Redis: s.rdb, Store: s.db, Releaser: s.inv, AdminToken: drawToken,
		Clock: s.clock, Logger: quiet, DrawReserver: s.inv, DrawCapturer: s.pacer(), DrawWorkers: 4,
		Payments: s.pay, PaymentStore: s.db})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Close() })
	s.enter(cp, 10, func(string) string { return "4242424242424242" })
	if err := cp.CommitDraw(s.ctx, s.sale); err != nil {
		t.Fatal(err)
	}
	s.clock.Add(time.Hour)
	s.closeDraw(cp)
	captured := s.check(cp, 0)
	for id := range captured {
		return s, cp, s.entrants[id]
	}
	t.Fatal("no winner")
	return nil, nil, flashgate.DrawEntry{}
}

// TestDrawWonOrderPay: a draw winner's order is paid by the close (its
// hold captured); paying it again, with payments at a provider, answers
// the paid order, as paying any paid order does (docs/api.md, "Public
// API": "paying a paid order ... answers 200 with the order"), not
// not_payable.
func TestDrawWonOrderPay(t *testing.T) {
	run := func(t *testing.T, dsn string) {
		s, cp, w := wonDraw(t, dsn)
		o, err := cp.Pay(s.ctx, drawclose.OrderID(w.ID), w.UserID)
		if err != nil || o.Status != flashgate.StatusPaid {
			t.Errorf("pay of the winner's paid order: got %s, %v; want paid, no error", o.Status, err)
		}
		if n := len(s.stand.Intents()); n == 0 {
			t.Fatal("no intents at the stand-in")
		}
		for _, in := range s.stand.Intents() {
			if in.Metadata["order_id"] != "" {
				t.Errorf("pay of the winner's paid order made a checkout intent %s", in.ID)
			}
		}
	}
	t.Run("sqlite", func(t *testing.T) { run(t, "sqlite://"+t.TempDir()+"/fg.db") })
}

// TestDrawWonOrderRefund: an admin refund of a draw winner's order, with
// payments at a provider, gives the money back at the provider: the
// captured hold is refunded, or the refund is refused; the order is never
// marked refunded with the money kept ("refunded in the database means
// refunded at the provider", docs/api.md "What each fault costs").
func TestDrawWonOrderRefund(t *testing.T) {
	t.Skip("defect: an admin refund of a draw winner's order (paid by the close, no payments row) is marked refunded and the captured hold is never refunded at the provider (controlplane/orders/refund.go refundUnpaid)")
	run := func(t *testing.T, dsn string) {
		s, cp, w := wonDraw(t, dsn)
		o, err := cp.Refund(s.ctx, drawclose.OrderID(w.ID))
		refunded := false
		for _, r := range s.stand.Refunds() {
			if r.PaymentIntent == w.PaymentIntent && r.Amount == 1200 {
				refunded = true
			}
		}
		if err == nil && o.Status == flashgate.StatusRefunded && !refunded {
			t.Errorf("refund of the winner's order: got %s and no refund of its hold %s at the provider (refunds %+v); want the hold refunded",
				o.Status, w.PaymentIntent, s.stand.Refunds())
		}
	}
	t.Run("sqlite", func(t *testing.T) { run(t, "sqlite://"+t.TempDir()+"/fg.db") })
}
