package ordersink_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/lua"
	"github.com/flashgate/flashgate/ordersink"
)

// gated is a Store whose InsertOrders tells entered about each call and
// then waits for release before it inserts.
type gated struct {
	store   ordersink.Store
	entered chan []flashgate.Order
	release chan struct{}
}

func (g *gated) InsertOrders(ctx context.Context, orders []flashgate.Order) (int, error) {
	g.entered <- orders
	<-g.release
	return g.store.InsertOrders(ctx, orders)
}

// streamOrders returns the order ids held by the sale's stream.
func (e *env) streamOrders(t *testing.T) []string {
	t.Helper()
	msgs, err := e.rdb.XRange(context.Background(), lua.OrdersKey(sale), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range msgs {
		e, _ := lua.ReadEntry(m.Values)
		ids = append(ids, e.Order)
	}
	return ids
}

// backlogIs checks that the stream's length, the drainer's Backlog and the
// orders not yet in the database agree, and that the stream holds exactly
// the orders not yet in the database.
func (e *env) backlogIs(t *testing.T, step string, d *ordersink.Drainer, all []string, want []string) {
	t.Helper()
	ctx := context.Background()
	n, err := d.Backlog(ctx)
	if err != nil || n != int64(len(want)) {
		t.Errorf("%s: Backlog got %d, %v, want %d", step, n, err, len(want))
	}
	f, err := e.db.Figures(ctx, sale)
	if err != nil {
		t.Fatal(err)
	}
	if f.Persisted != int64(len(all)-len(want)) {
		t.Errorf("%s: rows got %d, want %d", step, f.Persisted, len(all)-len(want))
	}
	if got := e.streamOrders(t); !slices.Equal(got, want) {
		t.Errorf("%s: stream holds %d orders %v…, want %d", step, len(got), got[:min(3, len(got))], len(want))
	}
}

// TestTwoSinksCommitOutOfOrder: sink A reads the first 100 entries, sink B
// the next 100 and commits them first, then A commits. At every step the
// stream holds exactly the orders not in the database, and it ends empty.
func TestTwoSinksCommitOutOfOrder(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		ids := e.reserve(t, "u", 200)
		g := &gated{store: e.db, entered: make(chan []flashgate.Order, 1), release: make(chan struct{})}
		a := drainer(e, g, ordersink.Config{Consumer: "a", Batch: 100})
		b := drainer(e, nil, ordersink.Config{Consumer: "b", Batch: 100})
		e.backlogIs(t, "before", b, ids, ids)

		done := make(chan error, 1)
		go func() {
			n, err := a.DrainOnce(ctx)
			if err == nil && n != 100 {
				err = fmt.Errorf("sink a stored %d, want 100", n)
			}
			done <- err
		}()
		if got := <-g.entered; len(got) != 100 || got[0].ID != ids[0] {
			t.Fatalf("sink a: got %d orders, want the first 100", len(got))
		}
		e.backlogIs(t, "a read 1-100", b, ids, ids)
		if n, err := b.DrainOnce(ctx); err != nil || n != 100 {
			t.Fatalf("sink b: got %d, %v, want 100, nil", n, err)
		}
		e.backlogIs(t, "b committed 101-200", b, ids, ids[:100])
		close(g.release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		e.backlogIs(t, "a committed 1-100", b, ids, nil)
		e.check(t, ids)
	})
}

// TestTwoSinksRun: two sinks running side by side while orders arrive, in
// batches small enough to interleave, store every order once and leave the
// stream empty; the stream never holds fewer entries than the orders not
// yet in the database (it may hold more for a moment: a batch committed
// and not yet acknowledged).
func TestTwoSinksRun(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 2)
		var sinks []*ordersink.Drainer
		for _, name := range []string{"a", "b"} {
			d := drainer(e, nil, ordersink.Config{Consumer: name, Batch: 7, Block: 2 * time.Millisecond})
			sinks = append(sinks, d)
			go func() { done <- d.Run(ctx) }()
		}
		var ids []string
		for i := range 10 {
			ids = append(ids, e.reserve(t, "u"+strconv.Itoa(i)+"-", 30)...)
			// The length is read before the rows: an entry gone from the
			// stream by then has its row committed by then.
			n := e.rdb.XLen(ctx, lua.OrdersKey(sale)).Val()
			f, err := e.db.Figures(ctx, sale)
			if err != nil {
				t.Fatal(err)
			}
			if n < int64(len(ids))-f.Persisted {
				t.Errorf("after %d orders: stream length %d, fewer than the %d orders not in the database",
					len(ids), n, int64(len(ids))-f.Persisted)
			}
		}
		testwait.Eventually(t, 10*time.Second, func() bool {
			f, _ := e.db.Figures(ctx, sale)
			return f.Persisted == int64(len(ids)) && e.rdb.XLen(ctx, lua.OrdersKey(sale)).Val() == 0
		}, "every order stored")
		cancel()
		<-done
		<-done
		e.check(t, ids)
	})
}

