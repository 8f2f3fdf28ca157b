package ordersink_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/pgtest"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/lua"
	"github.com/flashgate/flashgate/ordersink"
	"github.com/flashgate/flashgate/sqldb"
)

var _ ordersink.Store = (*sqldb.DB)(nil)

const sale = "s1"

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

type env struct {
	rs  *redistest.Server
	rdb *redis.Client
	db  *sqldb.DB
	dsn string
}

// each runs f against a real redis-server with SQLite and with PostgreSQL.
func each(t *testing.T, f func(t *testing.T, e *env)) {
	t.Helper()
	for _, name := range []string{sqldb.DialectSQLite, sqldb.DialectPostgres} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dsn := "sqlite://" + filepath.Join(t.TempDir(), "fg.db")
			if name == sqldb.DialectPostgres {
				dsn = pgtest.New(t)
			}
			f(t, newEnv(t, dsn))
		})
	}
}

func newEnv(t *testing.T, dsn string) *env {
	t.Helper()
	rs := redistest.Start(t)
	e := &env{rs: rs, rdb: rs.Client(t), dsn: dsn}
	e.db = openDB(t, dsn)
	e.prepare(t, 1000)
	return e
}

func openDB(t testing.TB, dsn string) *sqldb.DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := sqldb.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func (e *env) prepare(t *testing.T, total int) {
	t.Helper()
	ctx := context.Background()
	if err := e.rdb.SAdd(ctx, lua.SalesKey(), sale).Err(); err != nil {
		t.Fatalf("SADD: %v", err)
	}
	if err := lua.Prepare.Run(ctx, e.rdb, lua.SaleKeys(sale), total, total, 1, 700).Err(); err != nil {
		t.Fatalf("prepare: %v", err)
	}
	if err := lua.SetState.Run(ctx, e.rdb, lua.SaleKeys(sale), "open").Err(); err != nil {
		t.Fatalf("open: %v", err)
	}
}

// reserve reserves n orders for users prefix0…, returning their ids.
func (e *env) reserve(t *testing.T, prefix string, n int) []string {
	t.Helper()
	ctx := context.Background()
	keys := lua.ReserveKeys(sale)
	ids := make([]string, 0, n)
	for i := 0; i < n; i++ {
		id := ulid.Make().String()
		res, err := lua.Reserve.Run(ctx, e.rdb, keys, id, prefix+strconv.Itoa(i), 1, time.Now().UnixMilli(), sale).Slice()
		if err != nil {
			t.Fatalf("reserve: %v", err)
		}
		if code, _ := res[0].(int64); code != lua.ReserveOK {
			t.Fatalf("reserve: code %v, want %d", res[0], lua.ReserveOK)
		}
		ids = append(ids, id)
	}
	return ids
}

// check asserts that every id is one row, that no other rows exist, and
// that the stream is empty.
func (e *env) check(t *testing.T, ids []string) {
	t.Helper()
	ctx := context.Background()
	f, err := e.db.Figures(ctx, sale)
	if err != nil {
		t.Fatal(err)
	}
	if f.Persisted != int64(len(ids)) {
		t.Errorf("rows: got %d, want %d", f.Persisted, len(ids))
	}
	// The counters (kept by InsertOrders on SQLite, by a trigger on
	// PostgreSQL) against the rows themselves, after every re-delivery the
	// test made.
	live, err := e.db.LiveOrders(ctx, sale)
	if err != nil {
		t.Fatal(err)
	}
	var units int64
	for _, o := range live {
		units += o.Quantity
	}
	if f.PendingPayment != int64(len(live)) || f.LiveUnits != units || f.PersistedUnits != units {
		t.Errorf("counters: got %d pending_payment, %d live units, %d units; the rows hold %d orders, %d units",
			f.PendingPayment, f.LiveUnits, f.PersistedUnits, len(live), units)
	}
	for _, id := range ids {
		o, err := e.db.Order(ctx, id)
		if err != nil {
			t.Errorf("order %s: %v", id, err)
			continue
		}
		if o.Status != flashgate.StatusPendingPayment || o.Quantity != 1 || o.PriceCents != 700 || o.CreatedAt.IsZero() {
			t.Errorf("order %s: got %+v, want pending_payment, 1 unit at 700", id, o)
		}
	}
	if n := e.rdb.XLen(ctx, lua.OrdersKey(sale)).Val(); n != 0 {
		t.Errorf("stream length: got %d, want 0", n)
	}
}

