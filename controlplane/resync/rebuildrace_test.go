package resync

import (
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/internal/cptest"
	"github.com/flashgate/flashgate/lua"
)

// TestRebuildRacingStalePass: two re-sync passes of two control planes
// (each with its own lock) take their snapshots before an order's row is
// stored, and Redis then loses the sale. The first pass rebuilds the sale
// from its snapshot (the order's unit free) and leaves it paused; the
// second, whose snapshot predates the rebuild, must not reopen it: only a
// pass that read the rebuilt hash's mark before its snapshot (one that
// counts the row) does. Explorer seed 20261678: the second pass reopened
// the sale and a new buyer took the unit of the live order, two live units
// of one.
func TestRebuildRacingStalePass(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) { testRebuildRacingStalePass(t, be.dsn(t)) })
	}
}

func testRebuildRacingStalePass(t *testing.T, dsn string) {
	sale := flashgate.Sale{ID: "rebuild", Name: "Rebuild", Total: 1, PerUser: 1, PriceCents: 100, State: flashgate.StateOpen}
	f := openSale(t, dsn, sale)
	ctx, db, rdb := f.ctx, f.db, f.rdb
	if code, _ := cptest.Reserve(t, ctx, rdb, sale.ID, "u1", "o1", time.Now()); code != lua.ReserveOK {
		t.Fatalf("reserve o1: got code %d, want %d", code, lua.ReserveOK)
	}
	newSyncer := f.syncer
	first, second := &hookStore{DB: db}, &hookStore{DB: db}
	// The second pass's snapshot (o1 not a row yet), then the whole first
	// pass, whose snapshot misses o1 too: the sink stores o1 and Redis
	// loses the sale after it, so the first pass rebuilds it.
	second.at[atAfterSnapshot] = []func(){func() {
		first.at[atAfterSnapshot] = []func(){func() {
			cptest.Persist(t, ctx, rdb, db, sale.ID)
			if err := rdb.FlushAll(ctx).Err(); err != nil {
				t.Errorf("FLUSHALL: %v", err)
			}
		}}
		if _, after, err := newSyncer(first).Resync(ctx, sale.ID); err != nil {
			t.Errorf("first pass: %v", err)
		} else if after.Booked != 0 {
			t.Errorf("first pass: booked %d, want 0 (its snapshot predates o1's row)", after.Booked)
		}
	}}
	if _, _, err := newSyncer(second).Resync(ctx, sale.ID); err != nil {
		t.Fatalf("second pass: %v", err)
	}
	if code, _ := cptest.Reserve(t, ctx, rdb, sale.ID, "u2", "o2", time.Now()); code == lua.ReserveOK {
		t.Fatalf("after the second pass: got o2 reserved, want it refused (o1 holds the one unit, booked %d, start %d)",
			cptest.Field(t, rdb, sale.ID, lua.FieldBooked), cptest.Field(t, rdb, sale.ID, lua.FieldStart))
	}
	// A pass whose snapshot follows the rebuild reopens the sale, o1
	// counted.
	if _, after, err := newSyncer(db).Resync(ctx, sale.ID); err != nil || after.Booked != 1 {
		t.Fatalf("third pass: got booked %d, %v; want 1", after.Booked, err)
	}
	if got := cptest.Field(t, rdb, sale.ID, lua.FieldStart); got != 1 {
		t.Fatalf("after the third pass: got start %d, want 1 (open)", got)
	}
	if code, _ := cptest.Reserve(t, ctx, rdb, sale.ID, "u2", "o2", time.Now()); code != lua.ReserveSoldOut {
		t.Fatalf("after the third pass: got code %d for o2, want sold out (%d)", code, lua.ReserveSoldOut)
	}
}
