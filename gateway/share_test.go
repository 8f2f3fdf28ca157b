package gateway

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/flashgate/flashgate/internal/testenv/testclock"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/lua"
)

// peer builds a second gateway on e's Redis with the same config changes.
func (e *env) peer(t *testing.T, mod func(*Config)) *Server {
	t.Helper()
	cfg := e.s.cfg
	cfg.Metrics = nil
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func shareLimits(t *testing.T, s *Server, sale string) (rate.Limit, int) {
	t.Helper()
	e := s.lookup([]byte(sale))
	if e.limiter == nil {
		t.Fatalf("sale %s has no limiter", sale)
	}
	return e.limiter.Limit(), e.limiter.Burst()
}

// TestShareSplitsSaleRate: two gateways on one Redis each take half of
// SaleRate and SaleBurst, for sales cached before and after the second one
// appeared; a gateway that stops heartbeating is dropped after three
// intervals, one that closes at once.
func TestShareSplitsSaleRate(t *testing.T) {
	clk := testclock.New(time.Unix(1_800_000_000, 0))
	mod := func(c *Config) { c.SaleRate = 100; c.SaleBurst = 9; c.ShareEvery = time.Second; c.Clock = clk }
	e := newEnv(t, mod)
	e.sale(t, "early", 10, 100, true)
	e.sale(t, "late", 10, 100, true)
	a := e.s
	a.share.id = "a"
	ctx := context.Background()

	a.heartbeat(ctx)
	if r, b := shareLimits(t, a, "early"); r != 100 || b != 9 {
		t.Fatalf("one gateway: got rate %v burst %d, want 100 and 9", r, b)
	}

	b := e.peer(t, mod)
	b.share.id = "b"
	b.heartbeat(ctx)
	a.heartbeat(ctx)
	for _, tc := range []struct {
		s    *Server
		sale string
	}{{a, "early"}, {a, "late"}, {b, "early"}} {
		if r, burst := shareLimits(t, tc.s, tc.sale); r != 50 || burst != 5 {
			t.Errorf("two gateways, %s on %s: got rate %v burst %d, want 50 and 5", tc.sale, tc.s.share.id, r, burst)
		}
	}

	// b stops heartbeating: still counted for 3 intervals, then dropped.
	clk.Add(3 * time.Second)
	a.heartbeat(ctx)
	if r, _ := shareLimits(t, a, "early"); r != 50 {
		t.Errorf("b silent for 3 intervals: got rate %v, want 50", r)
	}
	clk.Add(10 * time.Millisecond)
	a.heartbeat(ctx)
	if r, burst := shareLimits(t, a, "early"); r != 100 || burst != 9 {
		t.Errorf("b silent past 3 intervals: got rate %v burst %d, want 100 and 9", r, burst)
	}
	n, err := e.primary.ZCard(ctx, lua.GatewaysKey()).Result()
	if err != nil || n != 1 {
		t.Errorf("live set: got %d members (%v), want 1", n, err)
	}
	ttl, err := e.primary.PTTL(ctx, lua.GatewaysKey()).Result()
	if err != nil || ttl <= 0 {
		t.Errorf("live set TTL: got %v (%v), want one", ttl, err)
	}
}

// TestShareStartAndClose runs the real loop: a gateway takes its share in
// Start, before serving, and leaves the set when it closes, so the other
// one takes the whole rate again within an interval.
func TestShareStartAndClose(t *testing.T) {
	mod := func(c *Config) { c.SaleRate = 1000; c.ShareEvery = 20 * time.Millisecond }
	e := newEnv(t, mod)
	e.sale(t, "s", 10, 100, true)
	e.s.Start()
	b := e.peer(t, mod)
	b.Start()
	if r, burst := shareLimits(t, b, "s"); r != 500 || burst != 500 {
		t.Fatalf("b right after Start: got rate %v burst %d, want 500 and 500", r, burst)
	}
	if _, ok := testwait.For(time.Second, func() bool { r, _ := shareLimits(t, e.s, "s"); return r == 500 }); !ok {
		t.Fatalf("a did not take half within a second: it counts %d gateways", e.s.share.live.Load())
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	// b leaves the set as it closes, not only when its entry grows stale.
	if n := e.primary.ZCard(context.Background(), lua.GatewaysKey()).Val(); n != 1 {
		t.Errorf("right after b closed: %d gateways announced, want 1", n)
	}
	testwait.Eventually(t, time.Second, func() bool { r, _ := shareLimits(t, e.s, "s"); return r == 1000 },
		"a to take the whole rate 1000 after b closed")
}

// TestShareOffAndRedisDown: without ShareEvery nothing is written and the
// gateway takes the whole rate; when Redis fails, the last share stays.
func TestShareOffAndRedisDown(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.SaleRate = 100 })
	e.sale(t, "s", 10, 100, true)
	e.s.Start()
	if n, _ := e.primary.Exists(context.Background(), lua.GatewaysKey()).Result(); n != 0 {
		t.Errorf("sharing off: %s exists", lua.GatewaysKey())
	}
	if r, _ := shareLimits(t, e.s, "s"); r != 100 {
		t.Errorf("sharing off: got rate %v, want 100", r)
	}

	f := newEnv(t, func(c *Config) { c.SaleRate = 100; c.ShareEvery = time.Second; c.RedisTimeout = 200 * time.Millisecond })
	f.sale(t, "s", 10, 100, true)
	f.s.share.id = "f"
	f.s.setLive(4)
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = dead.Close() })
	f.s.cfg.Primary = dead
	f.s.heartbeat(context.Background())
	if r, _ := shareLimits(t, f.s, "s"); r != 25 {
		t.Errorf("redis down: got rate %v, want the last share 25", r)
	}
}