func drainer(e *env, store ordersink.Store, cfg ordersink.Config) *ordersink.Drainer {
	if store == nil {
		store = e.db
	}
	cfg.Logger = quiet
	if cfg.Consumer == "" {
		cfg.Consumer = "c1"
	}
	return ordersink.New(e.rdb, store, cfg)
}

func TestDrainOnce(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		ids := e.reserve(t, "u", 300)
		reg := prometheus.NewRegistry()
		d := drainer(e, nil, ordersink.Config{Batch: 64, Metrics: reg})
		if n, err := d.Backlog(ctx); err != nil || n != 300 {
			t.Errorf("Backlog before: got %d, %v, want 300", n, err)
		}
		n, err := d.DrainOnce(ctx)
		if err != nil || n != 300 {
			t.Fatalf("DrainOnce: got %d, %v, want 300, nil", n, err)
		}
		e.check(t, ids)
		if n, err := d.DrainOnce(ctx); err != nil || n != 0 {
			t.Errorf("DrainOnce again: got %d, %v, want 0, nil", n, err)
		}
		if n, err := d.Backlog(ctx); err != nil || n != 0 {
			t.Errorf("Backlog after: got %d, %v, want 0", n, err)
		}
		if got := counter(t, reg, "flashgate_sink_orders_total"); got != 300 {
			t.Errorf("flashgate_sink_orders_total: got %v, want 300", got)
		}
	})
}

func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			var sum float64
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
			return sum
		}
	}
	return -1
}

func TestRun(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx, cancel := context.WithCancel(context.Background())
		d := drainer(e, nil, ordersink.Config{Block: 20 * time.Millisecond})
		done := make(chan error, 1)
		go func() { done <- d.Run(ctx) }()
		ids := e.reserve(t, "u", 100)
		testwait.Eventually(t, 10*time.Second, func() bool {
			f, _ := e.db.Figures(context.Background(), sale)
			return f.Persisted == int64(len(ids))
		}, "all rows")
		more := e.reserve(t, "v", 50)
		testwait.Eventually(t, 10*time.Second, func() bool {
			f, _ := e.db.Figures(context.Background(), sale)
			return f.Persisted == int64(len(ids)+len(more))
		}, "more rows")
		testwait.Eventually(t, 10*time.Second, func() bool { n, _ := d.Backlog(context.Background()); return n == 0 }, "an empty stream")
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: got %v, want nil", err)
		}
		e.check(t, append(ids, more...))
	})
}

// TestQuietStream lets a stream go quiet under a running drainer (polled
// only now and then), then reserves again: the new order is stored.
func TestQuietStream(t *testing.T) {
	e := newEnv(t, "sqlite://"+filepath.Join(t.TempDir(), "fg.db"))
	ctx, cancel := context.WithCancel(context.Background())
	d := drainer(e, nil, ordersink.Config{Block: 2 * time.Millisecond})
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	ids := e.reserve(t, "u", 1)
	testwait.Eventually(t, 10*time.Second, func() bool {
		f, _ := e.db.Figures(context.Background(), sale)
		return f.Persisted == 1
	}, "the first row")
	before, polled := redistest.Commands(t, e.rdb)["xreadgroup"].Calls, d.Polls()
	// Well over 20 polls: the stream is quiet.
	testwait.Eventually(t, 10*time.Second, func() bool { return d.Polls() >= polled+200 }, "200 polls of the quiet stream")
	calls := redistest.Commands(t, e.rdb)["xreadgroup"].Calls - before
	polled = d.Polls() - polled
	t.Logf("XREADGROUP calls in %d polls of quiet: %d", polled, calls)
	if calls > 50 {
		t.Errorf("XREADGROUP calls on one quiet stream in %d polls: got %d, want far fewer than one a poll", polled, calls)
	}
	ids = append(ids, e.reserve(t, "v", 1)...)
	testwait.Eventually(t, 10*time.Second, func() bool {
		f, _ := e.db.Figures(context.Background(), sale)
		return f.Persisted == 2
	}, "the row after the quiet spell")
	cancel()
	<-done
	e.check(t, ids)
}

