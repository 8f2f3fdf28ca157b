package ordersink_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/testenv/dbfault"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/lua"
	"github.com/flashgate/flashgate/ordersink"
	"github.com/flashgate/flashgate/sqldb"
)

// sale2 is a second sale beside sale, to show that one sale's trouble
// leaves the other alone.
const sale2 = "s2"

// prepareSale opens another sale of total units.
func (e *env) prepareSale(t *testing.T, id string, total int) {
	t.Helper()
	ctx := context.Background()
	if err := e.rdb.SAdd(ctx, lua.SalesKey(), id).Err(); err != nil {
		t.Fatal(err)
	}
	if err := lua.Prepare.Run(ctx, e.rdb, lua.SaleKeys(id), total, total, 1, 700).Err(); err != nil {
		t.Fatal(err)
	}
	if err := lua.SetState.Run(ctx, e.rdb, lua.SaleKeys(id), "open").Err(); err != nil {
		t.Fatal(err)
	}
}

// reserveIn reserves n orders of sale id for users prefix0…, as the
// inventory tier does, and returns their order ids.
func (e *env) reserveIn(t *testing.T, id, prefix string, n int) []string {
	t.Helper()
	ids := make([]string, 0, n)
	for i := 0; i < n; i++ {
		oid := ulid.Make().String()
		res, err := lua.Reserve.Run(context.Background(), e.rdb, lua.ReserveKeys(id), oid, prefix+strconv.Itoa(i), 1, time.Now().UnixMilli(), id).Slice()
		if err != nil {
			t.Fatal(err)
		}
		if code, _ := res[0].(int64); code != lua.ReserveOK {
			t.Fatalf("reserve in %s: code %v", id, res[0])
		}
		ids = append(ids, oid)
	}
	return ids
}

// poison adds to sale's stream an order entry, in the form the reserve
// script writes, for a user id the database refuses; no reserve script
// would write it (the gateway refuses such a token's sub).
func (e *env) poison(t *testing.T, user string) string {
	t.Helper()
	oid := ulid.Make().String()
	v := oid + " 1 700 " + strconv.FormatInt(time.Now().UnixMilli(), 10) + "  " + user
	if err := e.rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: lua.OrdersKey(sale), Values: []any{lua.EntryCompact, v}}).Err(); err != nil {
		t.Fatal(err)
	}
	return oid
}

