package admin

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane"
	"github.com/flashgate/flashgate/controlplane/internal/cptest"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/internal/testenv/testclock"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/sqldb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testToken = "s3cret-admin-token"

var t0 = time.Date(2030, 5, 1, 12, 0, 0, 0, time.UTC)

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

// The shared pieces of the control plane packages' tests (cptest).
var (
	quietLogger = cptest.QuietLogger
	sqliteDSN   = cptest.SQLiteDSN
	field       = cptest.Field
)

func newEnv(t *testing.T, dsn string, mod func(*controlplane.Config)) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	e := &env{t: t, ctx: ctx, db: cptest.OpenDB(t, dsn), clock: testclock.New(t0)}
	e.rdb = redistest.Start(t).Client(t)
	cfg := controlplane.Config{
		Redis: e.rdb, Store: e.db, Releaser: &cptest.Releaser{RDB: e.rdb}, AdminToken: testToken,
		Clock: e.clock, Logger: quietLogger(), PersistWait: -1, NodeID: "test",
	}
	if mod != nil {
		mod(&cfg)
	}
	var err error
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
	return cptest.Reserve(e.t, e.ctx, e.rdb, sale, user, fmt.Sprintf("o%06d", e.seq.Add(1)), e.clock.Now())
}

// persist moves every stream entry of sale into the database, as the
// order sink does (cptest.Persist).
func (e *env) persist(sale string) []flashgate.Order {
	e.t.Helper()
	return cptest.Persist(e.t, e.ctx, e.rdb, e.db, sale)
}

// handler is the admin handler of e's control plane.
func (e *env) handler() http.Handler { return Handler(e.svc) }
