package controlplane

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/lua"
)

// argCounter is a go-redis hook that counts the commands and arguments a
// client sends.
type argCounter struct {
	cmds, args atomic.Int64
}

func (c *argCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *argCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.cmds.Add(1)
		c.args.Add(int64(len(cmd.Args())))
		return next(ctx, cmd)
	}
}
func (c *argCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			c.cmds.Add(1)
			c.args.Add(int64(len(cmd.Args())))
		}
		return next(ctx, cmds)
	}
}

// bigReleasedSale creates an open sale whose n orders were all released
// (expired) long ago: n rows in the database, and in Redis what their
// releases left (reserved n, booked 0, every order in the released set).
func (e *env) bigReleasedSale(sale string, n int) {
	e.t.Helper()
	start := time.Now()
	defer func() { e.t.Logf("%d released orders built in %v", n, time.Since(start).Round(time.Millisecond)) }()
	e.openSale(sale, int64(n)+10, 0)
	at := t0.Add(-time.Hour)
	const chunk = 10000
	for start := 0; start < n; start += chunk {
		var orders []flashgate.Order
		var ids []any
		for i := start; i < min(start+chunk, n); i++ {
			id := "r" + strconv.Itoa(1000000+i)
			orders = append(orders, flashgate.Order{ID: id, SaleID: sale, UserID: "u" + strconv.Itoa(i), Quantity: 1,
				PriceCents: 500, Status: flashgate.StatusExpired, CreatedAt: at, UpdatedAt: at})
			ids = append(ids, id)
		}
		if _, err := e.db.InsertOrders(e.ctx, orders); err != nil {
			e.t.Fatalf("InsertOrders: %v", err)
		}
		if err := e.rdb.SAdd(e.ctx, lua.ReleasedKey(sale), ids...).Err(); err != nil {
			e.t.Fatal(err)
		}
	}
	if err := e.rdb.HSet(e.ctx, lua.SaleKey(sale), lua.FieldReserved, n, lua.FieldBooked, 0).Err(); err != nil {
		e.t.Fatal(err)
	}
}

// resyncSettled re-syncs sale until a pass completes (a first pass may
// deliver a backlog of releases over several passes).
func (e *env) resyncSettled(sale string) (ResyncFigures, ResyncFigures) {
	e.t.Helper()
	for i := 0; ; i++ {
		before, after, err := e.svc.Resync(e.ctx, sale)
		if err == nil {
			return before, after
		}
		if i > 200 {
			e.t.Fatalf("Resync: %v", err)
		}
	}
}

// TestIdleResyncO1: with a sale holding 100,000 released orders, an idle
// re-sync pass (nothing changed since the last one) sends Redis a handful of
// commands with a handful of arguments, not one pair per released order.
// Under the race detector, whose pure-Go SQLite is too slow to build them,
// it runs on PostgreSQL with 10,000.
func TestIdleResyncO1(t *testing.T) {
	dsn, n := sqliteDSN(t), 100_000
	if raceEnabled {
		dsn, n = postgresDSN(t), 10_000
	}
	e := newEnv(t, dsn, nil)
	e.bigReleasedSale("big", n)
	_, after := e.resyncSettled("big") // the first pass may carry the backlog
	if after.Booked != 0 || after.Remaining != int64(n)+10 {
		t.Fatalf("after the first re-sync: booked %d remaining %d, want 0 and %d", after.Booked, after.Remaining, n+10)
	}
	var c argCounter
	e.rdb.AddHook(&c)
	for pass := 0; pass < 3; pass++ {
		c.cmds.Store(0)
		c.args.Store(0)
		if _, _, err := e.svc.Resync(e.ctx, "big"); err != nil {
			t.Fatalf("idle Resync: %v", err)
		}
		if cmds, args := c.cmds.Load(), c.args.Load(); cmds > 6 || args > 40 {
			t.Fatalf("idle re-sync pass %d sent %d commands with %d arguments, want at most 6 and 40 (O(1), not O(released orders))", pass, cmds, args)
		}
	}
	// One more release: the next pass delivers exactly that one.
	if code, _ := e.reserve("big", "late"); code != lua.ReserveOK {
		t.Fatalf("reserve: code %d", code)
	}
	o := e.persist("big")[0]
	if _, err := e.db.Transition(e.ctx, o.ID, []flashgate.OrderStatus{flashgate.StatusPendingPayment}, flashgate.StatusCancelled, t0); err != nil {
		t.Fatal(err)
	}
	c.args.Store(0)
	_, after, err := e.svc.Resync(e.ctx, "big")
	if err != nil {
		t.Fatal(err)
	}
	if args := c.args.Load(); args > 50 {
		t.Errorf("a pass after one release sent %d arguments, want at most 50", args)
	}
	if after.Booked != 0 {
		t.Errorf("booked %d after the cancel, want 0", after.Booked)
	}
	if got, _ := e.rdb.HGet(e.ctx, lua.BuyersKey("big"), "late").Result(); got != "" {
		t.Errorf("the cancelled buyer still holds %q", got)
	}
}