// rowsOf counts a sale's rows.
func (e *env) rowsOf(t *testing.T, id string) int64 {
	t.Helper()
	f, err := e.db.Figures(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return f.Persisted
}

// refusedUsers are user ids the database of e refuses: one a rule of the
// test's (dbfault.Refuse) refuses on both databases; PostgreSQL refuses a
// NUL byte and invalid UTF-8 in a text by itself (SQLSTATE 22021), which
// SQLite stores.
func refusedUsers(t *testing.T, e *env) []string {
	dbfault.Refuse(t, e.dsn, "refused-")
	users := []string{"refused-1"}
	if e.db.Dialect() == sqldb.DialectPostgres {
		users = append(users, "nul\x00user", "\x00", "bad\xffutf8")
	}
	return users
}

// TestDatabaseRefusals: orders the database refuses, mixed into a sale's
// stream between ordinary ones, a second sale beside it, and an ordinary
// order delivered twice: one pass stores every ordinary order of both
// sales once, moves each refused one to the sale's dead-letter stream with
// the database's reason, and leaves both streams empty.
func TestDatabaseRefusals(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		e.prepareSale(t, sale2, 100)
		users := refusedUsers(t, e)
		ids := e.reserve(t, "u", 3)
		var bad []string
		for _, u := range users {
			bad = append(bad, e.poison(t, u))
		}
		ids = append(ids, e.reserve(t, "v", 3)...)
		first, err := e.rdb.XRangeN(ctx, lua.OrdersKey(sale), "-", "+", 1).Result()
		if err != nil {
			t.Fatal(err)
		}
		if err := e.rdb.XAdd(ctx, &redis.XAddArgs{Stream: lua.OrdersKey(sale), Values: first[0].Values}).Err(); err != nil {
			t.Fatal(err)
		}
		other := e.reserveIn(t, sale2, "w", 4)
		reg := prometheus.NewRegistry()
		d := drainer(e, nil, ordersink.Config{Metrics: reg})
		n, err := d.DrainOnce(ctx)
		if err != nil || n != len(ids)+1+len(other) {
			t.Fatalf("DrainOnce: got %d, %v, want %d, nil", n, err, len(ids)+1+len(other))
		}
		e.check(t, ids)
		if got := e.rowsOf(t, sale2); got != int64(len(other)) {
			t.Errorf("rows of %s: got %d, want %d", sale2, got, len(other))
		}
		dead, err := e.rdb.XRange(ctx, lua.DeadKey(sale), "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(dead) != len(bad) {
			t.Fatalf("dead letters: got %d %v, want %d", len(dead), dead, len(bad))
		}
		for i, m := range dead {
			en, _ := lua.ReadEntry(m.Values)
			reason, _ := m.Values[lua.DeadReason].(string)
			if en.Order != bad[i] || en.User != users[i] || !strings.HasPrefix(reason, "refused by the database: ") {
				t.Errorf("dead letter %d: got order %s user %q reason %q, want order %s user %q refused by the database", i, en.Order, en.User, reason, bad[i], users[i])
			}
			t.Logf("dead letter %d: %s", i, reason)
		}
		if n := e.rdb.XLen(ctx, lua.DeadKey(sale2)).Val(); n != 0 {
			t.Errorf("dead letters of %s: got %d, want 0", sale2, n)
		}
		if n := e.rdb.XLen(ctx, lua.OrdersKey(sale2)).Val(); n != 0 {
			t.Errorf("stream of %s: got %d entries, want 0", sale2, n)
		}
		if got := counter(t, reg, "flashgate_sink_dead_letters_total"); got != float64(len(bad)) {
			t.Errorf("flashgate_sink_dead_letters_total: got %v, want %d", got, len(bad))
		}
	})
}

// TestHeldOrder has the database fail (not refuse) the inserts of three
// orders in a row (dbfault.Hold) amid ordinary ones, while a second sale
// sells: the other sale's orders are stored in the same pass (the sale
// with the held orders is the one the drainer meets first); the batch is
// tried whole splitAfter (3) times, then one order at a time, which stores
// the ordinary ones before the held orders, stops at the third failure in
// a row, and the next pass stores the ordinary ones after them (held
// orders are tried last); the held orders stay pending, are never
// dead-lettered, and are stored once the database lets them in. New orders
// of the sale are stored meanwhile.
func TestHeldOrder(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		e.prepareSale(t, sale2, 100)
		sales, err := e.rdb.SMembers(ctx, lua.SalesKey()).Result()
		if err != nil || len(sales) != 2 {
			t.Fatalf("sales: got %v, %v", sales, err)
		}
		held, calm := sales[0], sales[1] // the drainer's order
		release := dbfault.Hold(t, e.dsn, "held-")
		ids := len(e.reserveIn(t, held, "u", 3))
		ids += len(e.reserveIn(t, held, "held-", 3))
		ids += len(e.reserveIn(t, held, "v", 3))
		other := e.reserveIn(t, calm, "w", 4)
		d := drainer(e, nil, ordersink.Config{})
		for try := 1; try <= 3; try++ {
			if _, err := d.DrainOnce(ctx); err == nil {
				t.Fatalf("DrainOnce %d: got nil error with an order held", try)
			}
			if got := e.rowsOf(t, calm); got != int64(len(other)) {
				t.Fatalf("DrainOnce %d: rows of %s: got %d, want %d", try, calm, got, len(other))
			}
			want := int64(0)
			if try == 3 {
				want = 3 // those before the held ones
			}
			if got := e.rowsOf(t, held); got != want {
				t.Fatalf("DrainOnce %d: rows of %s: got %d, want %d", try, held, got, want)
			}
		}
		more := len(e.reserveIn(t, held, "x", 2))
		if _, err := d.DrainOnce(ctx); err == nil {
			t.Fatal("DrainOnce 4: got nil error with an order held")
		}
		if got, want := e.rowsOf(t, held), int64(ids-3+more); got != want {
			t.Errorf("DrainOnce 4: rows of %s: got %d, want %d (the new orders too)", held, got, want)
		}
		if n := e.rdb.XLen(ctx, lua.DeadKey(held)).Val(); n != 0 {
			t.Fatalf("dead letters while held: got %d, want 0", n)
		}
		if p, err := e.rdb.XPending(ctx, lua.OrdersKey(held), lua.SinkGroup).Result(); err != nil || p.Count != 3 {
			t.Fatalf("pending while held: got %+v, %v, want the held orders' 3 entries", p, err)
		}
		release()
		if _, err := d.DrainOnce(ctx); err != nil {
			t.Fatalf("DrainOnce after the release: %v", err)
		}
		if got, want := e.rowsOf(t, held), int64(ids+more); got != want {
			t.Errorf("rows of %s after the release: got %d, want %d", held, got, want)
		}
		for _, s := range sales {
			if n := e.rdb.XLen(ctx, lua.OrdersKey(s)).Val(); n != 0 {
				t.Errorf("stream of %s: got %d entries, want 0", s, n)
			}
			if n := e.rdb.XLen(ctx, lua.DeadKey(s)).Val(); n != 0 {
				t.Errorf("dead letters of %s: got %d, want 0", s, n)
			}
		}
	})
}

