package controlplane

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/internal/testenv/testclock"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/lua"
)

// TestFailoverRebuildsBeforeSelling is the deterministic failover: the
// replica's link is held back while half a sale's reserves are made and all
// of them drained to the database; the primary dies (kill -9), the replica
// is promoted and the tiers move to it. The promoted replica knows only the
// first half: selling from it as it is sells the drained units again, to
// the same buyers too. The control plane's next tick must notice the new
// primary and rebuild the sale from the database before it sells again.
func TestFailoverRebuildsBeforeSelling(t *testing.T) {
	ctx := context.Background()
	primary := redistest.Start(t, "--repl-diskless-sync-delay", "0")
	link := redistest.StartProxy(t, primary.Addr)
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(link.Port))
	replica.WaitReplica(t)

	// The tiers' client dials whatever address cur holds: "pointing the
	// tiers at the new primary" is one store.
	var cur atomic.Value
	cur.Store(primary.Addr)
	rdb := redis.NewClient(&redis.Options{
		Addr: "primary", MaxRetries: 2, // a retry dials anew: connections to the dead primary fail
		Dialer: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, cur.Load().(string))
		},
	})
	t.Cleanup(func() { _ = rdb.Close() })
	e := &env{t: t, ctx: ctx, rdb: rdb, db: openDB(t, sqliteDSN(t)), clock: testclock.New(t0)}
	e.rel = &luaReleaser{RDB: rdb}
	svc, err := New(Config{Redis: rdb, Store: e.db, Releaser: e.rel, AdminToken: testToken,
		Clock: e.clock, Logger: quietLogger(), PersistWait: -1, NodeID: "test"})
	if err != nil {
		t.Fatal(err)
	}
	e.svc = svc
	lastResync := time.Now()
	tick := func() { svc.tick(ctx, &lastResync) }

	const total = 10
	e.openSale("f", total, 1)
	tick() // leads, and marks the sale's primary

	wins := map[string]int{} // user → reserves answered with an order
	buy := func(user string) {
		if code, _ := e.reserve("f", user); code == lua.ReserveOK {
			wins[user]++
		}
	}
	for i := range total / 2 {
		buy("u" + strconv.Itoa(i))
	}
	if err := rdb.Wait(ctx, 1, 5000).Err(); err != nil {
		t.Fatalf("WAIT: %v", err)
	}
	link.Pause()
	for i := total / 2; i < total; i++ {
		buy("u" + strconv.Itoa(i))
	}
	if got := len(e.persist("f")); got != total {
		t.Fatalf("drained %d orders, want %d", got, total)
	}

	// kill -9 the primary, promote the replica, point the tiers at it.
	primary.Stop()
	rc := replica.Client(t)
	if err := rc.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatalf("REPLICAOF NO ONE: %v", err)
	}
	cur.Store(replica.Addr)
	if got := field(t, rc, "f", lua.FieldBooked); got != total/2 {
		t.Fatalf("promoted replica's booked: got %d, want %d (the held-back half lost)", got, total/2)
	}

	// The first tick on the new primary, before the next re-sync is due:
	// it must notice the new primary and stop the sale from selling.
	lastResync = time.Now()
	tick()
	buyAgain := func() {
		for i := range total {
			buy("u" + strconv.Itoa(i))
		}
		for i := range total {
			buy("n" + strconv.Itoa(i))
		}
	}
	buyAgain()
	// The sinks drain the promoted replica's stream (the first half, whose
	// deletes were held back too, and whatever sold since); re-syncs follow.
	e.persist("f")
	for range 3 {
		lastResync = lastResync.Add(-time.Hour) // due
		tick()
		e.persist("f")
	}
	buyAgain()
	e.persist("f")
	if _, _, err := svc.Resync(ctx, "f"); err != nil {
		t.Fatalf("Resync: %v", err)
	}

	live, err := e.db.LiveOrders(ctx, "f")
	if err != nil {
		t.Fatal(err)
	}
	units := int64(0)
	for _, o := range live {
		units += o.Quantity
	}
	if units > total {
		t.Errorf("live units after the failover: got %d, want at most %d (oversold)", units, total)
	}
	for user, n := range wins {
		if n > 1 {
			t.Errorf("user %s got %d orders, want at most 1", user, n)
		}
	}
	if got := field(t, rc, "f", lua.FieldBooked); got > total {
		t.Errorf("booked: got %d, want at most %d", got, total)
	}
}