// readAsDead delivers up to n entries to consumer name and never acks them.
func (e *env) readAsDead(t *testing.T, name string, n int) int {
	t.Helper()
	ctx := context.Background()
	err := e.rdb.XGroupCreateMkStream(ctx, lua.OrdersKey(sale), lua.SinkGroup, "0").Err()
	if err != nil && err.Error() != "BUSYGROUP Consumer Group name already exists" {
		t.Fatal(err)
	}
	res, err := e.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: lua.SinkGroup, Consumer: name, Streams: []string{lua.OrdersKey(sale), ">"}, Count: int64(n), Block: -1,
	}).Result()
	if err != nil {
		t.Fatal(err)
	}
	return len(res[0].Messages)
}

func TestClaimFromDeadConsumer(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		ids := e.reserve(t, "u", 50)
		if got := e.readAsDead(t, "dead", 30); got != 30 {
			t.Fatalf("dead consumer read %d, want 30", got)
		}
		// Another consumer with the default ClaimIdle leaves them alone.
		patient := drainer(e, nil, ordersink.Config{Consumer: "patient"})
		if n, err := patient.DrainOnce(ctx); err != nil || n != 20 {
			t.Fatalf("DrainOnce (no claims yet): got %d, %v, want 20", n, err)
		}
		d := drainer(e, nil, ordersink.Config{Consumer: "alive", ClaimIdle: time.Millisecond})
		testwait.Eventually(t, 10*time.Second, func() bool {
			if _, err := d.DrainOnce(ctx); err != nil {
				t.Fatal(err)
			}
			f, _ := e.db.Figures(ctx, sale)
			return f.Persisted == int64(len(ids))
		}, "claimed rows")
		e.check(t, ids)
		pend, err := e.rdb.XPending(ctx, lua.OrdersKey(sale), lua.SinkGroup).Result()
		if err != nil || pend.Count != 0 {
			t.Errorf("pending after claim: got %+v, %v, want none", pend, err)
		}
	})
}

func TestRestartSameConsumer(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		ids := e.reserve(t, "u", 50)
		if got := e.readAsDead(t, "c1", 30); got != 30 {
			t.Fatalf("first life read %d, want 30", got)
		}
		// Restarted under the same name, with claims far off: its own
		// pending list is read again at once.
		d := drainer(e, nil, ordersink.Config{Consumer: "c1"})
		if n, err := d.DrainOnce(ctx); err != nil || n != 50 {
			t.Fatalf("DrainOnce: got %d, %v, want 50, nil", n, err)
		}
		e.check(t, ids)
	})
}

// flaky is a Store that fails while down is set.
type flaky struct {
	mu    sync.Mutex
	store ordersink.Store
	down  bool
	fails atomic.Int64
}

func (f *flaky) set(s ordersink.Store, down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.store, f.down = s, down
}

func (f *flaky) InsertOrders(ctx context.Context, orders []flashgate.Order) (int, error) {
	f.mu.Lock()
	s, down := f.store, f.down
	f.mu.Unlock()
	if down {
		f.fails.Add(1)
		return 0, errors.New("store is down")
	}
	n, err := s.InsertOrders(ctx, orders)
	if err != nil {
		f.fails.Add(1)
	}
	return n, err
}

