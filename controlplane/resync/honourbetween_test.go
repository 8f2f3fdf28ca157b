package resync

import (
	"context"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/internal/cptest"
	"github.com/flashgate/flashgate/lua"
	"github.com/flashgate/flashgate/sqldb"
)

// pendStore is the database, with a step run once right after a pass's
// first read of the pending retakes.
type pendStore struct {
	*sqldb.DB
	after func()
}

func (p *pendStore) PendingRetakes(ctx context.Context, id string) ([]flashgate.Order, error) {
	o, err := p.DB.PendingRetakes(ctx, id)
	if p.after != nil {
		fn := p.after
		p.after = nil
		fn()
	}
	return o, err
}

// TestHonourBetweenReadAndSnapshot: a late payment's honour step that
// commits right after a rebuild's read of the pending retakes is counted
// once: the pending read and the figures are one database snapshot
// (Store.Snapshot), so the rebuild sees o1 pending and not counted, and
// holds it. Before (a reviewer's window), the read came before the
// snapshot, which counted o1 paid with its retakes row, and the rebuild
// held it too: the unit counted twice, hidden through any number of quiet
// passes and through o1's refund; with no further Redis loss, for good.
func TestHonourBetweenReadAndSnapshot(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) { testHonourBetweenReadAndSnapshot(t, be.dsn(t)) })
	}
}

func testHonourBetweenReadAndSnapshot(t *testing.T, dsn string) {
	sale := flashgate.Sale{ID: "between", Name: "Between", Total: 3, PerUser: 1, PriceCents: 100, State: flashgate.StateOpen}
	f := openSale(t, dsn, sale)
	ctx, db, rdb := f.ctx, f.db, f.rdb
	orders := f.buy("u0", "u1")
	o1 := orders[1]
	now := time.Now()
	f.lateRetake(o1)
	f.flush()
	ps := &pendStore{DB: db, after: func() {
		if won, err := db.StepPayment(ctx, honourStep(o1), now); !won || err != nil {
			t.Errorf("honour: %v, %v", won, err)
		}
	}}
	newSyncer := f.syncer
	if _, after, err := newSyncer(ps).Resync(ctx, sale.ID); err != nil {
		t.Fatalf("rebuild: %v", err)
	} else {
		t.Logf("rebuild: booked %d reserved %d", after.Booked, after.Reserved)
	}
	passes := func(when string) int64 {
		t.Helper()
		for range 3 {
			if _, _, err := newSyncer(db).Resync(ctx, sale.ID); err != nil {
				t.Fatalf("pass %s: %v", when, err)
			}
		}
		return cptest.Field(t, rdb, sale.ID, lua.FieldBooked)
	}
	bookedPaid := passes("with o1 paid")
	// The admin refunds o1 (finishRefund): last step, release, unretake.
	for _, st := range []flashgate.PaymentStep{
		{OrderID: o1.ID, FromOutcome: []string{"honoured_late"}, ToOutcome: "refunding"},
		{OrderID: o1.ID, FromOutcome: []string{"refunding"}, ToOutcome: "refunded", FromStatus: []flashgate.OrderStatus{flashgate.StatusPaid},
			ToStatus: flashgate.StatusRefunded, Refunded: true, RefundID: "re_o1", IntentStatus: flashgate.IntentSucceeded, OweRetake: true},
	} {
		if won, err := db.StepPayment(ctx, st, now); !won || err != nil {
			t.Fatalf("refund step %s: %v, %v", st.ToOutcome, won, err)
		}
	}
	if _, err := (&cptest.Releaser{RDB: rdb}).Release(ctx, o1); err != nil {
		t.Fatalf("refund's release: %v", err)
	}
	if err := lua.Unretake.Run(ctx, rdb, lua.UnretakeKeys(sale.ID), o1.ID, o1.UserID, 1, "", "").Err(); err != nil {
		t.Fatalf("refund's unretake: %v", err)
	}
	if err := db.RetakeGivenBack(ctx, o1.ID); err != nil {
		t.Fatalf("RetakeGivenBack: %v", err)
	}
	bookedRefunded := passes("after o1's refund")
	if bookedPaid != 2 || bookedRefunded != 1 {
		t.Fatalf("after quiet passes: got booked %d with o0 and o1 live, %d after o1's refund; want 2 and 1 (o1's unit counted twice, hidden for good)", bookedPaid, bookedRefunded)
	}
}