// TestClusterFailoverDetected moves a sale's slot to another primary on a
// real Redis Cluster (CLUSTER FAILOVER on the replica of the sale's primary)
// and checks that the next tick notices the new owner and rebuilds the sale
// from the database: paused one pass with its buyers restored, then open.
func TestClusterFailoverDetected(t *testing.T) {
	e := newEnvOn(t, "own-cluster", sqliteDSN(t), nil)
	ctx, cl, cc, db, svc := e.ctx, e.cluster, e.rdb.(*redis.ClusterClient), e.db, e.svc
	lastResync := time.Now()
	tick := func() { svc.tick(ctx, &lastResync) }
	e.openSale("cf", 10, 1)
	tick()

	keys := lua.ReserveKeys("cf")
	orders := map[string]string{}
	for i := range 4 {
		user := "u" + strconv.Itoa(i)
		id := "o" + strconv.Itoa(i)
		if v, err := lua.Reserve.Run(ctx, cc, keys, id, user, 1, t0.UnixMilli(), "cf").Slice(); err != nil || v[0].(int64) != lua.ReserveOK {
			t.Fatalf("reserve: %v, %v", v, err)
		}
		orders[user] = id
	}
	// Drain as the order sink does: rows in, entries gone.
	var rows []flashgate.Order
	for user, id := range orders {
		rows = append(rows, flashgate.Order{ID: id, SaleID: "cf", UserID: user, Quantity: 1, PriceCents: 500,
			Status: flashgate.StatusPendingPayment, CreatedAt: t0})
	}
	if _, err := db.InsertOrders(ctx, rows); err != nil {
		t.Fatal(err)
	}
	if err := cc.Del(ctx, lua.OrdersKey("cf")).Err(); err != nil {
		t.Fatal(err)
	}

	replica := clusterFailover(t, ctx, cl, cc, lua.SaleKey("cf"))
	// Make the new owner forget a buyer, as an unreplicated write would.
	if err := cc.HDel(ctx, lua.BuyersKey("cf"), "u3").Err(); err != nil {
		t.Fatal(err)
	}

	// The next tick notices the new primary; the stream is drained, so it
	// rebuilds the sale and marks it with the new primary's id.
	newID := ""
	if info, err := replica.Info(ctx, "replication").Result(); err == nil {
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "master_replid:"); ok {
				newID = v
			}
		}
	}
	// No periodic re-sync while waiting (it would reopen the rebuilt sale
	// in the same tick on a slow machine): only the watch runs.
	lastResync = time.Now().Add(time.Hour)
	testwait.Eventually(t, 10*time.Second, func() bool {
		tick()
		marker, _ := cc.Get(ctx, lua.PrimaryKey("cf")).Result()
		return newID != "" && marker == newID
	}, "the sale to be rebuilt on the new primary")
	start, _ := cc.HGet(ctx, lua.SaleKey("cf"), lua.FieldStart).Result()
	if start != "0" {
		t.Errorf("start right after the rebuild: got %q, want \"0\" (paused one pass)", start)
	}
	if got, _ := cc.HGet(ctx, lua.BuyersKey("cf"), "u3").Result(); got != orders["u3"] {
		t.Errorf("buyer u3 after the rebuild: got %q, want %q", got, orders["u3"])
	}
	if got, _ := cc.HGet(ctx, lua.SaleKey("cf"), lua.FieldBooked).Int64(); got != 4 {
		t.Errorf("booked after the rebuild: got %d, want 4", got)
	}
	for range 2 {
		lastResync = lastResync.Add(-time.Hour)
		tick()
	}
	if start, _ := cc.HGet(ctx, lua.SaleKey("cf"), lua.FieldStart).Result(); start != "1" {
		t.Errorf("start after the next re-sync: got %q, want \"1\" (reopened)", start)
	}
	if v, err := lua.Reserve.Run(ctx, cc, keys, "o9", "u3", 1, t0.UnixMilli(), "cf").Slice(); err != nil || v[0].(int64) != lua.ReservePurchased {
		t.Errorf("u3 buying again: got %v, %v; want already purchased", v, err)
	}
}

// clusterFailover promotes the replica of key's primary with CLUSTER
// FAILOVER (a clean one: the replica is in sync first) and waits until the
// client routes key to it; it returns a client of the new primary.
func clusterFailover(t *testing.T, ctx context.Context, cl *redistest.Cluster, cc *redis.ClusterClient, key string) *redis.Client {
	t.Helper()
	old, err := cc.MasterForKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var replica *redis.Client
	var mu sync.Mutex
	_ = cc.ForEachSlave(ctx, func(ctx context.Context, c *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		info, _ := c.Info(ctx, "replication").Result()
		if strings.Contains(info, "master_port:"+strconv.Itoa(cl.Node(old.Options().Addr).Port)+"\r\n") {
			replica = c
		}
		return nil
	})
	if replica == nil {
		t.Fatalf("no replica of %s's primary", key)
	}
	if err := replica.Do(ctx, "CLUSTER", "FAILOVER").Err(); err != nil {
		t.Fatalf("CLUSTER FAILOVER: %v", err)
	}
	testwait.Eventually(t, 10*time.Second, func() bool {
		cc.ReloadState(ctx)
		m, err := cc.MasterForKey(ctx, key)
		return err == nil && m.Options().Addr == replica.Options().Addr
	}, "the replica to own %s's slot", key)
	return replica
}
