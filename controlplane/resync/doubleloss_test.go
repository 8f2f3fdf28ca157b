package resync

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/internal/cptest"
	"github.com/flashgate/flashgate/lua"
	"github.com/flashgate/flashgate/sqldb"
)

// lossStore is the database, with a step run at a rebuild's second read
// of the pending retakes (after its restore's pages, before its hold).
type lossStore struct {
	*sqldb.DB
	reads int
	after func()
}

func (p *lossStore) PendingRetakes(ctx context.Context, id string) ([]flashgate.Order, error) {
	p.reads++
	if p.reads == 2 && p.after != nil {
		p.after()
	}
	return p.DB.PendingRetakes(ctx, id)
}

// TestRebuildLosesRedisAfterRestore: Redis loses a sale again while a
// rebuild of it runs, after the restore's pages (the released set and
// the buyers) and before its final Resync. That Resync finds the
// restore's id gone and rebuilds nothing; the next passes rebuild the
// sale from every row. Before (a reviewer's window), it rebuilt the hash
// with the stock of its snapshot over an empty released set: an order
// expired before the snapshot, whose release the database still queued,
// was delivered by the next pass to a released set that no longer had
// it, its unit given back a second time, and the sale reopened with
// booked below the live units.
func TestRebuildLosesRedisAfterRestore(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) { testRebuildLosesRedisAfterRestore(t, be.dsn(t)) })
	}
}

func testRebuildLosesRedisAfterRestore(t *testing.T, dsn string) {
	sale := flashgate.Sale{ID: "twice", Name: "Twice", Total: 2, PerUser: 1, PriceCents: 100, State: flashgate.StateOpen}
	f := openSale(t, dsn, sale)
	ctx, db, rdb := f.ctx, f.db, f.rdb
	for _, u := range []string{"u0", "u3"} {
		if code, _ := cptest.Reserve(t, ctx, rdb, sale.ID, u, "o"+u[1:], time.Now()); code != lua.ReserveOK {
			t.Fatalf("reserve of %s: got code %d, want %d", u, code, lua.ReserveOK)
		}
	}
	cptest.Persist(t, ctx, rdb, db, sale.ID)
	// Redis loses the sale; o3 expires meanwhile (its release, finding
	// no sale, stays queued in the database).
	f.flush()
	if _, err := db.Transition(ctx, "o3", []flashgate.OrderStatus{flashgate.StatusPendingPayment}, flashgate.StatusExpired, time.Now()); err != nil {
		t.Fatalf("Transition: %v", err)
	}
	newSyncer := f.syncer
	// The rebuild; Redis loses the sale again after its restore's pages.
	store := &lossStore{DB: db, after: func() {
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			t.Errorf("FLUSHALL: %v", err)
		}
	}}
	if _, _, err := newSyncer(store).Resync(ctx, sale.ID); !errors.Is(err, flashgate.ErrUnavailable) {
		t.Fatalf("the rebuild: got %v, want an error wrapping ErrUnavailable (Redis lost the sale again; the next pass rebuilds it)", err)
	}
	for i := range 2 {
		_, after, err := newSyncer(db).Resync(ctx, sale.ID)
		if err != nil {
			t.Fatalf("pass %d after the rebuild: %v", i, err)
		}
		start := cptest.Field(t, rdb, sale.ID, lua.FieldStart)
		t.Logf("pass %d: booked %d start %d", i, after.Booked, start)
		if start == 1 && after.Booked < 1 {
			t.Fatalf("pass %d after the rebuild: the sale open with booked %d, want 1 (o0 live): one of its units sells twice", i, after.Booked)
		}
	}
	if start, booked := cptest.Field(t, rdb, sale.ID, lua.FieldStart), cptest.Field(t, rdb, sale.ID, lua.FieldBooked); start != 1 || booked != 1 {
		t.Fatalf("after two passes: got start %d, booked %d; want the sale open with booked 1 (o0 live)", start, booked)
	}
}
