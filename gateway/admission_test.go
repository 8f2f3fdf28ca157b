package gateway

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/flashgate/flashgate/internal/testenv/testclock"
	"github.com/flashgate/flashgate/lua"
)

// TestRejectedFlushDeferred checks that rejections alone reach the primary
// every RejectedFlushInterval, not every flush tick, and that they go at
// once with admissions.
func TestRejectedFlushDeferred(t *testing.T) {
	clock := testclock.New(time.Now())
	e := newEnv(t, func(c *Config) { c.UserRate = -1; c.Clock = clock; c.RejectedFlushInterval = 250 * time.Millisecond })
	e.sale(t, "s1", 10, 15, true)
	h := e.s.Handler()
	ctx := context.Background()
	buy := func(n int, prefix string) {
		for i := range n {
			do(h, req{method: "POST", path: "/api/sales/s1/orders", token: token(t, prefix+strconv.Itoa(i))})
		}
	}
	counts := func() (access, rejected int64) {
		access, _ = e.primary.HGet(ctx, lua.SaleKey("s1"), lua.FieldAccess).Int64()
		rejected, _ = e.primary.HGet(ctx, lua.SaleKey("s1"), lua.FieldRejected).Int64()
		return access, rejected
	}
	buy(20, "a") // 15 admitted, 5 rejected
	e.s.flushTick(ctx)
	if a, r := counts(); a != 15 || r != 5 {
		t.Fatalf("first tick: got access %d, rejected %d; want 15, 5", a, r)
	}
	for _, step := range []struct {
		advance time.Duration
		buy     int
		want    int64
	}{
		{10 * time.Millisecond, 7, 5},   // rejections alone, not yet due
		{100 * time.Millisecond, 3, 5},  // still not due
		{200 * time.Millisecond, 0, 15}, // due: all ten go
		{10 * time.Millisecond, 4, 15},
	} {
		clock.Add(step.advance)
		buy(step.buy, "b"+strconv.FormatInt(int64(step.advance), 10))
		e.s.flushTick(ctx)
		if _, r := counts(); r != step.want {
			t.Fatalf("after %s more: got rejected %d on the primary, want %d", step.advance, r, step.want)
		}
	}
	e.s.flush(ctx) // the last flush at Close takes everything
	if _, r := counts(); r != 19 {
		t.Fatalf("after the last flush: got rejected %d, want 19", r)
	}
}

// TestAdmissionCap: with count 15 for 10 units, 15 requests are admitted
// (10 reserve, 5 fail on the primary), then the gateway answers sold_out
// itself, and a flush brings access on the primary to 15.
func TestAdmissionCap(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.UserRate = -1 })
	e.sale(t, "s1", 10, 15, true)
	h := e.s.Handler()
	statuses := map[int]int{}
	for i := 0; i < 40; i++ {
		r := do(h, req{method: "POST", path: "/api/sales/s1/orders", token: token(t, "u"+strconv.Itoa(i))})
		statuses[r.StatusCode()]++
	}
	if got := e.reserver.calls.Load(); got != 15 {
		t.Fatalf("got %d reserve calls, want 15", got)
	}
	if statuses[201] != 10 || statuses[409] != 30 {
		t.Fatalf("got statuses %v, want 10×201 and 30×409", statuses)
	}
	e.s.flush(context.Background())
	ctx := context.Background()
	if got, _ := e.primary.HGet(ctx, lua.SaleKey("s1"), lua.FieldAccess).Int64(); got != 15 {
		t.Fatalf("got access %d on the primary, want 15", got)
	}
	if got, _ := e.primary.HGet(ctx, lua.SaleKey("s1"), lua.FieldRejected).Int64(); got != 25 {
		t.Fatalf("got rejected %d on the primary, want 25", got)
	}
	// After a refresh (access now read from Redis) it still answers locally.
	e.s.refreshState(ctx)
	r := do(h, req{method: "POST", path: "/api/sales/s1/orders", token: token(t, "late")})
	if errCode(r) != "sold_out" || e.reserver.calls.Load() != 15 {
		t.Fatalf("after refresh: got %s and %d reserve calls, want sold_out and 15", r.Body(), e.reserver.calls.Load())
	}
	// A raised cap (as the control plane's re-sync does) lets traffic in again.
	if err := e.primary.HSet(ctx, lua.SaleKey("s1"), lua.FieldCount, 20, lua.FieldBooked, 9).Err(); err != nil {
		t.Fatal(err)
	}
	e.s.refreshState(ctx)
	if r := do(h, req{method: "POST", path: "/api/sales/s1/orders", token: token(t, "late")}); r.StatusCode() != 201 {
		t.Fatalf("after a re-sync: got %d %s, want 201", r.StatusCode(), r.Body())
	}
}

