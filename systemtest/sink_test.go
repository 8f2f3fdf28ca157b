// Package systemtest runs several tiers together against real servers and
// checks docs/design.md's invariants.
package systemtest

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/lua"
	"github.com/flashgate/flashgate/ordersink"
	"github.com/flashgate/flashgate/sqldb"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// reservation is what a successful reserve promised: one row like it.
type reservation struct {
	user string
	qty  int64
}

// sinkModel is one rapid run: one sale, a small pool of users, a drainer
// that may crash and restart, and every reserve that succeeded.
type sinkModel struct {
	ctx      context.Context
	rdb      *redis.Client
	db       *sqldb.DB
	sale     string
	total    int64
	perUser  int64
	users    []string
	ok       map[string]reservation
	drainer  *ordersink.Drainer
	consumer string
	gen      int
}

func (m *sinkModel) newDrainer(name string) {
	m.consumer = name
	m.drainer = ordersink.New(m.rdb, m.db, ordersink.Config{
		Consumer: name, Batch: 4, ClaimIdle: time.Millisecond, Logger: quiet,
	})
}

func (m *sinkModel) reserve(t *rapid.T) {
	user := rapid.SampledFrom(m.users).Draw(t, "user")
	qty := rapid.Int64Range(1, m.perUser).Draw(t, "qty")
	id := ulid.Make().String()
	keys := lua.ReserveKeys(m.sale)
	res, err := lua.Reserve.Run(m.ctx, m.rdb, keys, id, user, qty, time.Now().UnixMilli(), m.sale).Slice()
	if err != nil {
		t.Fatalf("reserve: %v", err)
	}
	switch code, _ := res[0].(int64); code {
	case lua.ReserveOK:
		m.ok[id] = reservation{user: user, qty: qty}
	case lua.ReserveSoldOut, lua.ReservePurchased:
	default:
		t.Fatalf("reserve: unexpected code %d", code)
	}
}

// release cancels a live order as a control plane would: the row first,
// then the units back to Redis.
func (m *sinkModel) release(t *rapid.T) {
	live, err := m.db.LiveOrders(m.ctx, m.sale)
	if err != nil {
		t.Fatal(err)
	}
	if len(live) == 0 {
		return
	}
	o := rapid.SampledFrom(live).Draw(t, "order")
	o, err = m.db.Transition(m.ctx, o.ID, []flashgate.OrderStatus{flashgate.StatusPendingPayment, flashgate.StatusPaid},
		flashgate.StatusCancelled, time.Now())
	if err != nil {
		t.Fatalf("cancel %s: %v", o.ID, err)
	}
	keys := lua.ReleaseKeys(m.sale)
	code, err := lua.Release.Run(m.ctx, m.rdb, keys, o.ID, o.UserID, o.Quantity).Int64()
	if err != nil || code != lua.ReleaseDone {
		t.Fatalf("release %s: got %d, %v, want %d", o.ID, code, err, lua.ReleaseDone)
	}
}

func (m *sinkModel) pay(t *rapid.T) {
	live, err := m.db.LiveOrders(m.ctx, m.sale)
	if err != nil {
		t.Fatal(err)
	}
	if len(live) == 0 {
		return
	}
	o := rapid.SampledFrom(live).Draw(t, "order")
	_, _ = m.db.Transition(m.ctx, o.ID, []flashgate.OrderStatus{flashgate.StatusPendingPayment}, flashgate.StatusPaid, time.Now())
}

func (m *sinkModel) drain(t *rapid.T) {
	if _, err := m.drainer.DrainOnce(m.ctx); err != nil {
		t.Fatalf("DrainOnce: %v", err)
	}
}

// restart replaces the drainer. The old one may "crash" holding up to three
// entries it read and never acknowledged; the new one has the same name
// (and re-reads them at once) or another (and claims them once idle).
func (m *sinkModel) restart(t *rapid.T) {
	if held := rapid.IntRange(0, 3).Draw(t, "held"); held > 0 {
		err := m.rdb.XGroupCreateMkStream(m.ctx, lua.OrdersKey(m.sale), lua.SinkGroup, "0").Err()
		if err != nil && err.Error() != "BUSYGROUP Consumer Group name already exists" {
			t.Fatal(err)
		}
		err = m.rdb.XReadGroup(m.ctx, &redis.XReadGroupArgs{Group: lua.SinkGroup, Consumer: m.consumer,
			Streams: []string{lua.OrdersKey(m.sale), ">"}, Count: int64(held), Block: -1}).Err()
		if err != nil && err != redis.Nil {
			t.Fatal(err)
		}
	}
	name := m.consumer
	if !rapid.Bool().Draw(t, "same name") {
		m.gen++
		name = "sink" + strconv.Itoa(m.gen)
	}
	m.newDrainer(name)
}

