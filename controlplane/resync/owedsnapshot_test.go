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

// snapStore is the database, with a step run right after a pass's
// snapshot (its figures).
type snapStore struct {
	*sqldb.DB
	after func()
}

func (p *snapStore) Figures(ctx context.Context, id string) (flashgate.SaleFigures, error) {
	f, err := p.DB.Figures(ctx, id)
	if p.after != nil {
		p.after()
		p.after = nil
	}
	return f, err
}

// TestRefundOfHonouredAfterSnapshot: an admin refund of an honoured late
// payment's order whose last step (the retake owed back: its row leaves
// the persisted units) and unretake ("1": reserved given back too) both
// land between a pass's snapshot and its script. The snapshot's P still
// counts the retake row, the hash's reserved no longer does: the script
// reads reserved below P as a Redis older than the database and raises
// reserved to the snapshot's P. From then on every quiet pass reads the
// excess as a unit reserved and not yet persisted, and books it: one
// unit hidden until the sale's next rebuild.
func TestRefundOfHonouredAfterSnapshot(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) { testRefundOfHonouredAfterSnapshot(t, be.dsn(t), false) })
	}
}

// TestRefundOfHonouredDuringRebuild: as TestRefundOfHonouredAfterSnapshot,
// with Redis having lost the sale before the pass: the refund's unretake
// finds no sale (-1), RetakeGivenBack drops the row all the same, and the
// rebuild writes reserved from its snapshot, which still counted the
// retake's row (and the order live). Every later pass books the unit.
func TestRefundOfHonouredDuringRebuild(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) { testRefundOfHonouredAfterSnapshot(t, be.dsn(t), true) })
	}
}

func testRefundOfHonouredAfterSnapshot(t *testing.T, dsn string, lost bool) {
	sale := flashgate.Sale{ID: "snap", Name: "Snap", Total: 2, PerUser: 1, PriceCents: 100, State: flashgate.StateOpen}
	f := openSale(t, dsn, sale)
	ctx, db, rdb := f.ctx, f.db, f.rdb
	orders := f.buy("u0", "u1")
	o1 := orders[1]
	now := time.Now()
	// o1 expires, its payment succeeds late, is retaken and honoured.
	f.lateRetake(o1)
	honour := honourStep(o1)
	if won, err := db.StepPayment(ctx, honour, now); !won || err != nil {
		t.Fatalf("honour: %v, %v", won, err)
	}
	s := f.syncer(db)
	if _, after, err := s.Resync(ctx, sale.ID); err != nil || after.Booked != 2 {
		t.Fatalf("pass after the honour: got booked %d, %v; want 2", after.Booked, err)
	}
	// A pass whose snapshot precedes the admin refund's last step and
	// its unretake (finishRefund, controlplane/orders/refund.go).
	store := &snapStore{DB: db, after: func() {
		for _, st := range []flashgate.PaymentStep{
			{OrderID: o1.ID, FromOutcome: []string{"honoured_late"}, ToOutcome: "refunding"},
			{OrderID: o1.ID, FromOutcome: []string{"refunding"}, ToOutcome: "refunded", FromStatus: []flashgate.OrderStatus{flashgate.StatusPaid},
				ToStatus: flashgate.StatusRefunded, Refunded: true, RefundID: "re_1", OweRetake: true},
		} {
			if won, err := db.StepPayment(ctx, st, now); !won || err != nil {
				t.Errorf("refund step %s: %v, %v", st.ToOutcome, won, err)
			}
		}
		if _, err := (&cptest.Releaser{RDB: rdb}).Release(ctx, o1); err != nil {
			t.Errorf("Release: %v", err)
		}
		if n, err := lua.Unretake.Run(ctx, rdb, lua.UnretakeKeys(sale.ID), o1.ID, o1.UserID, 1, "", "").Int(); err != nil || (n != 1 && !lost) {
			t.Errorf("unretake: got %d, %v; want 1 (given back)", n, err)
		}
		if err := db.RetakeGivenBack(ctx, o1.ID); err != nil {
			t.Errorf("RetakeGivenBack: %v", err)
		}
	}}
	if lost {
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			t.Fatalf("FLUSHALL: %v", err)
		}
	}
	raced := f.syncer(store)
	if _, after, err := raced.Resync(ctx, sale.ID); err != nil {
		t.Fatalf("the raced pass: %v", err)
	} else {
		t.Logf("raced pass: booked %d reserved %d", after.Booked, after.Reserved)
	}
	for i := range 2 {
		_, after, err := s.Resync(ctx, sale.ID)
		if err != nil {
			t.Fatalf("quiet pass %d: %v", i, err)
		}
		t.Logf("quiet pass %d: booked %d reserved %d", i, after.Booked, after.Reserved)
	}
	if got := cptest.Field(t, rdb, sale.ID, lua.FieldBooked); got != 1 {
		code, _ := cptest.Reserve(t, ctx, rdb, sale.ID, "u2", "o2", time.Now())
		t.Fatalf("after quiet passes: got booked %d, want 1 (o0 live); a reserve of o2 answers %d (%d = reserved): o1's unit hidden", got, code, lua.ReserveOK)
	}
}