// TestRejectionsMakeNoRedisCalls counts every command both clients send
// while the handler judges not-started and sold-out purchases.
func TestRejectionsMakeNoRedisCalls(t *testing.T) {
	var cnt counter
	e := newEnv(t, func(c *Config) { c.UserRate = -1 })
	e.primary.AddHook(&cnt)
	e.sale(t, "soon", 10, 15, false)
	e.sale(t, "one", 1, 2, true)
	h := e.s.Handler()
	toks := make([]string, 20)
	for i := range toks {
		toks[i] = token(t, "u"+strconv.Itoa(i))
	}
	// Warm up: the first sight of each sale reads Redis once; u0 buys the
	// only unit of "one"; a refresh sees booked = total.
	do(h, req{method: "POST", path: "/api/sales/soon/orders", token: toks[0]})
	if r := do(h, req{method: "POST", path: "/api/sales/one/orders", token: toks[0]}); r.StatusCode() != 201 {
		t.Fatalf("warm-up purchase: got %d %s", r.StatusCode(), r.Body())
	}
	e.s.refreshState(context.Background())
	for _, p := range []string{"/api/sales/soon/orders", "/api/sales/one/orders"} {
		before := cnt.n.Load()
		for i := 1; i < len(toks); i++ {
			r := do(h, req{method: "POST", path: p, token: toks[i]})
			if r.StatusCode() != 409 {
				t.Fatalf("%s: got %d %s, want 409", p, r.StatusCode(), r.Body())
			}
		}
		if got := cnt.n.Load() - before; got != 0 {
			t.Fatalf("%s: got %d Redis commands during rejections, want 0", p, got)
		}
	}
	// The control: an admitted purchase does reach Redis.
	e.setState(t, "soon", "open")
	e.s.refreshState(context.Background())
	before := cnt.n.Load()
	if r := do(h, req{method: "POST", path: "/api/sales/soon/orders", token: toks[1]}); r.StatusCode() != 201 {
		t.Fatalf("control purchase: got %d", r.StatusCode())
	}
	if cnt.n.Load() == before {
		t.Fatalf("the hook saw no command for an admitted purchase: the counter is broken")
	}
}

func TestSalesAreDropped(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.SaleIdle = 100 * time.Millisecond; c.StateRefresh = 10 * time.Millisecond })
	e.sale(t, "s1", 3, 4, true)
	do(e.s.Handler(), req{method: "GET", path: "/api/sales/s1"})
	do(e.s.Handler(), req{method: "GET", path: "/api/sales/ghost"})
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		e.s.refreshState(ctx)
	}
	if _, ok := e.s.sales["ghost"]; ok {
		t.Fatalf("an unknown id is still cached after 3 idle refreshes")
	}
	if _, ok := e.s.sales["s1"]; !ok {
		t.Fatalf("a known sale was dropped after 3 idle refreshes")
	}
	for i := 0; i < 12; i++ {
		e.s.refreshState(ctx)
	}
	if n := len(e.s.sales); n != 0 {
		t.Fatalf("got %d cached sales after SaleIdle, want 0", n)
	}
}