// TestDrainTrimsInOrder: one sink committing its batches in stream order
// removes them by trimming the stream (XTRIM MINID), never by an XDEL per
// entry, which costs Redis several times more.
func TestDrainTrimsInOrder(t *testing.T) {
	e := newEnv(t, "sqlite://"+t.TempDir()+"/fg.db")
	ctx := context.Background()
	ids := e.reserve(t, "u", 300)
	if err := e.rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	d := drainer(e, nil, ordersink.Config{Batch: 64})
	if n, err := d.DrainOnce(ctx); err != nil || n != 300 {
		t.Fatalf("DrainOnce: got %d, %v, want 300, nil", n, err)
	}
	e.check(t, ids)
	if n := redistest.Commands(t, e.rdb)["xdel"].Calls; n != 0 {
		t.Errorf("XDEL calls: got %d, want 0", n)
	}
	if n := redistest.Commands(t, e.rdb)["xtrim"].Calls; n != 5 {
		t.Errorf("XTRIM calls: got %d, want 5 (one a batch)", n)
	}
}

// TestLinger: while orders trickle in, a running sink that read a partial
// batch waits Linger before it polls again, so it commits them in a few
// batches rather than one each; a full batch is followed by the next poll
// at once. Without Linger, an order that arrives after the last one was
// stored is a batch of its own: the case waits for each order's row before
// the next, so that a stalled machine cannot merge them.
func TestLinger(t *testing.T) {
	e := newEnv(t, "sqlite://"+t.TempDir()+"/fg.db")
	for _, c := range []struct {
		name     string
		linger   time.Duration
		stepped  bool // each order waits for the row of the one before
		batches  func(float64) bool
		wantText string
	}{
		{"off", -1, true, func(n float64) bool { return n == 20 }, "20, one per order"},
		{"500ms", 500 * time.Millisecond, false, func(n float64) bool { return n <= 6 }, "at most 6"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			reg := prometheus.NewRegistry()
			d := drainer(e, nil, ordersink.Config{Consumer: c.name, Block: time.Millisecond, Linger: c.linger, Metrics: reg})
			done := make(chan error, 1)
			go func() { done <- d.Run(ctx) }()
			var ids []string
			for i := range 20 {
				ids = append(ids, e.reserve(t, c.name+strconv.Itoa(i)+"-", 1)...)
				if c.stepped {
					testwait.Eventually(t, 10*time.Second, func() bool { return counter(t, reg, "flashgate_sink_orders_total") == float64(i+1) }, "the order's row")
				} else {
					// Not a synchronisation: the orders arrive spread over time, for Linger to gather.
					time.Sleep(5 * time.Millisecond)
				}
			}
			testwait.Eventually(t, 10*time.Second, func() bool {
				return e.rdb.XLen(ctx, lua.OrdersKey(sale)).Val() == 0 && counter(t, reg, "flashgate_sink_orders_total") == 20
			}, "every order stored")
			cancel()
			<-done
			got := counter(t, reg, "flashgate_sink_batches_total")
			t.Logf("%d orders in %v batches", len(ids), got)
			if !c.batches(got) {
				t.Errorf("batches: got %v, want %s", got, c.wantText)
			}
		})
	}
	// Full batches: 40 entries in batches of 8 take five polls, none of
	// them waiting a second.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e.reserve(t, "full", 40)
	d := drainer(e, nil, ordersink.Config{Consumer: "full", Batch: 8, Linger: time.Second})
	start := time.Now()
	go func() { _ = d.Run(ctx) }()
	testwait.Eventually(t, 10*time.Second, func() bool { return e.rdb.XLen(ctx, lua.OrdersKey(sale)).Val() == 0 }, "the full batches stored")
	if took := time.Since(start); took > 900*time.Millisecond {
		t.Errorf("draining 5 full batches took %v, want well under the 1s linger", took)
	}
}