func TestStoreDown(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		store := &flaky{store: e.db, down: true}
		ids := e.reserve(t, "u", 40)
		d := drainer(e, store, ordersink.Config{Batch: 16})
		if _, err := d.DrainOnce(ctx); err == nil {
			t.Fatal("DrainOnce with the store down: got nil error")
		}
		if n := e.rdb.XLen(ctx, lua.OrdersKey(sale)).Val(); n != 40 {
			t.Errorf("stream length while down: got %d, want 40 (nothing acked)", n)
		}
		// Run retries with backoff while down and catches up after.
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- drainer(e, store, ordersink.Config{Consumer: "c1", Batch: 16, Block: 10 * time.Millisecond,
				BackoffMin: time.Millisecond, BackoffMax: 10 * time.Millisecond}).Run(rctx)
		}()
		more := e.reserve(t, "v", 20)
		testwait.Eventually(t, 10*time.Second, func() bool { return store.fails.Load() >= 5 }, "failed retries")
		if f, _ := e.db.Figures(ctx, sale); f.Persisted != 0 {
			t.Errorf("rows while down: got %d, want 0", f.Persisted)
		}
		store.set(e.db, false)
		testwait.Eventually(t, 10*time.Second, func() bool {
			f, _ := e.db.Figures(ctx, sale)
			return f.Persisted == int64(len(ids)+len(more)) && e.rdb.XLen(ctx, lua.OrdersKey(sale)).Val() == 0
		}, "recovery")
		cancel()
		<-done
		e.check(t, append(ids, more...))
	})
}

// TestDatabaseOutage closes the real database under a running drainer, then
// gives it a freshly opened one: every order ends up stored once.
func TestDatabaseOutage(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		first := openDB(t, e.dsn)
		store := &flaky{store: first}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		d := drainer(e, store, ordersink.Config{Batch: 8, Block: 10 * time.Millisecond, BackoffMin: time.Millisecond, BackoffMax: 10 * time.Millisecond})
		go func() { done <- d.Run(rctx) }()
		ids := e.reserve(t, "u", 30)
		_ = first.Close() // the outage: every insert now fails
		ids = append(ids, e.reserve(t, "v", 30)...)
		testwait.Eventually(t, 10*time.Second, func() bool { return store.fails.Load() >= 3 }, "failed inserts")
		store.set(openDB(t, e.dsn), false)
		testwait.Eventually(t, 10*time.Second, func() bool {
			f, _ := e.db.Figures(ctx, sale)
			return f.Persisted == int64(len(ids)) && e.rdb.XLen(ctx, lua.OrdersKey(sale)).Val() == 0
		}, "recovery")
		cancel()
		<-done
		e.check(t, ids)
	})
}

// proxy forwards loopback TCP connections to a backend until cut.
type proxy struct {
	ln      net.Listener
	backend string
	mu      sync.Mutex
	down    bool
	conns   []net.Conn
}

func newProxy(t *testing.T, backend string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, backend: backend}
	t.Cleanup(func() { ln.Close(); p.cut(true) })
	go p.serve()
	return p
}

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.down {
			p.mu.Unlock()
			c.Close()
			continue
		}
		b, err := net.DialTimeout("tcp", p.backend, 5*time.Second)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns = append(p.conns, c, b)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(b, c); b.Close() }()
		go func() { _, _ = io.Copy(c, b); c.Close() }()
	}
}

// cut drops every connection and, while down, refuses new ones.
func (p *proxy) cut(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	if down {
		for _, c := range p.conns {
			c.Close()
		}
		p.conns = nil
	}
}