// TestLateReleaseCountedOnce: a release whose Release call comes after a
// re-sync already gave its unit back (from the database's queue) changes
// nothing, and a re-sync after Release changes nothing either.
func TestLateReleaseCountedOnce(t *testing.T) {
	e := newEnv(t, sqliteDSN(t), nil)
	e.openSale("s", 3, 0)
	e.reserveMany("s", "a", 3)
	orders := e.persist("s")
	// The cancel commits, then its Release is late: the re-sync runs first.
	if _, err := e.db.Transition(e.ctx, orders[0].ID, []flashgate.OrderStatus{flashgate.StatusPendingPayment}, flashgate.StatusCancelled, t0); err != nil {
		t.Fatal(err)
	}
	if _, after, err := e.svc.Resync(e.ctx, "s"); err != nil || after.Booked != 2 {
		t.Fatalf("Resync: booked %d, %v; want 2", after.Booked, err)
	}
	o := orders[0]
	o.Status = flashgate.StatusCancelled
	if ok, err := e.rel.Release(e.ctx, o); ok || err != nil {
		t.Fatalf("late Release: got %v, %v; want false (already given back)", ok, err)
	}
	// The other way round: Release first, then the re-sync delivers it again.
	o2 := orders[1]
	got, err := e.svc.Cancel(e.ctx, o2.ID, o2.UserID)
	if err != nil || got.Status != flashgate.StatusCancelled {
		t.Fatalf("Cancel: %v, %v", got.Status, err)
	}
	for i := 0; i < 2; i++ {
		if _, after, err := e.svc.Resync(e.ctx, "s"); err != nil || after.Booked != 1 {
			t.Fatalf("Resync %d: booked %d, %v; want 1", i, after.Booked, err)
		}
	}
	if got := e.reserveMany("s", "b", 5); got != 2 {
		t.Fatalf("resold %d, want exactly 2", got)
	}
}

// TestResyncRedisLostReleases: Redis comes back from a snapshot taken before
// releases were delivered (same reserved, older delivered count): the
// re-sync notices, restores the released set and buyers from the database,
// and the released buyers can buy again while the others cannot.
func TestResyncRedisLostReleases(t *testing.T) {
	e := newEnv(t, sqliteDSN(t), nil)
	e.openSale("s", 5, 0)
	e.reserveMany("s", "a", 4)
	orders := e.persist("s")
	e.resyncSettled("s")
	snap := map[string]string{}
	for _, k := range lua.ReleaseKeys("s") {
		if d, err := e.rdb.Dump(e.ctx, k).Result(); err == nil {
			snap[k] = d
		} else if !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
	}
	// Two cancels whose Releases fail; a re-sync delivers them.
	e.rel.Fail.Store(true)
	for _, o := range orders[:2] {
		if _, err := e.svc.Cancel(e.ctx, o.ID, o.UserID); err != nil {
			t.Fatal(err)
		}
	}
	e.rel.Fail.Store(false)
	e.resyncSettled("s")
	for k, d := range snap {
		if err := e.rdb.RestoreReplace(e.ctx, k, 0, d).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if _, after, err := e.svc.Resync(e.ctx, "s"); err != nil || after.Booked != 2 {
		t.Fatalf("Resync after restore: booked %d, %v; want 2", after.Booked, err)
	}
	if field(t, e.rdb, "s", lua.FieldStart) != 1 {
		t.Fatalf("sale not open after the restore")
	}
	for _, o := range orders[:2] {
		if code, _ := e.reserve("s", o.UserID); code != lua.ReserveOK {
			t.Errorf("cancelled buyer %s: code %d, want %d", o.UserID, code, lua.ReserveOK)
		}
	}
	for _, o := range orders[2:] {
		if code, got := e.reserve("s", o.UserID); code != lua.ReservePurchased || got != o.ID {
			t.Errorf("buyer %s: code %d %q, want %d %q", o.UserID, code, got, lua.ReservePurchased, o.ID)
		}
	}
}

// slowPages is a Store whose OrdersPage first waits, as a big sale's
// restore would take longer than a pass.
type slowPages struct {
	Store
	wait time.Duration
}

func (s slowPages) OrdersPage(ctx context.Context, saleID string, st flashgate.OrderStatus, afterID string, limit int) ([]flashgate.Order, error) {
	time.Sleep(s.wait) // a slow database, not a wait
	return s.Store.OrdersPage(ctx, saleID, st, afterID, limit)
}

// TestRestoreOutlivesPassDeadline: a restore after a Redis loss goes on
// past the deadline of the pass that started it (a big sale takes longer),
// but not past a cancellation.
func TestRestoreOutlivesPassDeadline(t *testing.T) {
	e := newEnv(t, sqliteDSN(t), func(c *Config) { c.Store = slowPages{Store: c.Store, wait: 30 * time.Millisecond} })
	e.openSale("s", 5, 0)
	e.reserveMany("s", "a", 3)
	e.persist("s")
	if err := e.rdb.FlushAll(e.ctx).Err(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(e.ctx, 50*time.Millisecond)
	defer cancel()
	if _, after, err := e.svc.Resync(ctx, "s"); err != nil || after.Booked != 3 {
		t.Fatalf("Resync past its deadline: booked %d, %v; want 3, nil", after.Booked, err)
	}
	e.rdb.FlushAll(e.ctx)
	ctx, cancel = context.WithCancel(e.ctx)
	time.AfterFunc(50*time.Millisecond, cancel)
	if _, _, err := e.svc.Resync(ctx, "s"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Resync cancelled during the restore: got %v, want context.Canceled", err)
	}
}
