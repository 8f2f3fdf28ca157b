package controlplane

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/pgtest"
	"github.com/flashgate/flashgate/internal/redistest"
	"github.com/flashgate/flashgate/internal/testclock"
	"github.com/flashgate/flashgate/lua"
	"github.com/flashgate/flashgate/sqldb"
)

const testToken = "s3cret-admin-token"

var t0 = time.Date(2030, 5, 1, 12, 0, 0, 0, time.UTC)

// luaReleaser is the tiny Releaser of the tests: lua.Release on the
// primary, with an injectable failure.
type luaReleaser struct {
	rdb  redis.UniversalClient
	fail atomic.Bool
	n    atomic.Int64
}

func (r *luaReleaser) Release(ctx context.Context, o flashgate.Order) (bool, error) {
	if r.fail.Load() {
		return false, errors.New("injected release failure")
	}
	keys := lua.ReleaseKeys(o.SaleID)
	code, err := lua.Release.Run(ctx, r.rdb, keys, o.ID, o.UserID, o.Quantity).Int64()
	if err != nil {
		return false, err
	}
	if code == lua.ReleaseDone {
		r.n.Add(1)
	}
	return code == lua.ReleaseDone, nil
}

func (r *luaReleaser) ReleaseBatch(ctx context.Context, orders []flashgate.Order) (int, error) {
	if r.fail.Load() {
		return 0, errors.New("injected release failure")
	}
	n := 0
	for start := 0; start < len(orders); start += 500 {
		chunk := orders[start:min(start+500, len(orders))]
		sale := chunk[0].SaleID
		args := []any{""}
		for _, o := range chunk {
			if o.SaleID != sale {
				return n, errors.New("luaReleaser: one sale per chunk")
			}
			args = append(args, o.ID, o.UserID, o.Quantity)
		}
		keys := lua.ReleaseKeys(sale)
		v, err := lua.ReleaseBatch.Run(ctx, r.rdb, keys, args...).Int64Slice()
		if err != nil {
			return n, err
		}
		n += int(v[1])
		r.n.Add(v[1])
	}
	return n, nil
}