// TestPostgresNetworkOutage cuts the connections between a running drainer's
// database handle and PostgreSQL, then restores them.
func TestPostgresNetworkOutage(t *testing.T) {
	dsn := pgtest.New(t)
	e := newEnv(t, dsn)
	ctx := context.Background()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	p := newProxy(t, u.Host)
	u.Host = p.ln.Addr().String()
	q := u.Query()
	q.Set("connect_timeout", "2")
	u.RawQuery = q.Encode()
	viaProxy := openDB(t, u.String())
	store := &flaky{store: viaProxy}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	d := drainer(e, store, ordersink.Config{Batch: 8, Block: 10 * time.Millisecond, BackoffMin: time.Millisecond, BackoffMax: 20 * time.Millisecond})
	go func() { done <- d.Run(rctx) }()
	ids := e.reserve(t, "u", 30)
	p.cut(true)
	ids = append(ids, e.reserve(t, "v", 30)...)
	testwait.Eventually(t, 10*time.Second, func() bool { return store.fails.Load() >= 3 }, "failed inserts")
	p.cut(false)
	testwait.Eventually(t, 10*time.Second, func() bool {
		f, _ := e.db.Figures(ctx, sale)
		return f.Persisted == int64(len(ids)) && e.rdb.XLen(ctx, lua.OrdersKey(sale)).Val() == 0
	}, "recovery")
	cancel()
	<-done
	e.check(t, ids)
}

func TestDuplicateDelivery(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		ids := e.reserve(t, "u", 10)
		// The same entries again, as if a first delivery had been stored
		// and its acknowledgement lost.
		msgs, err := e.rdb.XRange(ctx, lua.OrdersKey(sale), "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if err := e.rdb.XAdd(ctx, &redis.XAddArgs{Stream: lua.OrdersKey(sale), Values: m.Values}).Err(); err != nil {
				t.Fatal(err)
			}
		}
		d := drainer(e, nil, ordersink.Config{Batch: 4})
		if n, err := d.DrainOnce(ctx); err != nil || n != 20 {
			t.Fatalf("DrainOnce: got %d, %v, want 20 entries", n, err)
		}
		// And the whole batch once more, straight into the store.
		var orders []flashgate.Order
		for _, id := range ids {
			o, _ := e.db.Order(ctx, id)
			orders = append(orders, o)
		}
		if n, err := e.db.InsertOrders(ctx, orders); err != nil || n != 0 {
			t.Errorf("InsertOrders again: got %d, %v, want 0", n, err)
		}
		e.check(t, ids)
	})
}

