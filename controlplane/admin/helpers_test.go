package admin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane"
	"github.com/flashgate/flashgate/internal/redistest"
	"github.com/flashgate/flashgate/internal/testclock"
	"github.com/flashgate/flashgate/internal/testwait"
	"github.com/flashgate/flashgate/lua"
	"github.com/flashgate/flashgate/sqldb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testToken = "s3cret-admin-token"

var t0 = time.Date(2030, 5, 1, 12, 0, 0, 0, time.UTC)

// luaReleaser is the tiny Releaser of the tests: lua.Release and
// lua.ReleaseBatch on the primary.
type luaReleaser struct{ rdb redis.UniversalClient }

func (r *luaReleaser) Release(ctx context.Context, o flashgate.Order) (bool, error) {
	code, err := lua.Release.Run(ctx, r.rdb, lua.ReleaseKeys(o.SaleID), o.ID, o.UserID, o.Quantity).Int64()
	return code == lua.ReleaseDone, err
}

func (r *luaReleaser) ReleaseBatch(ctx context.Context, orders []flashgate.Order) (int, error) {
	n := 0
	for _, o := range orders {
		ok, err := r.Release(ctx, o)
		if err != nil {
			return n, err
		}
		if ok {
			n++
		}
	}
	return n, nil
}

// env is one control plane over a real redis-server and a real SQLite
// database, and its admin handler.
type env struct {
	t     *testing.T
	ctx   context.Context
	rdb   redis.UniversalClient
	db    *sqldb.DB
	clock *testclock.Clock
	svc   *controlplane.Service
	seq   atomic.Int64
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// sqliteDSN gives a fresh SQLite database.
func sqliteDSN(t *testing.T) string { return "sqlite://" + filepath.Join(t.TempDir(), "fg.db") }

func newEnv(t *testing.T, dsn string, mod func(*controlplane.Config)) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	db, err := sqldb.Open(ctx, dsn)
	if err != nil {
		t.Fatalf("sqldb.Open: %v", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	e := &env{t: t, ctx: ctx, db: db, clock: testclock.New(t0)}
	e.rdb = redistest.Start(t).Client(t)
	cfg := controlplane.Config{
		Redis: e.rdb, Store: e.db, Releaser: &luaReleaser{rdb: e.rdb}, AdminToken: testToken,
		Clock: e.clock, Logger: quietLogger(), PersistWait: -1, NodeID: "test",
	}
	if mod != nil {
		mod(&cfg)
	}
	if e.svc, err = controlplane.New(cfg); err != nil {
		t.Fatalf("New: %v", err)
	}
	return e
}

// lead runs the control plane's loops until the test ends, and waits until
// it leads.
func (e *env) lead() {
	e.t.Helper()
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- e.svc.Run(ctx) }()
	e.t.Cleanup(func() { cancel(); <-done })
	testwait.Eventually(e.t, 10*time.Second, e.svc.Leading, "the control plane to lead")
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
	v, err := lua.Reserve.Run(e.ctx, e.rdb, lua.ReserveKeys(sale), id, user, 1, e.clock.Now().UnixMilli(), sale).Slice()
	if err != nil {
		e.t.Fatalf("reserve: %v", err)
	}
	got, _ := v[1].(string)
	return v[0].(int64), got
}

// persist moves every stream entry of sale into the database, as the order
// sink does, and XDELs them.
func (e *env) persist(sale string) []flashgate.Order {
	e.t.Helper()
	msgs, err := e.rdb.XRange(e.ctx, lua.OrdersKey(sale), "-", "+").Result()
	if err != nil {
		e.t.Fatalf("XRANGE: %v", err)
	}
	var orders []flashgate.Order
	var ids []string
	for _, m := range msgs {
		en, _ := lua.ReadEntry(m.Values)
		qty, _ := strconv.ParseInt(en.Quantity, 10, 64)
		price, _ := strconv.ParseInt(en.Price, 10, 64)
		ts, _ := strconv.ParseInt(en.Time, 10, 64)
		orders = append(orders, flashgate.Order{
			ID: en.Order, SaleID: sale, UserID: en.User, Quantity: qty, PriceCents: price,
			Status: flashgate.StatusPendingPayment, CreatedAt: time.UnixMilli(ts).UTC(),
		})
		ids = append(ids, m.ID)
	}
	if len(orders) == 0 {
		return nil
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

// handler is the admin handler of e's control plane.
func (e *env) handler() http.Handler { return Handler(e.svc) }