// TestRunRefusedOrders is issue 18's case under Run: buyers the database
// refuses, then ordinary ones: every ordinary order is stored and the
// refused ones are dead letters, without waiting on retries.
func TestRunRefusedOrders(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx, cancel := context.WithCancel(context.Background())
		users := refusedUsers(t, e)
		d := drainer(e, nil, ordersink.Config{Block: 10 * time.Millisecond})
		done := make(chan error, 1)
		go func() { done <- d.Run(ctx) }()
		for _, u := range users {
			e.poison(t, u)
		}
		ids := e.reserve(t, "u", 20)
		testwait.Eventually(t, 10*time.Second, func() bool {
			return e.rowsOf(t, sale) == int64(len(ids)) && e.rdb.XLen(context.Background(), lua.DeadKey(sale)).Val() == int64(len(users))
		}, "every ordinary order stored and every refused one dead")
		testwait.Eventually(t, 10*time.Second, func() bool { return e.rdb.XLen(context.Background(), lua.OrdersKey(sale)).Val() == 0 }, "an empty stream")
		cancel()
		<-done
		e.check(t, ids)
	})
}

// TestRunHeldSaleLeavesOthers runs a drainer with a backoff of an hour:
// once the database fails a held order of one sale, that sale waits, and
// the other sale's orders, reserved after the failure, are stored all the
// same (a drainer that backed off as a whole would store none of them).
func TestRunHeldSaleLeavesOthers(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx, cancel := context.WithCancel(context.Background())
		e.prepareSale(t, sale2, 100)
		release := dbfault.Hold(t, e.dsn, "held-")
		defer release()
		e.reserve(t, "held-", 1)
		reg := prometheus.NewRegistry()
		d := drainer(e, nil, ordersink.Config{Block: 10 * time.Millisecond, BackoffMin: time.Hour, BackoffMax: time.Hour, Metrics: reg})
		done := make(chan error, 1)
		go func() { done <- d.Run(ctx) }()
		testwait.Eventually(t, 10*time.Second, func() bool { return failedBatches(t, reg) >= 1 }, "the held order's insert to fail")
		other := e.reserveIn(t, sale2, "w", 5)
		testwait.Eventually(t, 10*time.Second, func() bool { return e.rowsOf(t, sale2) == int64(len(other)) }, "the other sale's orders")
		cancel()
		<-done
		if got := e.rowsOf(t, sale); got != 0 {
			t.Errorf("rows of the held sale: got %d, want 0", got)
		}
		if n := e.rdb.XLen(context.Background(), lua.DeadKey(sale)).Val(); n != 0 {
			t.Errorf("dead letters: got %d, want 0", n)
		}
	})
}

// failedBatches reads flashgate_sink_batches_total{result="error"}.
func failedBatches(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "flashgate_sink_batches_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == "error" {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