func TestMalformedEntries(t *testing.T) {
	rs := redistest.Start(t)
	e := &env{rs: rs, rdb: rs.Client(t)}
	e.db = openDB(t, "sqlite://"+filepath.Join(t.TempDir(), "fg.db"))
	e.prepare(t, 100)
	ctx := context.Background()
	ids := e.reserve(t, "u", 3)
	bad := []map[string]any{
		{"junk": "1"},
		{"order": "x1", "sale": sale, "user": "u", "qty": "zero", "price": "1", "ts": "1"},
		{"order": "x2", "sale": "other", "user": "u", "qty": "1", "price": "1", "ts": "1"},
		{"order": "bad id!", "sale": sale, "user": "u", "qty": "1", "price": "1", "ts": "1"},
		{"order": "x3", "sale": sale, "user": "u", "qty": "0", "price": "1", "ts": "1"},
		{lua.EntryCompact: "x4 1 1 1"},
		{lua.EntryCompact: "x5 one 1 1  u"},
		{lua.EntryCompact: "x6 1 1 1  "},
		{lua.EntryCompact: "bad!id 1 1 1  u"},
	}
	for _, v := range bad {
		if err := e.rdb.XAdd(ctx, &redis.XAddArgs{Stream: lua.OrdersKey(sale), Values: v}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	ids = append(ids, e.reserve(t, "v", 3)...)
	// An entry with one field per value, as older versions wrote them, is
	// still an order.
	old := map[string]any{"order": "old-form-1", "sale": sale, "user": "w", "qty": "1", "price": "700", "ts": "1"}
	if err := e.rdb.XAdd(ctx, &redis.XAddArgs{Stream: lua.OrdersKey(sale), Values: old}).Err(); err != nil {
		t.Fatal(err)
	}
	ids = append(ids, "old-form-1")
	d := drainer(e, nil, ordersink.Config{})
	if n, err := d.DrainOnce(ctx); err != nil || n != 7 {
		t.Fatalf("DrainOnce: got %d, %v, want 7", n, err)
	}
	e.check(t, ids)
	if n := e.rdb.XLen(ctx, lua.DeadKey(sale)).Val(); n != int64(len(bad)) {
		t.Errorf("dead letters: got %d, want %d", n, len(bad))
	}
}

// TestRedisRestart empties Redis under a running drainer: once the sale is
// prepared again, new orders flow.
func TestRedisRestart(t *testing.T) {
	rs := redistest.Start(t)
	e := &env{rs: rs, rdb: rs.Client(t)}
	e.db = openDB(t, "sqlite://"+filepath.Join(t.TempDir(), "fg.db"))
	e.prepare(t, 100)
	ctx, cancel := context.WithCancel(context.Background())
	d := drainer(e, nil, ordersink.Config{Block: 10 * time.Millisecond, RefreshSales: 10 * time.Millisecond,
		BackoffMin: time.Millisecond, BackoffMax: 20 * time.Millisecond})
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	ids := e.reserve(t, "u", 10)
	testwait.Eventually(t, 10*time.Second, func() bool {
		f, _ := e.db.Figures(context.Background(), sale)
		return f.Persisted == 10
	}, "first rows")
	rs.Restart(t)
	e.prepare(t, 100)
	ids = append(ids, e.reserve(t, "v", 10)...)
	testwait.Eventually(t, 10*time.Second, func() bool {
		f, _ := e.db.Figures(context.Background(), sale)
		return f.Persisted == 20 && e.rdb.XLen(context.Background(), lua.OrdersKey(sale)).Val() == 0
	}, "rows after the restart")
	cancel()
	<-done
	e.check(t, ids)
}

func TestDefaultsAndMetricsTwice(t *testing.T) {
	// Two drainers may share one registry: the second registers without
	// an error and both count into the one set of series.
	reg := prometheus.NewRegistry()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	for i := 0; i < 2; i++ {
		_ = ordersink.New(rdb, nil, ordersink.Config{Metrics: reg, Logger: log})
	}
	if logs.Len() != 0 {
		t.Errorf("two drainers on one registry logged %q, want nothing", logs.String())
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	var got []string
	for _, mf := range mfs {
		got = append(got, mf.GetName())
	}
	// The vectors have no series until a label is used; the rest have one.
	want := []string{"flashgate_sink_backlog", "flashgate_sink_lag_seconds", "flashgate_sink_orders_total"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got families %v, want %v", got, want)
	}
}

// TestEntryVariant: an entry with a variant field (lua.EntryVariant, as
// reserve.lua writes it for a sale of variants) lands in orders.variant;
// an entry without one, as older versions and one-stock sales write it,
// lands with ”; a bad variant id is a dead letter.
func TestEntryVariant(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		entries := []map[string]any{
			{lua.EntryCompact: "var-c1 1 700 1  u1", lua.EntryVariant: "42"},
			{lua.EntryCompact: "var-c2 1 700 1  u2"},
			{"order": "var-o1", "sale": sale, "user": "u3", "qty": "1", "price": "700", "ts": "1", lua.EntryVariant: "XL"},
			{"order": "var-o2", "sale": sale, "user": "u4", "qty": "1", "price": "700", "ts": "1"},
			{lua.EntryCompact: "var-bad 1 700 1  u5", lua.EntryVariant: "no:good"},
		}
		for _, v := range entries {
			if err := e.rdb.XAdd(ctx, &redis.XAddArgs{Stream: lua.OrdersKey(sale), Values: v}).Err(); err != nil {
				t.Fatal(err)
			}
		}
		d := drainer(e, nil, ordersink.Config{})
		if n, err := d.DrainOnce(ctx); err != nil || n != 4 {
			t.Fatalf("DrainOnce: got %d, %v, want 4", n, err)
		}
		for id, want := range map[string]string{"var-c1": "42", "var-c2": "", "var-o1": "XL", "var-o2": ""} {
			if o, err := e.db.Order(ctx, id); err != nil || o.Variant != want {
				t.Errorf("order %s: got variant %q, %v; want %q", id, o.Variant, err, want)
			}
		}
		if _, err := e.db.Order(ctx, "var-bad"); !errors.Is(err, flashgate.ErrNotFound) {
			t.Errorf("order with a bad variant: got %v, want not stored", err)
		}
		if n := e.rdb.XLen(ctx, lua.DeadKey(sale)).Val(); n != 1 {
			t.Errorf("dead letters: got %d, want 1", n)
		}
	})
}

// TestLostDeliveryReadAgain: entries delivered to the running sink's own
// consumer without the sink knowing (a read whose reply was lost, which
// the Redis client sends again on a new connection: the second read finds
// nothing new and no error tells the sink) are stored within a sweep, not
// left for another sink's claim after ClaimIdle (issue 35: a sink frozen
// in the middle of its read across a Redis restart held a failover's
// rebuild, and its sale, paused for 26 s).
func TestLostDeliveryReadAgain(t *testing.T) {
	e := newEnv(t, "sqlite://"+filepath.Join(t.TempDir(), "fg.db"))
	ctx, cancel := context.WithCancel(context.Background())
	d := drainer(e, nil, ordersink.Config{Consumer: "c1", Block: 20 * time.Millisecond, ClaimIdle: 10 * time.Minute})
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	ids := e.reserve(t, "u", 1)
	testwait.Eventually(t, 10*time.Second, func() bool {
		f, _ := e.db.Figures(context.Background(), sale)
		return f.Persisted == 1
	}, "the first row")
	// A reserve and a read as c1 in one MULTI, so that the running sink
	// cannot read the entry first: what a lost reply leaves behind.
	id := ulid.Make().String()
	var read *redis.XStreamSliceCmd
	_, err := e.rdb.TxPipelined(context.Background(), func(p redis.Pipeliner) error {
		lua.Reserve.Eval(context.Background(), p, lua.ReserveKeys(sale), id, "lost0", 1, time.Now().UnixMilli(), sale)
		read = p.XReadGroup(context.Background(), &redis.XReadGroupArgs{
			Group: lua.SinkGroup, Consumer: "c1", Streams: []string{lua.OrdersKey(sale), ">"}, Count: 10, Block: -1,
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if res := read.Val(); len(res) != 1 || len(res[0].Messages) != 1 {
		t.Fatalf("the read behind the sink's back: got %v, want the one entry", res)
	}
	ids = append(ids, id)
	testwait.Eventually(t, 10*time.Second, func() bool {
		f, _ := e.db.Figures(context.Background(), sale)
		return f.Persisted == 2
	}, "the row of the entry delivered behind the sink's back (ClaimIdle is 10 min)")
	cancel()
	<-done
	e.check(t, ids)
}

// TestClaimSoonerWhilePaused: while a sale is paused for a rebuild (which
// waits for its stream to drain), entries a frozen or dead sink holds are
// claimed after PausedClaimIdle, not ClaimIdle: the paused sale waits for
// them a bounded time (issue 35).
func TestClaimSoonerWhilePaused(t *testing.T) {
	e := newEnv(t, "sqlite://"+filepath.Join(t.TempDir(), "fg.db"))
	ids := e.reserve(t, "u", 5)
	if got := e.readAsDead(t, "frozen", 5); got != 5 {
		t.Fatalf("frozen consumer read %d, want 5", got)
	}
	if n, err := lua.Pause.Run(context.Background(), e.rdb, lua.SaleKeys(sale), 1).Int(); err != nil || n != 1 {
		t.Fatalf("pause: got %d, %v, want 1", n, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := drainer(e, nil, ordersink.Config{Consumer: "alive", Block: 20 * time.Millisecond, ClaimIdle: 10 * time.Minute})
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	testwait.Eventually(t, 10*time.Second, func() bool {
		f, _ := e.db.Figures(context.Background(), sale)
		return f.Persisted == int64(len(ids))
	}, "the frozen sink's entries claimed while the sale is paused (ClaimIdle is 10 min)")
	cancel()
	<-done
	e.check(t, ids)
}
