package resync

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/internal/cptest"
	"github.com/flashgate/flashgate/lua"
)

// loseBeforeRestored is a Redis hook that, once armed, runs lose before
// the next call of lua.Restored (once).
type loseBeforeRestored struct {
	lose  func()
	armed atomic.Bool
}

func (*loseBeforeRestored) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *loseBeforeRestored) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if a := cmd.Args(); len(a) > 1 && a[0] == "evalsha" && a[1] == lua.Restored.Hash() && h.armed.CompareAndSwap(true, false) {
			h.lose()
		}
		return next(ctx, cmd)
	}
}

func (*loseBeforeRestored) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestRebuildLosesRedisBeforeRestoreID is TestRebuildLosesRedisAfterRestore
// with the second loss after the restore's pages and before the rebuild
// records its restore's id (lua.Restored).
func TestRebuildLosesRedisBeforeRestoreID(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) { testRebuildLosesRedisBeforeRestoreID(t, be.dsn(t)) })
	}
}

func testRebuildLosesRedisBeforeRestoreID(t *testing.T, dsn string) {
	sale := flashgate.Sale{ID: "twice", Name: "Twice", Total: 2, PerUser: 1, PriceCents: 100, State: flashgate.StateOpen}
	f := openSale(t, dsn, sale)
	ctx, db, rdb := f.ctx, f.db, f.rdb
	for _, u := range []string{"u0", "u3"} {
		if code, _ := cptest.Reserve(t, ctx, rdb, sale.ID, u, "o"+u[1:], time.Now()); code != lua.ReserveOK {
			t.Fatalf("reserve of %s: got code %d, want %d", u, code, lua.ReserveOK)
		}
	}
	cptest.Persist(t, ctx, rdb, db, sale.ID)
	f.flush()
	if _, err := db.Transition(ctx, "o3", []flashgate.OrderStatus{flashgate.StatusPendingPayment}, flashgate.StatusExpired, time.Now()); err != nil {
		t.Fatalf("Transition: %v", err)
	}
	hook := &loseBeforeRestored{lose: func() {
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			t.Errorf("FLUSHALL: %v", err)
		}
	}}
	rdb.AddHook(hook)
	hook.armed.Store(true)
	if _, _, err := f.syncer(db).Resync(ctx, sale.ID); !errors.Is(err, flashgate.ErrUnavailable) {
		t.Errorf("the rebuild: got %v, want an error wrapping ErrUnavailable (Redis lost the sale again; the next pass rebuilds it)", err)
	}
	for i := range 2 {
		_, after, err := f.syncer(db).Resync(ctx, sale.ID)
		if err != nil {
			t.Fatalf("pass %d after the rebuild: %v", i, err)
		}
		t.Logf("pass %d: booked %d start %d", i, after.Booked, cptest.Field(t, rdb, sale.ID, lua.FieldStart))
	}
	if start, booked := cptest.Field(t, rdb, sale.ID, lua.FieldStart), cptest.Field(t, rdb, sale.ID, lua.FieldBooked); start != 1 || booked != 1 {
		t.Errorf("after two passes: got start %d, booked %d; want the sale open with booked 1 (o0 live)", start, booked)
	}
	if n, err := rdb.HLen(ctx, lua.BuyersKey(sale.ID)).Result(); err != nil || n != 1 {
		t.Errorf("buyers after two passes: got %d, %v; want 1 (u0's live o0)", n, err)
	}
}

// TestRebuildLosesRedisBetweenPages is TestRebuildLosesRedisBeforeRestoreID
// with the second loss between the restore's pages: after the page of
// expired orders (o3 released) and before the page of live ones. The
// page after the loss is refused (the restore's id went with the sale),
// the rebuild fails, and the next passes rebuild the sale from every row.
func TestRebuildLosesRedisBetweenPages(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) { testRebuildLosesRedisBetweenPages(t, be.dsn(t)) })
	}
}

func testRebuildLosesRedisBetweenPages(t *testing.T, dsn string) {
	sale := flashgate.Sale{ID: "twice", Name: "Twice", Total: 2, PerUser: 1, PriceCents: 100, State: flashgate.StateOpen}
	f := openSale(t, dsn, sale)
	ctx, db, rdb := f.ctx, f.db, f.rdb
	f.buy("u0", "u3")
	f.flush()
	if _, err := db.Transition(ctx, "o3", []flashgate.OrderStatus{flashgate.StatusPendingPayment}, flashgate.StatusExpired, time.Now()); err != nil {
		t.Fatalf("Transition: %v", err)
	}
	store := &pageStore{DB: db, before: map[flashgate.OrderStatus]func(){flashgate.StatusPendingPayment: f.flush}}
	if _, _, err := f.syncer(store).Resync(ctx, sale.ID); !errors.Is(err, flashgate.ErrUnavailable) {
		t.Errorf("the rebuild: got %v, want an error wrapping ErrUnavailable (Redis lost the sale again; the next pass rebuilds it)", err)
	}
	for i := range 2 {
		_, after, err := f.syncer(db).Resync(ctx, sale.ID)
		if err != nil {
			t.Fatalf("pass %d after the rebuild: %v", i, err)
		}
		t.Logf("pass %d: booked %d start %d", i, after.Booked, cptest.Field(t, rdb, sale.ID, lua.FieldStart))
	}
	if start, booked := cptest.Field(t, rdb, sale.ID, lua.FieldStart), cptest.Field(t, rdb, sale.ID, lua.FieldBooked); start != 1 || booked != 1 {
		t.Errorf("after two passes: got start %d, booked %d; want the sale open with booked 1 (o0 live)", start, booked)
	}
	if got, err := rdb.HGet(ctx, lua.BuyersKey(sale.ID), "u0").Result(); err != nil || got != "o0" {
		t.Errorf("u0's buyer entry after two passes: got %q, %v; want o0 (live)", got, err)
	}
}
