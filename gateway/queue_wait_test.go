package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/gateway/queueedge"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/internal/testenv/testclock"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/lua"
)

// openFairSale puts the fair sale "fq" with an open queue (no proof of
// work) into rdb and s's cache.
func openFairSale(t *testing.T, s *Server, rdb *redis.Client, cat *fakeCatalog, now time.Time) {
	t.Helper()
	ctx := context.Background()
	if err := lua.Prepare.Run(ctx, rdb, lua.SaleKeys("fq"), 10, 15, 1, 100, "", "fair").Err(); err != nil {
		t.Fatal(err)
	}
	if err := lua.QueueOpen.Run(ctx, rdb, lua.SaleKeys("fq"), strings.Repeat("ab", 32), "00", 0, 60).Err(); err != nil {
		t.Fatal(err)
	}
	starts := now.Add(time.Minute)
	cat.put(flashgate.Sale{ID: "fq", Name: "Fair", PriceCents: 100, Total: 10, StartsAt: &starts, Queue: flashgate.QueueFair})
	s.refreshState(ctx)
	s.lookup([]byte("fq"))
	s.refreshState(ctx)
}

// TestQueueEntryWaitsForReplicas: with WaitAuto an entry is answered only
// once the replica the primary has online holds it. While the replica's
// link is held back the entry answers 503 and stands on the primary;
// entering again once the replica caught up answers it (200), and the
// replica holds it.
func TestQueueEntryWaitsForReplicas(t *testing.T) {
	primary := redistest.Start(t, "--repl-diskless-sync-delay", "0")
	rdb := primary.Client(t)
	link := redistest.StartProxy(t, primary.Addr)
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(link.Port))
	replica.WaitReplica(t)
	rc := replica.Client(t)
	ctx := context.Background()
	if _, ok := testwait.For(10*time.Second, func() bool {
		info, _ := rdb.Info(ctx, "replication").Result()
		return flashgate.OnlineReplicas(info) == 1
	}); !ok {
		t.Fatal("the replica never came online")
	}
	// The replica has acknowledged the primary's offset at least once, so
	// the first entry's WAIT does not also pay for the link's first ack.
	if _, ok := testwait.For(10*time.Second, func() bool {
		n, _ := rdb.Wait(ctx, 1, 200*time.Millisecond).Result()
		return n == 1
	}); !ok {
		t.Fatal("the replica never acknowledged the primary's offset")
	}
	clock := testclock.New(time.Now())
	cat := &fakeCatalog{}
	s, err := New(Config{Primary: rdb, Reserver: &luaReserver{c: rdb}, Catalog: cat, Orders: &fakeOrders{orders: map[string]flashgate.Order{}},
		JWTSecret: testSecret, Logger: discard(), Metrics: prometheus.NewRegistry(), ShutdownDelay: -1, UserRate: -1, Clock: clock,
		WaitTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	openFairSale(t, s, rdb, cat, clock.Now())
	enter := func(user string) (int, string) {
		r := do(s.Handler(), req{method: "POST", path: "/api/sales/fq/queue", token: token(t, user)})
		var v struct{ Ticket string }
		_ = json.Unmarshal(r.Body(), &v)
		return r.StatusCode(), v.Ticket
	}

	if code, tk := enter("alice"); code != 201 || tk == "" {
		t.Fatalf("entry with the replica in step: got %d %q, want 201 and a ticket", code, tk)
	}
	link.Pause()
	if code, tk := enter("bob"); code != 503 || tk != "" {
		t.Fatalf("entry with the replica held back: got %d %q, want 503 and no ticket", code, tk)
	}
	if v, err := rdb.HGet(ctx, lua.QueueKey("fq"), "bob").Result(); err != nil || v != "p" {
		t.Fatalf("bob's entry on the primary after the 503: got %q, %v; want p", v, err)
	}
	if code, _ := enter("bob"); code != 503 {
		t.Fatalf("entering again with the replica still held back: got %d, want 503", code)
	}
	link.Resume()
	var code int
	var tk string
	if _, ok := testwait.For(10*time.Second, func() bool { code, tk = enter("bob"); return code == 200 }); !ok || tk == "" {
		t.Fatalf("entering again after the replica caught up: got %d %q, want 200 and a ticket", code, tk)
	}
	if v, err := rc.HGet(ctx, lua.QueueKey("fq"), "bob").Result(); err != nil || v != "p" {
		t.Errorf("bob's entry on the replica once answered: got %q, %v; want p", v, err)
	}
}

// TestQueueEntryNamesItsQueue: an entry whose queue's commitment in Redis
// is not the one the cache holds (a queue rebuilt meanwhile) answers 503,
// not a ticket of the cached queue; once the cache has read the queue,
// entering again answers the ticket of the queue the entry is in.
func TestQueueEntryNamesItsQueue(t *testing.T) {
	e, _ := fairEnv(t, 0)
	ctx := context.Background()
	other := strings.Repeat("cd", 32)
	if err := e.primary.HSet(ctx, lua.SaleKey("fq"), lua.FieldQueueSeedSHA, other).Err(); err != nil {
		t.Fatal(err)
	}
	enter := func() (int, string) {
		r := do(e.s.Handler(), req{method: "POST", path: "/api/sales/fq/queue", token: token(t, "carol")})
		var v struct{ Ticket string }
		_ = json.Unmarshal(r.Body(), &v)
		return r.StatusCode(), v.Ticket
	}
	if code, tk := enter(); code != 503 || tk != "" {
		t.Fatalf("entry into a queue the cache has not read: got %d %q, want 503 and no ticket", code, tk)
	}
	e.s.refreshState(ctx)
	code, tk := enter()
	if code != 200 || tk == "" {
		t.Fatalf("entering again once the cache read the queue: got %d %q, want 200 and a ticket", code, tk)
	}
	_, ok := e.s.qkeys.ReadTicket([]byte(tk), "fq", "carol")
	entry, _, _ := strings.Cut(tk, ".")
	if !ok || !strings.HasSuffix(entry, ":"+other[:queueedge.TagLen]) {
		t.Errorf("the ticket %q (ok %v) does not name queue %q", tk, ok, other[:queueedge.TagLen])
	}
}

// switchProxy forwards each new TCP connection to the address it points
// at when the connection comes; connections open already stay where they
// are (as with a Sentinel's or a load balancer's name after a failover,
// before the old primary's connections die).
type switchProxy struct {
	ln     net.Listener
	target atomic.Value // string
}

func startSwitchProxy(t *testing.T, target string) *switchProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &switchProxy{ln: ln}
	p.target.Store(target)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b, err := net.Dial("tcp", p.target.Load().(string))
			if err != nil {
				_ = c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, b)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(b, c); _ = b.Close() })
			wg.Go(func() { _, _ = io.Copy(c, b); _ = c.Close() })
		}
	})
	return p
}

