package systemtest

import (
	"context"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane"
	"github.com/flashgate/flashgate/gateway"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/inventory"
	"github.com/flashgate/flashgate/lua"
	"github.com/flashgate/flashgate/sqldb"
)

// TestFlushAllMidSale: Redis loses everything (FLUSHALL) in the middle of a
// sale, and buyers keep coming, so the gateway flushes admission counters
// for the sale before the control plane's next re-sync. The counters must
// not recreate a partial sale hash that hides the loss: the re-sync rebuilds
// the sale, it answers open again within 2s, every free unit sells, and
// nobody holds two orders. On a Redis Cluster the flush is a FLUSHALL on
// every primary, and the gateway reads through a ReadOnly client.
func TestFlushAllMidSale(t *testing.T) {
	for _, backend := range []string{"single", "cluster"} {
		t.Run(backend, func(t *testing.T) { testFlushAllMidSale(t, backend) })
	}
}

func testFlushAllMidSale(t *testing.T, backend string) {
	ctx := context.Background()
	db, err := sqldb.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "fg.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	s := &faultSystem{t: t, ctx: ctx, db: db,
		jwtS: []byte(randomHex(t, 32)), metrics: prometheus.NewRegistry()}
	if backend == "cluster" {
		s.cluster = testCluster.Get(t)
		s.rdb, s.rep = s.cluster.Client(t, false), s.cluster.Client(t, true)
	} else {
		s.primary = redistest.Start(t)
		s.rdb = s.primary.Client(t)
		s.rep = s.rdb
	}
	s.inv = inventory.New(s.rdb, inventory.Config{Logger: quiet})
	s.cp, err = controlplane.New(controlplane.Config{
		Redis: s.rdb, Store: db, Releaser: s.inv, AdminToken: randomHex(t, 32), Logger: quiet,
		ResyncEvery: 200 * time.Millisecond, TickEvery: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(gateway.Config{
		Primary: s.rdb, Replica: s.rep, Reserver: s.inv, Catalog: db, Orders: s.cp,
		JWTSecret: s.jwtS, Logger: quiet, Metrics: s.metrics, ShutdownDelay: -1, RedisTimeout: 500 * time.Millisecond,
		StateRefresh: 300 * time.Millisecond, FlushInterval: 10 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = gw.Serve(ln) }()
	base := "http://" + ln.Addr().String()
	s.base.Store(&base)
	_, killSink := s.startSink("sink", db)
	cpCtx, stopCP := context.WithCancel(ctx)
	t.Cleanup(func() {
		stopCP()
		killSink()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = gw.Shutdown(sctx)
		cancel()
		wg.Wait()
		s.wg.Wait()
	})

	const sale, total = "flush", 20
	if _, err := s.cp.CreateSale(ctx, flashgate.Sale{ID: sale, Name: "Flush", PriceCents: 100, Total: total}); err != nil {
		t.Fatal(err)
	}
	if err := s.cp.Start(ctx, sale); err != nil {
		t.Fatal(err)
	}
	users := func(prefix string, n int) []string {
		var u []string
		for i := 0; i < n; i++ {
			u = append(u, prefix+strconv.Itoa(i))
		}
		return u
	}
	early := (&crowd{s: s, sale: sale, users: users("early", 8), workers: 4}).run(ctx, t)
	byAnswer, _, _ := tally(t, early)
	if byAnswer["201"] != 8 {
		t.Fatalf("before the flush:%s; want 8 × 201", answers(byAnswer))
	}
	if _, ok := testwait.For(10*time.Second, func() bool { n, _ := s.rdb.XLen(ctx, lua.OrdersKey(sale)).Result(); return n == 0 }); !ok {
		t.Fatal("the sink did not drain the stream")
	}

	if err := flushAll(ctx, s.rdb); err != nil {
		t.Fatal(err)
	}
	flushed := time.Now()
	// Buyers keep coming: the gateway's cached state still says open, so it
	// admits them (the reserve answers not found) and flushes the counts.
	(&crowd{s: s, sale: sale, users: users("during", 10), workers: 2}).run(ctx, t)
	// Not a synchronisation: a window of several counter flushes (every
	// 10 ms) that must not recreate a partial hash the re-sync then trusts.
	time.Sleep(50 * time.Millisecond)
	if h, _ := s.rdb.HGetAll(ctx, lua.SaleKey(sale)).Result(); len(h) > 0 {
		t.Logf("sale hash before the re-sync: %v", h)
	}

	wg.Add(1)
	go func() { defer wg.Done(); _ = s.cp.Run(cpCtx) }()
	// The sale answers open when a buyer can buy again.
	probe := &crowd{s: s, sale: sale, users: []string{"probe"}, workers: 1}
	var last string
	if _, ok := testwait.For(2*time.Second-time.Since(flushed), func() bool {
		last = probe.buy(ctx, http.DefaultClient, "probe", s.token(t, "probe")).answer
		return last == "201"
	}); !ok {
		h, _ := s.rdb.HGetAll(ctx, lua.SaleKey(sale)).Result()
		t.Fatalf("2s after FLUSHALL a purchase answers %q, want 201 (sale hash %v)", last, h)
	}
	t.Logf("open again %v after the flush", time.Since(flushed).Round(time.Millisecond))

	// Every free unit sells, once; the early buyers cannot buy again.
	again := (&crowd{s: s, sale: sale, users: users("early", 8), workers: 4}).run(ctx, t)
	if byAnswer, _, _ := tally(t, again); byAnswer["409 already_purchased"] != 8 {
		t.Errorf("early buyers after the flush:%s; want 8 × 409 already_purchased", answers(byAnswer))
	}
	// New buyers in waves until every unit is booked: the admission cap
	// lets a little more traffic in than units remain, and re-sync raises
	// it while units remain. The count of 201s below says if they all were.
	var late []buyOutcome
	wave := 0
	testwait.For(20*time.Second, func() bool {
		late = append(late, (&crowd{s: s, sale: sale, users: users("late"+strconv.Itoa(wave)+"-", 20), workers: 4}).run(ctx, t)...)
		wave++
		return s.booked(t, sale) >= total
	})
	byAnswer, confirmed, _ := tally(t, late)
	if byAnswer["201"] != total-9 {
		t.Errorf("after the flush:%s; want %d × 201", answers(byAnswer), total-9)
	}
	if _, ok := testwait.For(10*time.Second, func() bool { n, _ := s.rdb.XLen(ctx, lua.OrdersKey(sale)).Result(); return n == 0 }); !ok {
		t.Fatal("the sink did not drain the stream")
	}
	live, err := db.LiveOrders(ctx, sale)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, o := range live {
		if seen[o.UserID] {
			t.Errorf("user %s holds two orders", o.UserID)
		}
		seen[o.UserID] = true
	}
	if len(live) != total {
		t.Errorf("%d live orders, want %d", len(live), total)
	}
	for id := range confirmed {
		if _, err := db.Order(ctx, id); err != nil && !errors.Is(err, flashgate.ErrNotFound) {
			t.Fatal(err)
		} else if err != nil {
			t.Errorf("confirmed order %s has no row", id)
		}
	}
}