// TestNewSaleLoadedOnce: a burst of requests for a sale never seen before
// causes one Redis read and one catalog read.
func TestNewSaleLoadedOnce(t *testing.T) {
	var cnt counter
	e := newEnv(t, nil)
	e.sale(t, "s1", 3, 4, true)
	e.primary.AddHook(&cnt)
	if err := e.primary.Ping(context.Background()).Err(); err != nil { // dial first: the handshake counts too
		t.Fatal(err)
	}
	cnt.n.Store(0)
	h := e.s.Handler()
	done := make(chan int, 50)
	for i := 0; i < 50; i++ {
		go func() { done <- do(h, req{method: "GET", path: "/api/sales/s1"}).StatusCode() }()
	}
	for i := 0; i < 50; i++ {
		select {
		case st := <-done:
			if st != 200 {
				t.Fatalf("got %d, want 200", st)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("requests did not finish")
		}
	}
	if got := cnt.n.Load(); got != 1 {
		t.Fatalf("got %d Redis commands, want 1", got)
	}
	if got := e.catalog.calls.Load(); got != 1 {
		t.Fatalf("got %d catalog reads, want 1", got)
	}
}

// TestFullCacheKeepsRealSales: ids that are no sale fill the sale cache
// (anyone can send them); a real sale asked for afterwards must still be
// cached, so its admission cap holds and its admissions reach "access".
func TestFullCacheKeepsRealSales(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.UserRate = -1; c.MaxSales = 2 })
	e.sale(t, "real", 100, 2, true)
	h := e.s.Handler()
	for _, id := range []string{"junk1", "junk2"} {
		if r := do(h, req{method: "GET", path: "/api/sales/" + id}); r.StatusCode() != 404 {
			t.Fatalf("GET %s: got %d, want 404", id, r.StatusCode())
		}
	}
	statuses := map[int]int{}
	for i := 0; i < 5; i++ {
		r := do(h, req{method: "POST", path: "/api/sales/real/orders", token: token(t, "u"+strconv.Itoa(i))})
		statuses[r.StatusCode()]++
	}
	if got := e.reserver.calls.Load(); got != 2 {
		t.Fatalf("got %d reserve calls with a full cache, want 2 (the cap); answers %v", got, statuses)
	}
	e.s.flush(context.Background())
	if got, _ := e.primary.HGet(context.Background(), lua.SaleKey("real"), lua.FieldAccess).Int64(); got != 2 {
		t.Fatalf("got access %d on the primary, want 2", got)
	}
	if n := len(e.s.sales); n > 2 {
		t.Fatalf("got %d cached sales, want at most MaxSales (2)", n)
	}
}

// TestHotSlotForgetsDroppedSales: a sale dropped from the cache is not
// served from its lock-free slot afterwards, but loaded again (a stale one
// would keep answering from a state nobody refreshes).
func TestHotSlotForgetsDroppedSales(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.SaleIdle = 100 * time.Millisecond; c.StateRefresh = 10 * time.Millisecond })
	e.sale(t, "s1", 3, 4, false)
	first := e.s.lookup([]byte("s1"))
	if again := e.s.lookup([]byte("s1")); again != first {
		t.Fatal("a second lookup got another sale, want the cached one")
	}
	ctx := context.Background()
	for i := 0; i < 15; i++ {
		e.s.refreshState(ctx)
	}
	if _, ok := e.s.sales["s1"]; ok {
		t.Fatal("the idle sale was not dropped")
	}
	e.setState(t, "s1", "open")
	later := e.s.lookup([]byte("s1"))
	if later == first {
		t.Fatal("after the drop, lookup got the dropped sale from its slot, want a fresh load")
	}
	if st := later.state.Load(); st == nil || !st.start {
		t.Fatalf("fresh load: got state %+v, want the open sale", st)
	}
	if e.s.sales["s1"] != later {
		t.Fatal("the fresh load is not the cached sale")
	}
}
