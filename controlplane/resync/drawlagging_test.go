package resync

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/internal/cptest"
	"github.com/flashgate/flashgate/controlplane/internal/fencing"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/lua"
)

// failoverAround is a Redis hook that runs take before the first call of
// lua.DrawRestore and promote before the first call of lua.Restored after
// it (once each).
type failoverAround struct {
	take, promote func()
	took, done    atomic.Bool
}

func (*failoverAround) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *failoverAround) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if a := cmd.Args(); len(a) > 1 && a[0] == "evalsha" {
			switch {
			case a[1] == lua.DrawRestore.Hash() && h.took.CompareAndSwap(false, true):
				h.take()
			case a[1] == lua.Restored.Hash() && h.took.Load() && h.done.CompareAndSwap(false, true):
				h.promote()
			}
		}
		return next(ctx, cmd)
	}
}

func (*failoverAround) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestDrawRebuildFailsOverToLaggingReplica: a rebuild of a draw sale Redis
// lost writes its orders' pages, then its draw entries' page, and the
// primary dies: the replica promoted had the restore's id, its draw mark
// and every orders' page, not the entries' page. The rebuild must not
// reopen the sale without the entries (ann, entered, would enter again as
// new).
func TestDrawRebuildFailsOverToLaggingReplica(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) { testDrawRebuildFailsOverToLaggingReplica(t, be.dsn(t)) })
	}
}

func testDrawRebuildFailsOverToLaggingReplica(t *testing.T, dsn string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db, rdb := cptest.OpenDB(t, dsn), redistest.Start(t).Client(t)
	open := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	closeAt := open.Add(time.Hour)
	sale := flashgate.Sale{ID: "dr", Name: "Drop", Total: 3, PerUser: 2, PriceCents: 500, State: flashgate.StateOpen,
		Queue: flashgate.QueueDraw, EntriesOpenAt: &open, EntriesCloseAt: &closeAt}
	if err := db.CreateSale(ctx, sale); err != nil {
		t.Fatalf("CreateSale: %v", err)
	}
	at := open.Add(time.Second)
	if err := db.PutDrawEntries(ctx, []flashgate.DrawEntry{{ID: "e1", SaleID: sale.ID, UserID: "ann", Quantity: 1,
		State: flashgate.DrawEntered, PaymentIntent: "pi_e1", CreatedAt: at, UpdatedAt: at}}); err != nil {
		t.Fatalf("PutDrawEntries: %v", err)
	}
	tok, err := lua.TakeFence.Run(ctx, rdb, lua.FenceKeys(), time.Now().UnixMilli()).Int64()
	if err != nil {
		t.Fatalf("TakeFence: %v", err)
	}
	ctx = fencing.WithValue(ctx, tok)
	f := &fixture{t: t, ctx: ctx, db: db, rdb: rdb, sale: sale}
	replica := &laggingReplica{f: f}
	rdb.AddHook(&failoverAround{take: replica.take, promote: replica.promote})
	s := New(rdb, db, nil, cptest.QuietLogger(), prometheus.NewCounter(prometheus.CounterOpts{Name: "resyncs"}))
	_, _, err = s.Resync(ctx, sale.ID)
	t.Logf("the rebuild: %v", err)
	for i := range 2 {
		if _, _, err := s.Resync(ctx, sale.ID); err != nil {
			t.Fatalf("pass %d after the rebuild: %v", i, err)
		}
	}
	if got, err := rdb.HGet(ctx, lua.DrawKey(sale.ID), "ann").Result(); err != nil || got != "entered e1 1 " {
		t.Errorf("ann's draw entry after two passes: got %q, %v; want %q", got, err, "entered e1 1 ")
	}
	if got := cptest.Field(t, rdb, sale.ID, lua.FieldDrawEntries); got != 1 {
		t.Errorf("the sale's entries after two passes: got %d, want 1", got)
	}
}