// env is one control plane over a real redis-server (or Redis Cluster) and
// a real database.
type env struct {
	t       *testing.T
	ctx     context.Context
	srv     *redistest.Server  // nil on a cluster
	cluster *redistest.Cluster // nil on a single server
	rdb     redis.UniversalClient
	db      *sqldb.DB
	clock   *testclock.Clock
	rel     *luaReleaser
	svc     *Service
	seq     atomic.Int64
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// sqliteDSN and postgresDSN give a fresh database of each kind.
func sqliteDSN(t *testing.T) string { return "sqlite://" + filepath.Join(t.TempDir(), "fg.db") }
func postgresDSN(t *testing.T) string {
	return pgtest.New(t)
}

func openDB(t *testing.T, dsn string) *sqldb.DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := sqldb.Open(ctx, dsn)
	if err != nil {
		t.Fatalf("sqldb.Open: %v", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func newEnv(t *testing.T, dsn string, mod func(*Config)) *env {
	t.Helper()
	return newEnvOn(t, "single", dsn, mod)
}

// newEnvOn is newEnv on backend: "single" (a redis-server of its own),
// "cluster" (the package's shared Redis Cluster, emptied) or "own-cluster"
// (a Redis Cluster of its own, for tests that fail nodes over).
func newEnvOn(t *testing.T, backend, dsn string, mod func(*Config)) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	e := &env{t: t, ctx: ctx, db: openDB(t, dsn), clock: testclock.New(t0)}
	switch backend {
	case "cluster":
		e.cluster = testCluster.Get(t)
		e.rdb = e.cluster.Client(t, false)
	case "own-cluster":
		e.cluster = redistest.StartCluster(t)
		e.rdb = e.cluster.Client(t, false)
	default:
		e.srv = redistest.Start(t)
		e.rdb = e.srv.Client(t)
	}
	e.rel = &luaReleaser{rdb: e.rdb}
	cfg := Config{
		Redis: e.rdb, Store: e.db, Releaser: e.rel, AdminToken: testToken,
		Clock: e.clock, Logger: quietLogger(), PersistWait: -1, NodeID: "test",
	}
	if mod != nil {
		mod(&cfg)
	}
	svc, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	e.svc = svc
	return e
}

// openSale creates and starts a sale of total units.
func (e *env) openSale(id string, total int64, ratio float64) {
	e.t.Helper()
	if _, err := e.svc.CreateSale(e.ctx, flashgate.Sale{ID: id, Name: "Sale " + id, PriceCents: 500, Total: total, AdmitRatio: ratio}); err != nil {
		e.t.Fatalf("CreateSale(%s): %v", id, err)
	}
	if err := e.svc.Start(e.ctx, id); err != nil {
		e.t.Fatalf("Start(%s): %v", id, err)
	}
}

// reserve runs lua.Reserve for user, as the inventory tier would; it
// returns the script's code and order id.
func (e *env) reserve(sale, user string) (int64, string) {
	e.t.Helper()
	id := fmt.Sprintf("o%06d", e.seq.Add(1))
	keys := lua.ReserveKeys(sale)
	v, err := lua.Reserve.Run(e.ctx, e.rdb, keys, id, user, 1, e.clock.Now().UnixMilli(), sale).Slice()
	if err != nil {
		e.t.Fatalf("reserve: %v", err)
	}
	code := v[0].(int64)
	got, _ := v[1].(string)
	return code, got
}

// reserveMany tries n new users (prefix-0 .. prefix-(n-1)) and returns how
// many got a unit.
func (e *env) reserveMany(sale, prefix string, n int) int {
	e.t.Helper()
	ok := 0
	for i := 0; i < n; i++ {
		if code, _ := e.reserve(sale, prefix+"-"+strconv.Itoa(i)); code == lua.ReserveOK {
			ok++
		}
	}
	return ok
}

// persist moves every stream entry of sale into the database with
// created_at from the entry, as the order sink does, and XDELs them.
func (e *env) persist(sale string) []flashgate.Order {
	e.t.Helper()
	msgs, err := e.rdb.XRange(e.ctx, lua.OrdersKey(sale), "-", "+").Result()
	if err != nil {
		e.t.Fatalf("XRANGE: %v", err)
	}
	if len(msgs) == 0 {
		return nil
	}
	var orders []flashgate.Order
	var ids []string
	for _, m := range msgs {
		en, _ := lua.ReadEntry(m.Values)
		qty, _ := strconv.ParseInt(en.Quantity, 10, 64)
		price, _ := strconv.ParseInt(en.Price, 10, 64)
		ts, _ := strconv.ParseInt(en.Time, 10, 64)
		bucket, _ := strconv.Atoi(en.Bucket) // a bucket's stream: sale is its tag
		saleID, _ := lua.SaleOfTag(sale)
		orders = append(orders, flashgate.Order{
			ID: en.Order, SaleID: cmp.Or(en.Sale, saleID), UserID: en.User,
			Quantity: qty, PriceCents: price, Status: flashgate.StatusPendingPayment,
			CreatedAt: time.UnixMilli(ts).UTC(), Bucket: bucket,
		})
		ids = append(ids, m.ID)
	}
	if _, err := e.db.InsertOrders(e.ctx, orders); err != nil {
		e.t.Fatalf("InsertOrders: %v", err)
	}
	if err := e.rdb.XDel(e.ctx, lua.OrdersKey(sale), ids...).Err(); err != nil {
		e.t.Fatalf("XDEL: %v", err)
	}
	return orders
}

// field reads one integer field of a sale hash through c.
func field(t *testing.T, c redis.Cmdable, sale, f string) int64 {
	t.Helper()
	n, err := c.HGet(context.Background(), lua.SaleKey(sale), f).Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatalf("HGET %s %s: %v", sale, f, err)
	}
	return n
}

// startBucketed creates and starts the bucketed sale s, and returns its
// layout.
func (e *env) startBucketed(s flashgate.Sale) lua.Layout {
	e.t.Helper()
	created, err := e.svc.CreateSale(e.ctx, s)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.svc.Start(e.ctx, s.ID); err != nil {
		e.t.Fatal(err)
	}
	return lua.Layout{Sale: s.ID, Salts: created.BucketSalts}
}