// TestQueueEntryShortfallReadsItsOwnServer: an entry whose WAIT fell short
// reads the count of online replicas again on its own connection. Behind
// a name that now leads to another server (a promoted replica, which has
// no replicas), a new connection would read that server's count of none
// and answer 201 for an entry only the old primary, whose replica never
// got it, holds.
func TestQueueEntryShortfallReadsItsOwnServer(t *testing.T) {
	primary := redistest.Start(t, "--repl-diskless-sync-delay", "0")
	link := redistest.StartProxy(t, primary.Addr)
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(link.Port))
	replica.WaitReplica(t)
	other := redistest.Start(t) // the server the name leads to next
	front := startSwitchProxy(t, primary.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: front.ln.Addr().String()})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	if _, ok := testwait.For(10*time.Second, func() bool {
		info, _ := rdb.Info(ctx, "replication").Result()
		return flashgate.OnlineReplicas(info) == 1
	}); !ok {
		t.Fatal("the replica never came online")
	}
	clock := testclock.New(time.Now())
	cat := &fakeCatalog{}
	s, err := New(Config{Primary: rdb, Reserver: &luaReserver{c: rdb}, Catalog: cat, Orders: &fakeOrders{orders: map[string]flashgate.Order{}},
		JWTSecret: testSecret, Logger: discard(), Metrics: prometheus.NewRegistry(), ShutdownDelay: -1, UserRate: -1, Clock: clock,
		WaitTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	openFairSale(t, s, rdb, cat, clock.Now())
	enter := func(user string) int {
		return do(s.Handler(), req{method: "POST", path: "/api/sales/fq/queue", token: token(t, user)}).StatusCode()
	}
	// A first entry with the replica in step, answered once it holds it
	// (a busy machine may need a retry).
	if _, ok := testwait.For(10*time.Second, func() bool { code := enter("alice"); return code == 201 || code == 200 }); !ok {
		t.Fatal("no entry answered with the replica in step")
	}
	link.Pause()
	done := make(chan int, 1)
	go func() { done <- enter("bob") }()
	// While bob's WAIT runs on the old primary, the name moves on.
	if _, ok := testwait.For(5*time.Second, func() bool {
		v, _ := primary.Client(t).HGet(ctx, lua.QueueKey("fq"), "bob").Result()
		return v != ""
	}); !ok {
		t.Fatal("bob's entry never reached the primary")
	}
	front.target.Store(other.Addr)
	if code := <-done; code != 503 {
		t.Errorf("entry the held-back replica lacks, answered after the name moved on: got %d, want 503", code)
	}
}