// check asserts the invariants that hold between any two steps.
func (m *sinkModel) check(t *rapid.T) {
	booked, err := m.rdb.HGet(m.ctx, lua.SaleKey(m.sale), lua.FieldBooked).Int64()
	if err != nil {
		t.Fatal(err)
	}
	if booked < 0 || booked > m.total {
		t.Fatalf("booked: got %d, want 0..%d", booked, m.total)
	}
	f, err := m.db.Figures(m.ctx, m.sale)
	if err != nil {
		t.Fatal(err)
	}
	if f.LiveUnits > m.total {
		t.Fatalf("live units in the DB: got %d, want ≤ %d", f.LiveUnits, m.total)
	}
	live, err := m.db.LiveOrders(m.ctx, m.sale)
	if err != nil {
		t.Fatal(err)
	}
	released, err := m.db.ReleasedOrders(m.ctx, m.sale)
	if err != nil {
		t.Fatal(err)
	}
	holders := map[string]string{}
	for _, o := range live {
		if prev, dup := holders[o.UserID]; dup {
			t.Fatalf("user %s holds two live orders: %s and %s", o.UserID, prev, o.ID)
		}
		holders[o.UserID] = o.ID
	}
	for _, o := range append(live, released...) {
		r, ok := m.ok[o.ID]
		if !ok {
			t.Fatalf("row %s has no successful reserve", o.ID)
		}
		if o.UserID != r.user || o.Quantity != r.qty {
			t.Fatalf("row %s: got user %s qty %d, want user %s qty %d", o.ID, o.UserID, o.Quantity, r.user, r.qty)
		}
	}
	// Entries are deleted only once their rows are committed, so every
	// successful reserve is either a row or an entry, never both.
	entries, err := m.rdb.XRange(m.ctx, lua.OrdersKey(m.sale), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	var streamUnits int64
	for _, e := range entries {
		en, _ := lua.ReadEntry(e.Values)
		if _, err := m.db.Order(m.ctx, en.Order); err == nil {
			t.Fatalf("order %s is both a row and a stream entry", en.Order)
		}
		q, _ := strconv.ParseInt(en.Quantity, 10, 64)
		streamUnits += q
	}
	if got, want := f.Persisted+int64(len(entries)), int64(len(m.ok)); got != want {
		t.Fatalf("rows %d + entries %d: got %d, want %d successful reserves", f.Persisted, len(entries), got, want)
	}
	// Only rows are released here, so booked is the live rows plus the
	// entries still on their way.
	if got, want := booked, f.LiveUnits+streamUnits; got != want {
		t.Fatalf("booked: got %d, want live units %d + stream units %d", got, f.LiveUnits, streamUnits)
	}
}

// fullDrain drains until the stream is empty, claiming what crashed
// consumers hold, then checks that the database matches the reserves.
func (m *sinkModel) fullDrain(t *rapid.T) {
	m.newDrainer("final")
	// Held entries become claimable a little later: pass again until none is left.
	var n int64
	if _, ok := testwait.For(10*time.Second, func() bool {
		if _, err := m.drainer.DrainOnce(m.ctx); err != nil {
			t.Fatalf("DrainOnce: %v", err)
		}
		var err error
		if n, err = m.drainer.Backlog(m.ctx); err != nil {
			t.Fatal(err)
		}
		return n == 0
	}); !ok {
		t.Fatalf("backlog still %d after 10 s of passes", n)
	}
	m.check(t)
	for id, r := range m.ok {
		o, err := m.db.Order(m.ctx, id)
		if err != nil {
			t.Fatalf("reserve %s never became a row: %v", id, err)
		}
		if o.UserID != r.user || o.Quantity != r.qty {
			t.Fatalf("row %s: got %+v, want %+v", id, o, r)
		}
	}
	booked, _ := m.rdb.HGet(m.ctx, lua.SaleKey(m.sale), lua.FieldBooked).Int64()
	f, _ := m.db.Figures(m.ctx, m.sale)
	if booked != f.LiveUnits {
		t.Fatalf("after a full drain: booked %d, want the DB's live units %d", booked, f.LiveUnits)
	}
}

// TestSinkInvariants interleaves reserves, releases, payments, drains and
// sink crashes at random, on a real redis-server and SQLite.
func TestSinkInvariants(t *testing.T) {
	rs := redistest.Start(t)
	rdb := rs.Client(t)
	ctx := context.Background()
	db, err := sqldb.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "fg.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	run := 0
	rapid.Check(t, func(t *rapid.T) {
		run++
		if err := rdb.FlushDB(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		m := &sinkModel{
			ctx: ctx, rdb: rdb, db: db,
			sale:    "run" + strconv.Itoa(run), // each run its own rows
			total:   rapid.Int64Range(1, 8).Draw(t, "total"),
			perUser: rapid.Int64Range(1, 3).Draw(t, "per_user"),
			ok:      map[string]reservation{},
		}
		for i := rapid.IntRange(1, 5).Draw(t, "users"); i > 0; i-- {
			m.users = append(m.users, "u"+strconv.Itoa(i))
		}
		if err := rdb.SAdd(ctx, lua.SalesKey(), m.sale).Err(); err != nil {
			t.Fatal(err)
		}
		keys := lua.SaleKeys(m.sale)
		if err := lua.Prepare.Run(ctx, rdb, keys, m.total, m.total, m.perUser, 100).Err(); err != nil {
			t.Fatal(err)
		}
		if err := lua.SetState.Run(ctx, rdb, lua.SaleKeys(m.sale), "open").Err(); err != nil {
			t.Fatal(err)
		}
		m.newDrainer("sink0")
		actions := map[string]func(*rapid.T){
			"reserve": m.reserve, "release": m.release, "pay": m.pay, "drain": m.drain, "restart": m.restart,
		}
		names := []string{"drain", "pay", "release", "reserve", "restart"}
		for steps := rapid.IntRange(1, 50).Draw(t, "steps"); steps > 0; steps-- {
			actions[rapid.SampledFrom(names).Draw(t, "action")](t)
			m.check(t)
		}
		m.fullDrain(t)
	})
}
