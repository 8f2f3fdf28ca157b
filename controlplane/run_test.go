package controlplane

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/lua"
)

// countingStore counts the state changes one Service makes.
type countingStore struct {
	Store
	sets atomic.Int64
}

func (c *countingStore) SetSaleState(ctx context.Context, id string, st flashgate.SaleState, fence int64) error {
	c.sets.Add(1)
	return c.Store.SetSaleState(ctx, id, st, fence)
}

// TestScheduleOneLeader: with two Services running, the sale opens when the
// injected clock reaches starts_at and closes at ends_at, and only the
// leader acts; when the leader stops, the other takes over.
func TestScheduleOneLeader(t *testing.T) {
	e := newEnv(t, sqliteDSN(t), nil)
	var stores [2]*countingStore
	var svcs [2]*Service
	for i := range svcs {
		stores[i] = &countingStore{Store: e.db}
		s, err := New(Config{
			Redis: e.rdb, Store: stores[i], Releaser: e.rel, AdminToken: testToken, Clock: e.clock,
			Logger: quietLogger(), TickEvery: 5 * time.Millisecond, ResyncEvery: 20 * time.Millisecond,
			LeaderTTL: 2 * time.Second, NodeID: "node" + string(rune('a'+i)),
		})
		if err != nil {
			t.Fatal(err)
		}
		svcs[i] = s
	}
	start, end := t0.Add(time.Hour), t0.Add(2*time.Hour)
	if _, err := e.svc.CreateSale(e.ctx, flashgate.Sale{ID: "timed", Name: "Timed", Total: 5, StartsAt: &start, EndsAt: &end}); err != nil {
		t.Fatal(err)
	}
	var ctxs [2]context.CancelFunc
	var wg sync.WaitGroup
	for i, s := range svcs {
		ctx, cancel := context.WithCancel(e.ctx)
		ctxs[i] = cancel
		wg.Add(1)
		go func() { defer wg.Done(); _ = s.Run(ctx) }()
	}
	t.Cleanup(func() {
		for _, c := range ctxs {
			c()
		}
		wg.Wait()
	})
	testwait.Eventually(t, 10*time.Second, func() bool { return svcs[0].Leading() || svcs[1].Leading() }, "a leader")
	leader, other := 0, 1
	if svcs[1].Leading() {
		leader, other = 1, 0
	}
	// Let the loops run a while before starts_at: nothing opens.
	testwait.Eventually(t, 10*time.Second, func() bool {
		return counterValue(svcs[leader].metrics.Resyncs) >= 3
	}, "a few re-sync rounds")
	if got := field(t, e.rdb, "timed", lua.FieldStart); got != 0 {
		t.Fatalf("start = %d before starts_at, want 0", got)
	}
	state := func() flashgate.SaleState {
		s, err := e.db.Sale(e.ctx, "timed")
		if err != nil {
			t.Fatal(err)
		}
		return s.State
	}
	e.clock.Set(start)
	testwait.Eventually(t, 10*time.Second, func() bool {
		return state() == flashgate.StateOpen && field(t, e.rdb, "timed", lua.FieldStart) == 1
	}, "the sale to open")
	e.clock.Set(end)
	testwait.Eventually(t, 10*time.Second, func() bool {
		return state() == flashgate.StateClosed && field(t, e.rdb, "timed", lua.FieldClosed) == 1
	}, "the sale to close")
	if got := stores[leader].sets.Load(); got != 2 {
		t.Errorf("leader changed the state %d times, want 2", got)
	}
	if got := stores[other].sets.Load(); got != 0 {
		t.Errorf("the other control plane changed the state %d times, want 0", got)
	}
	if svcs[other].Leading() {
		t.Errorf("both control planes lead")
	}
	ctxs[leader]()
	testwait.Eventually(t, 10*time.Second, func() bool { return svcs[other].Leading() }, "the other control plane to take over")
}

// counterValue reads a counter.
func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil || m.Counter == nil {
		return 0
	}
	return m.Counter.GetValue()
}
