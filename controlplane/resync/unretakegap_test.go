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

// honouredHookStore is the database with a step run before a rebuild's
// read of the honoured retakes (after its second read of the pending
// ones, before its hold).
type honouredHookStore struct {
	*sqldb.DB
	before func()
}

func (p *honouredHookStore) HonouredRetakes(ctx context.Context, id string) ([]flashgate.Order, error) {
	if f := p.before; f != nil {
		p.before = nil
		f()
	}
	return p.DB.HonouredRetakes(ctx, id)
}

// TestUnretakeOnRebuiltHashBeforeHold: two rebuilds of a sale Redis lost
// while a late payment's retake was pending. The first (B) reads the
// retake pending twice; then the payment is refunded (its row dropped),
// a second rebuild (B0, which reads no pending row) writes the sale's
// hash, and the refund's unretake finds the total, the order not in the
// retaken set, and records nothing; B then holds the order and its final
// Resync counts a unit no order gives back: the unit is hidden (reserved
// one above the persisted units) until the sale's next rebuild. The
// unretake that finds no total records the refusal (3) so that a hold
// after it skips the order; the one that finds the total and no retake
// does not.
func TestUnretakeOnRebuiltHashBeforeHold(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) { testUnretakeOnRebuiltHashBeforeHold(t, be.dsn(t)) })
	}
}

func testUnretakeOnRebuiltHashBeforeHold(t *testing.T, dsn string) {
	sale := flashgate.Sale{ID: "gap", Name: "Gap", Total: 1, PerUser: 1, PriceCents: 100, State: flashgate.StateOpen}
	f := openSale(t, dsn, sale)
	ctx, db, rdb := f.ctx, f.db, f.rdb
	if code, _ := cptest.Reserve(t, ctx, rdb, sale.ID, "u1", "o1", time.Now()); code != lua.ReserveOK {
		t.Fatalf("reserve o1: got code %d, want %d", code, lua.ReserveOK)
	}
	o1 := cptest.Persist(t, ctx, rdb, db, sale.ID)[0]
	now := time.Now()
	f.lateRetake(o1)
	f.flush()
	newSyncer := f.syncer
	b := &honouredHookStore{DB: db, before: func() {
		// The late payment is refunded (the sale closed in the database,
		// say): its row dropped ...
		refund := flashgate.PaymentStep{OrderID: o1.ID, FromOutcome: []string{"late_pending"}, ToOutcome: "refunding_late", DropRetake: true}
		if won, err := db.StepPayment(ctx, refund, now); !won || err != nil {
			t.Errorf("refund step: %v, %v", won, err)
		}
		// ... a second rebuild, which reads no pending row, writes the hash ...
		if _, _, err := newSyncer(db).Resync(ctx, sale.ID); err != nil {
			t.Errorf("the other rebuild: %v", err)
		}
		// ... and the refund's unretake finds the total, o1 not retaken.
		if n, err := lua.Unretake.Run(ctx, rdb, lua.UnretakeKeys(sale.ID), o1.ID, o1.UserID, 1, "", "1").Int(); err != nil || n != 0 {
			t.Errorf("unretake: got %d, %v; want 0 (not retaken in the rebuilt hash)", n, err)
		}
	}}
	if _, _, err := newSyncer(b).Resync(ctx, sale.ID); err != nil {
		t.Fatalf("the holding rebuild: %v", err)
	}
	for i := range 2 {
		if _, _, err := newSyncer(db).Resync(ctx, sale.ID); err != nil {
			t.Fatalf("pass %d after the rebuilds: %v", i, err)
		}
	}
	if got := cptest.Field(t, rdb, sale.ID, lua.FieldBooked); got != 0 {
		t.Fatalf("after the rebuilds and two passes: got booked %d, want 0 (o1 refunded, no live order; refusal %q)",
			got, rdb.HGet(ctx, lua.RetakeRefusedKey(sale.ID), o1.ID).Val())
	}
}
