package main

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/lua"
)

// commandCalls returns, for each primary of cc, cmdstat_<cmd>'s calls
// (INFO commandstats) for each of cmds.
func commandCalls(t *testing.T, ctx context.Context, cc *redis.ClusterClient, cmds ...string) map[string]map[string]int64 {
	t.Helper()
	out := map[string]map[string]int64{}
	var mu sync.Mutex
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			return err
		}
		st := redistest.CommandStats(info)
		m := map[string]int64{}
		for _, cmd := range cmds {
			m[cmd] = st[cmd].Calls
		}
		mu.Lock()
		out[c.Options().Addr] = m
		mu.Unlock()
		return nil
	})
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	return out
}

// checkRows checks the database after a crowd on a sale (bucketed or not): at
// most total live units, nobody twice, every 201 of the crowds one row of
// its buyer, and, when strict, every row a 201's; it returns the live units.
// (Across a failover a reserve can be made and replicated while its answer
// is an error, a WAIT that timed out: a row no 201 announced.)
func checkRows(t *testing.T, s *system, sale string, total int64, answered map[string]string, strict bool) int64 {
	t.Helper()
	live, err := s.db.LiveOrders(context.Background(), sale)
	if err != nil {
		t.Fatal(err)
	}
	byUser := map[string]int{}
	rows := map[string]string{}
	var units int64
	for _, o := range live {
		byUser[o.UserID]++
		rows[o.ID] = o.UserID
		units += o.Quantity
		if u, ok := answered[o.ID]; strict && (!ok || u != o.UserID) {
			t.Errorf("row %s of %s: no 201 answered it", o.ID, o.UserID)
		}
	}
	if units > total {
		t.Errorf("live units: got %d, want at most %d (oversold)", units, total)
	}
	for u, n := range byUser {
		if n > 1 {
			t.Errorf("user %s holds %d live orders, want at most 1", u, n)
		}
	}
	lost := 0
	for id, u := range answered {
		if rows[id] != u {
			lost++
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d answers 201 have no row, want 0", lost, len(answered))
	}
	return units
}

// TestServeBucketedSaleOnCluster runs `serve` (every tier, wired as in
// production) on a real Redis Cluster of 3 primaries: one sale of 1,000
// units in 3 buckets and 20,000 distinct buyers over HTTP. Exactly 1,000
// sell, nobody twice, every 201 is one row, and INFO commandstats on each
// primary shows the reserve scripts spread over the three, each within ±15%
// of a third. A reserve script is counted by its one HGET (the buyer's
// entry): EVALSHA counts the gateways' batched counters (lua.Tally, on the
// primary of the sale's own hash) too, while the gateways' reads go to
// replicas and the only other HGET on a primary is a re-sync's, once a
// second per bucket. The EVALSHA and XADD calls are logged beside it. The
// count needs one script per reserve, so this serve sends each alone
// (--reserve-batch 1; batches read their buyers with one HMGET);
// TestServeBucketedSaleFailover runs with batches.
func TestServeBucketedSaleOnCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	cl := redistest.StartCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var errb bytes.Buffer
	cfg, s, c, public, admin := startFailoverServe(ctx, t, cl.URL(), "buckets", &errb, "--reserve-batch", "1")
	cc := c.primary.(*redis.ClusterClient)

	const sale, units, users = "hot3", 1000, 20000
	created, err := s.cp.CreateSale(ctx, flashgate.Sale{ID: sale, Name: sale, PriceCents: 100, Total: units, Buckets: 3})
	if err != nil {
		t.Fatal(err)
	}
	l := lua.Layout{Sale: sale, Salts: created.BucketSalts}
	owners := map[string]bool{}
	for _, tag := range l.Tags() {
		m, err := cc.MasterForKey(ctx, lua.SaleKey(tag))
		if err != nil {
			t.Fatal(err)
		}
		owners[m.Options().Addr] = true
	}
	if len(owners) != 3 {
		t.Fatalf("the 3 buckets are on %d primaries, want 3", len(owners))
	}
	if err := s.cp.Start(ctx, sale); err != nil {
		t.Fatal(err)
	}
	if err := waitOpen(ctx, public, sale, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	before := commandCalls(t, ctx, cc, "hget", "evalsha", "xadd")
	r, err := runCrowdSpec(ctx, crowdSpec{Target: public, Sale: sale, Secret: []byte(cfg.JWTSecret),
		UserPrefix: "b-", Users: users, Concurrency: 64, Quantity: 1, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("crowd: %v", err)
	}
	after := commandCalls(t, ctx, cc, "hget", "evalsha", "xadd")
	t.Logf("crowd: %d requests in %s: %v", r.Requests, r.Elapsed.Round(time.Millisecond), r.ByAnswer)
	if r.Created() != units {
		t.Errorf("answers 201: got %d, want %d", r.Created(), units)
	}
	var all int64
	for addr := range after {
		all += after[addr]["hget"] - before[addr]["hget"]
	}
	for addr := range after {
		d := map[string]int64{}
		for _, cmd := range []string{"hget", "evalsha", "xadd"} {
			d[cmd] = after[addr][cmd] - before[addr][cmd]
		}
		t.Logf("primary %s: reserve scripts (HGET) %d of %d, EVALSHA %d, XADD %d", addr, d["hget"], all, d["evalsha"], d["xadd"])
		if third := float64(all) / 3; float64(d["hget"]) < 0.85*third || float64(d["hget"]) > 1.15*third {
			t.Errorf("primary %s ran %d of %d reserve scripts, want within ±15%% of a third", addr, d["hget"], all)
		}
	}
	if all < units {
		t.Errorf("reserve scripts: got %d, want at least %d", all, units)
	}
	f, err := waitDrained(ctx, func() (adminFigures, error) { return getAdminFigures(admin, cfg.AdminToken, sale) }, 30*time.Second)
	if err != nil {
		t.Fatalf("drain: %v", err)
	}
	if got := checkRows(t, s, sale, units, r.Orders, true); got != units {
		t.Errorf("live units: got %d, want %d", got, units)
	}
	if f.Booked != units {
		t.Errorf("booked: got %d, want %d", f.Booked, units)
	}
}

// TestServeBucketedSaleFailover is TestServeBucketedSaleOnCluster with the
// primary of bucket 0 killed (kill -9) in the middle of the sale, with
// --wait-replicas 1 and --sink-wait-replicas 1. A first crowd of 3,000
// buyers arriving at 600 a second spans the kill; its replica takes over,
// the killed node comes back as a replica, and the control plane rebuilds
// bucket 0 on its new primary while the other buckets sell on. A second
// crowd of 17,000 new buyers then buys what is left. Across the 20,000:
// no oversell, nobody twice, every 201 one row, and in the end exactly the
// 1,000 units sold.
func TestServeBucketedSaleFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	cl := redistest.StartCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var errb bytes.Buffer
	cfg, s, c, public, admin := startFailoverServe(ctx, t, cl.URL(), "bfail", &errb,
		"--wait-replicas", "1", "--sink-wait-replicas", "1", "--sink-claim-idle", "1s")
	cc := c.primary.(*redis.ClusterClient)

	const sale, units = "hotfo", 1000
	created, err := s.cp.CreateSale(ctx, flashgate.Sale{ID: sale, Name: sale, PriceCents: 100, Total: units, Buckets: 3, AdmitRatio: 3})
	if err != nil {
		t.Fatal(err)
	}
	l := lua.Layout{Sale: sale, Salts: created.BucketSalts}
	tag0 := l.Tag(0)
	m, err := cc.MasterForKey(ctx, lua.SaleKey(tag0))
	if err != nil {
		t.Fatal(err)
	}
	victim := cl.Node(m.Options().Addr)
	if err := s.cp.Start(ctx, sale); err != nil {
		t.Fatal(err)
	}
	if err := waitOpen(ctx, public, sale, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	// The control plane's leader marks every slot's primary.
	testwait.Eventually(t, 10*time.Second, func() bool {
		v, _ := cc.Get(ctx, lua.PrimaryKey(tag0)).Result()
		return v != ""
	}, "bucket 0's primary marker")
	old, _ := cc.Get(ctx, lua.PrimaryKey(tag0)).Result()

	killed := make(chan struct{})
	go func() {
		// Not a synchronisation: the kill falls 1.5 s into the crowd, on purpose.
		time.Sleep(1500 * time.Millisecond)
		victim.Stop() // SIGKILL
		close(killed)
	}()
	r1, err := runCrowdSpec(ctx, crowdSpec{Target: public, Sale: sale, Secret: []byte(cfg.JWTSecret),
		UserPrefix: "f1-", Users: 3000, Concurrency: 64, Rate: 600, Quantity: 1, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("crowd 1: %v", err)
	}
	<-killed
	t.Logf("crowd 1 (the kill at 1.5s): %v", r1.ByAnswer)
	// The promoted replica has no replica of its own: reserves with WAIT
	// and the sink's commits wait until the old primary is back as one.
	testwait.Eventually(t, 20*time.Second, func() bool {
		m, err := cc.MasterForKey(ctx, lua.SaleKey(tag0))
		cc.ReloadState(ctx)
		return err == nil && m.Options().Addr != victim.Addr
	}, "a new primary for bucket 0")
	victim.Restart(t)
	cl.WaitOK(t)
	if _, ok := testwait.For(30*time.Second, func() bool {
		cc.ReloadState(ctx)
		marker, _ := cc.Get(ctx, lua.PrimaryKey(tag0)).Result()
		// Rebuilt is not enough: the bucket reopens one re-sync later,
		// and a crowd sent before that finds it paused (503) while the
		// other buckets sell out, leaving its units unsold.
		open, _ := cc.HGet(ctx, lua.SaleKey(tag0), lua.FieldStart).Result()
		f, err := getAdminFigures(admin, cfg.AdminToken, sale)
		return marker != "" && marker != old && open == "1" && err == nil && f.StreamBacklog == 0
	}); !ok {
		t.Fatalf("bucket 0 not rebuilt and reopened on its new primary within 30s\n%s", errb.String())
	}
	r2, err := runCrowdSpec(ctx, crowdSpec{Target: public, Sale: sale, Secret: []byte(cfg.JWTSecret),
		UserPrefix: "f2-", Users: 17000, Concurrency: 64, Quantity: 1, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("crowd 2: %v", err)
	}
	t.Logf("crowd 2 (after the rebuild): %v", r2.ByAnswer)
	if _, err := waitDrained(ctx, func() (adminFigures, error) { return getAdminFigures(admin, cfg.AdminToken, sale) }, 30*time.Second); err != nil {
		t.Fatalf("drain: %v", err)
	}
	answered := map[string]string{}
	for _, r := range []*crowdResult{r1, r2} {
		for id, u := range r.Orders {
			answered[id] = u
		}
	}
	got := checkRows(t, s, sale, units, answered, false)
	t.Logf("201: %d, live units: %d", len(answered), got)
	if got != units {
		t.Errorf("live units after both crowds: got %d, want %d (every unit sold once)", got, units)
	}
}
