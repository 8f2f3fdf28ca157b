package resync

import (
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/internal/cptest"
	"github.com/flashgate/flashgate/lua"
)

// TestUnretakeAfterResyncOfRefund: an admin refund of an honoured late
// payment's order (paid -> refunded in the database, its retake marked
// owed back in the same step) whose unretake comes after a re-sync pass
// (a pass between the refund's last step and its unretake, or the
// admin's retry after the refunding process died before it) gives the
// order's unit back once: the pass keeps it taken (reserved above the
// persisted units), the unretake gives it back with reserved. Before
// (a reviewer's window), the pass set booked from the rows, which no
// longer counted the order, the unretake gave the unit back a second
// time, and booked dropped below the live units: a unit sold twice.
func TestUnretakeAfterResyncOfRefund(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) { testUnretakeAfterResyncOfRefund(t, be.dsn(t)) })
	}
}

func testUnretakeAfterResyncOfRefund(t *testing.T, dsn string) {
	sale := flashgate.Sale{ID: "again", Name: "Again", Total: 2, PerUser: 1, PriceCents: 100, State: flashgate.StateOpen}
	f := openSale(t, dsn, sale)
	ctx, db, rdb := f.ctx, f.db, f.rdb
	orders := f.buy("u0", "u1")
	o1 := orders[1]
	now := time.Now()
	// o1 expires (released), its payment succeeds late, the retake takes
	// its unit again and the honour step pays it.
	f.lateRetake(o1)
	honour := honourStep(o1)
	if won, err := db.StepPayment(ctx, honour, now); !won || err != nil {
		t.Fatalf("honour: %v, %v", won, err)
	}
	s := f.syncer(db)
	if _, after, err := s.Resync(ctx, sale.ID); err != nil || after.Booked != 2 {
		t.Fatalf("pass after the honour: got booked %d, %v; want 2", after.Booked, err)
	}
	// An admin refunds o1 (its payment's steps: honoured_late ->
	// refunding -> refunded, the order paid -> refunded); its release is
	// a no-op (the retake kept o1 in the released set).
	for _, st := range []flashgate.PaymentStep{
		{OrderID: o1.ID, FromOutcome: []string{"honoured_late"}, ToOutcome: "refunding"},
		{OrderID: o1.ID, FromOutcome: []string{"refunding"}, ToOutcome: "refunded", FromStatus: []flashgate.OrderStatus{flashgate.StatusPaid},
			ToStatus: flashgate.StatusRefunded, Refunded: true, RefundID: "re_1", OweRetake: true},
	} {
		if won, err := db.StepPayment(ctx, st, now); !won || err != nil {
			t.Fatalf("refund step %s: %v, %v", st.ToOutcome, won, err)
		}
	}
	if _, err := (&cptest.Releaser{RDB: rdb}).Release(ctx, o1); err != nil {
		t.Fatalf("Release: %v", err)
	}
	// A re-sync pass, then the refund's unretake.
	if _, after, err := s.Resync(ctx, sale.ID); err != nil || after.Booked != 1 {
		t.Fatalf("pass after the refund: got booked %d, %v; want 1 (o0; o1's owed unit given back by the pass)", after.Booked, err)
	}
	if n, err := lua.Unretake.Run(ctx, rdb, lua.UnretakeKeys(sale.ID), o1.ID, o1.UserID, 1, "", "").Int(); err != nil || n != 0 {
		t.Fatalf("unretake: got %d, %v; want 0 (given back already)", n, err)
	}
	if err := db.RetakeGivenBack(ctx, o1.ID); err != nil {
		t.Fatalf("RetakeGivenBack: %v", err)
	}
	for i := range 2 {
		if got := cptest.Field(t, rdb, sale.ID, lua.FieldBooked); got != 1 {
			code2, _ := cptest.Reserve(t, ctx, rdb, sale.ID, "u2", "o2", time.Now())
			code3, _ := cptest.Reserve(t, ctx, rdb, sale.ID, "u3", "o3", time.Now())
			t.Fatalf("after the unretake and %d passes: got booked %d, want 1 (o0 live); reserves of o2 and o3 then answer %d, %d (%d = reserved: three live units of two)",
				i, got, code2, code3, lua.ReserveOK)
		}
		if _, _, err := s.Resync(ctx, sale.ID); err != nil {
			t.Fatalf("pass %d after the unretake: %v", i+1, err)
		}
	}
	if code, _ := cptest.Reserve(t, ctx, rdb, sale.ID, "u2", "o2", time.Now()); code != lua.ReserveOK {
		t.Fatalf("reserve o2: got code %d, want %d (o1's unit free again)", code, lua.ReserveOK)
	}
}
