package drawjournal_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/internal/cptest"
	"github.com/flashgate/flashgate/controlplane/internal/fencing"
	"github.com/flashgate/flashgate/controlplane/resync"
	"github.com/flashgate/flashgate/internal/testenv/pgtest"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/lua"
	"github.com/flashgate/flashgate/sqldb"
)

// drawBackends are the databases the draw journal's race tests run on.
var drawBackends = []struct {
	name string
	dsn  func(t *testing.T) string
}{{"sqlite", cptest.SQLiteDSN}, {"postgres", func(t *testing.T) string { return pgtest.New(t) }}}

// drawFixture is the set-up those tests share: draw sale "dr" of total
// units (per_user 1), its entries open since a minute ago and closing in
// an hour, in db (on dsn) and a fresh Redis, and ctx carrying the leader's
// fencing token (ended with the test, after 60 s at most).
type drawFixture struct {
	ctx     context.Context
	db      *sqldb.DB
	rdb     *redis.Client
	sale    flashgate.Sale
	closeAt time.Time
}

func newDrawFixture(t *testing.T, dsn string, total int64) *drawFixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	f := &drawFixture{db: cptest.OpenDB(t, dsn), rdb: redistest.Start(t).Client(t)}
	open := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	f.closeAt = open.Add(time.Hour)
	f.sale = flashgate.Sale{ID: "dr", Name: "Drop", Total: total, PerUser: 1, PriceCents: 500, State: flashgate.StateOpen,
		Queue: flashgate.QueueDraw, EntriesOpenAt: &open, EntriesCloseAt: &f.closeAt}
	if err := f.db.CreateSale(ctx, f.sale); err != nil {
		t.Fatalf("CreateSale: %v", err)
	}
	tok, err := lua.TakeFence.Run(ctx, f.rdb, lua.FenceKeys(), time.Now().UnixMilli()).Int64()
	if err != nil {
		t.Fatalf("TakeFence: %v", err)
	}
	f.ctx = fencing.WithValue(ctx, tok)
	return f
}

// rebuild re-syncs the sale in Redis from store (the fixture's database,
// or a gate in front of it), as the leader does after a loss.
func (f *drawFixture) rebuild(t *testing.T, store resync.Store) {
	t.Helper()
	s := resync.New(f.rdb, store, nil, cptest.QuietLogger(), prometheus.NewCounter(prometheus.CounterOpts{Name: "resyncs"}))
	if _, _, err := s.Resync(f.ctx, f.sale.ID); err != nil {
		t.Errorf("Resync: %v", err)
	}
}
