package controlplane

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/internal/cptest"
	"github.com/flashgate/flashgate/internal/testenv/pgtest"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/internal/testenv/testclock"
	"github.com/flashgate/flashgate/lua"
	"github.com/flashgate/flashgate/sqldb"
)

const testToken = "s3cret-admin-token"

var t0 = time.Date(2030, 5, 1, 12, 0, 0, 0, time.UTC)

// luaReleaser is the tests' Releaser (cptest.Releaser).
type luaReleaser = cptest.Releaser

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

// The shared pieces of the control plane packages' tests (cptest).
var (
	quietLogger = cptest.QuietLogger
	sqliteDSN   = cptest.SQLiteDSN
	openDB      = cptest.OpenDB
	field       = cptest.Field
)

// postgresDSN gives a fresh PostgreSQL database.
func postgresDSN(t *testing.T) string { return pgtest.New(t) }

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
	e.rel = &luaReleaser{RDB: e.rdb}
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
	return cptest.Reserve(e.t, e.ctx, e.rdb, sale, user, fmt.Sprintf("o%06d", e.seq.Add(1)), e.clock.Now())
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

// persist moves every stream entry of sale into the database, as the
// order sink does (cptest.Persist).
func (e *env) persist(sale string) []flashgate.Order {
	e.t.Helper()
	return cptest.Persist(e.t, e.ctx, e.rdb, e.db, sale)
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
