package buckets

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/internal/cptest"
	"github.com/flashgate/flashgate/controlplane/internal/fencing"
	"github.com/flashgate/flashgate/controlplane/internal/salehash"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/internal/testenv/testclock"
	"github.com/flashgate/flashgate/lua"
	"github.com/flashgate/flashgate/sqldb"
)

// env is one Keeper over a real redis-server and a real SQLite database.
type env struct {
	t     *testing.T
	ctx   context.Context
	rdb   redis.UniversalClient
	db    *sqldb.DB
	clock *testclock.Clock
	k     *Keeper
}

func newEnv(t *testing.T) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	e := &env{t: t, ctx: ctx, db: cptest.OpenDB(t, cptest.SQLiteDSN(t)),
		clock: testclock.New(time.Date(2030, 5, 1, 12, 0, 0, 0, time.UTC))}
	e.rdb = redistest.Start(t).Client(t)
	e.k = New(Config{Redis: e.rdb, Store: e.db, Logger: cptest.QuietLogger(), Clock: e.clock})
	return e
}

// takeFence takes a fresh fencing token (lua.TakeFence), as a leader does.
func (e *env) takeFence() int64 {
	e.t.Helper()
	tok, err := lua.TakeFence.Run(e.ctx, e.rdb, lua.FenceKeys(), time.Now().UnixMilli()).Int64()
	if err != nil {
		e.t.Fatalf("TakeFence: %v", err)
	}
	return tok
}

// startBucketed stores the bucketed sale s as a row and prepares and
// opens it in Redis under a fresh fencing token, as controlplane's
// CreateSale and Start do; it returns the sale with its salts.
func (e *env) startBucketed(s flashgate.Sale) flashgate.Sale {
	e.t.Helper()
	s.BucketSalts = e.k.ChooseSalts(e.ctx, s.ID, s.Buckets)
	s.State = flashgate.StateOpen
	if err := e.db.CreateSale(e.ctx, s); err != nil {
		e.t.Fatalf("CreateSale: %v", err)
	}
	l := Layout(s)
	for b, t := range l.Tags() {
		if err := lua.Prepare.Run(e.ctx, e.rdb, lua.SaleKeys(t), PrepareArgs(s, b)...).Err(); err != nil {
			e.t.Fatalf("preparing bucket %d: %v", b, err)
		}
	}
	if err := lua.Prepare.Run(e.ctx, e.rdb, lua.SaleKeys(s.ID), s.Total, flashgate.AdmitCap(s.Total, s.AdmitRatio),
		salehash.PerUser(s), s.PriceCents, l.String(), "", salehash.VariantSpec(s.Variants, nil, nil)).Err(); err != nil {
		e.t.Fatalf("preparing the sale: %v", err)
	}
	if missing, err := e.k.SetState(fencing.WithValue(e.ctx, e.takeFence()), s, "open"); err != nil || missing {
		e.t.Fatalf("opening the buckets: missing %v, %v", missing, err)
	}
	return s
}
