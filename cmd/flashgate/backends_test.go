package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/lua"
)

// TestServeOnRedisBackends runs `serve` (every tier, wired as in
// production) on a real Redis Cluster and on a real Sentinel set-up: sales
// on every primary each sell exactly their stock to a crowd over HTTP,
// every order reaches the database, and the gateways' state reads are
// served by replicas (INFO commandstats on each node).
func TestServeOnRedisBackends(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	cases := []struct {
		name  string
		start func(t *testing.T) (url string, primaries, replicas []string)
	}{
		{"cluster", func(t *testing.T) (string, []string, []string) {
			c := redistest.StartCluster(t)
			var p, r []string
			for _, s := range c.Nodes {
				info, _ := s.Client(t).Info(context.Background(), "replication").Result()
				if strings.Contains(info, "role:master") {
					p = append(p, s.Addr)
				} else {
					r = append(r, s.Addr)
				}
			}
			return c.URL(), p, r
		}},
		{"sentinel", func(t *testing.T) (string, []string, []string) {
			s := redistest.StartSentinel(t)
			return s.URL(), []string{s.Primary.Addr}, []string{s.Replica.Addr}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			url, primaries, replicas := tc.start(t)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var errb bytes.Buffer
			cfg, err := parseConfig("serve", []string{"--redis", url,
				"--db", "sqlite://" + filepath.Join(t.TempDir(), "fg.db"),
				"--jwt-secret", "backend-secret", "--admin-token", "backend-admin",
				"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
				"--state-refresh", "20ms", "--log-level", "error"}, &errb, env(nil))
			if err != nil {
				t.Fatalf("parseConfig: %v (%s)", err, errb.String())
			}
			st := newStack(cfg, &errb)
			defer st.close()
			s, c, g, public, admin, err := serveAll(ctx, st, cfg)
			if err != nil {
				t.Fatalf("serveAll: %v", err)
			}
			defer func() { g.cancel(); _ = g.wait() }()

			// One sale per primary.
			sales := map[string]string{} // primary → sale
			for i := 0; len(sales) < len(primaries) && i < 1000; i++ {
				id := "b" + strconv.Itoa(i)
				addr := primaries[0]
				if cc, ok := c.primary.(*redis.ClusterClient); ok {
					m, err := cc.MasterForKey(ctx, lua.SaleKey(id))
					if err != nil {
						t.Fatalf("MasterForKey: %v", err)
					}
					addr = m.Options().Addr
				}
				if _, seen := sales[addr]; !seen {
					sales[addr] = id
				}
			}
			const units, users = 15, 120
			for _, id := range sales {
				if _, err := s.cp.CreateSale(ctx, flashgate.Sale{ID: id, Name: id, PriceCents: 100, Total: units, AdmitRatio: 3}); err != nil {
					t.Fatalf("CreateSale %s: %v", id, err)
				}
				if err := s.cp.Start(ctx, id); err != nil {
					t.Fatalf("Start %s: %v", id, err)
				}
			}
			before := calls(t, replicas, "hmget")
			for _, id := range sales { // the gateway sees the sales open
				if err := waitOpen(ctx, public, id, 20*time.Second); err != nil {
					t.Fatalf("sale %s: %v", id, err)
				}
			}
			for addr, id := range sales {
				r, err := runCrowdSpec(ctx, crowdSpec{Target: public, Sale: id, Secret: []byte(cfg.JWTSecret),
					UserPrefix: id + "-", Users: users, Concurrency: 16, Quantity: 1, Timeout: 5 * time.Second})
				if err != nil {
					t.Fatalf("crowd %s: %v", id, err)
				}
				if r.Created() != units {
					t.Errorf("sale %s on %s: got %d answers 201 (%v), want %d", id, addr, r.Created(), r.ByAnswer, units)
				}
				if _, err := waitDrained(ctx, func() (adminFigures, error) { return getAdminFigures(admin, cfg.AdminToken, id) }, 20*time.Second); err != nil {
					t.Fatalf("drain %s: %v", id, err)
				}
				// Figures read after the drain: a status reads the database
				// before the stream, so the one that found the stream empty
				// may predate the sink's last commit.
				f, err := getAdminFigures(admin, cfg.AdminToken, id)
				if err != nil {
					t.Fatalf("figures %s: %v", id, err)
				}
				if f.Booked != units || f.Orders.Persisted != units {
					t.Errorf("sale %s: booked %d, persisted %d; want %d and %d", id, f.Booked, f.Orders.Persisted, units, units)
				}
			}
			after := calls(t, replicas, "hmget")
			served := int64(0)
			for _, a := range replicas {
				served += after[a] - before[a]
			}
			if served == 0 {
				t.Errorf("replicas served no state reads (HMGET calls before %v, after %v)", before, after)
			}
			t.Logf("state reads served by replicas: %v → %v", before, after)
		})
	}
}

// calls returns cmdstat_<cmd>'s calls on each of addrs.
func calls(t *testing.T, addrs []string, cmd string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, addr := range addrs {
		c := redis.NewClient(&redis.Options{Addr: addr})
		out[addr] = redistest.Commands(t, c)[cmd].Calls
		_ = c.Close()
	}
	return out
}

// startFailoverServe runs every tier of `flashgate serve` on the Redis at
// url, with the flags the failover tests share (secrets named after name,
// log level warn into errb) and extra, until the test ends.
func startFailoverServe(ctx context.Context, t *testing.T, url, name string, errb *bytes.Buffer, extra ...string) (cfg *Config, s *system, c conns, public, admin string) {
	t.Helper()
	args := append([]string{"--redis", url,
		"--db", "sqlite://" + filepath.Join(t.TempDir(), "fg.db"),
		"--jwt-secret", name + "-secret", "--admin-token", name + "-admin",
		"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
		"--state-refresh", "20ms", "--log-level", "warn"}, extra...)
	cfg, err := parseConfig("serve", args, errb, env(nil))
	if err != nil {
		t.Fatalf("parseConfig: %v", err)
	}
	st := newStack(cfg, errb)
	t.Cleanup(st.close)
	s, c, g, public, admin, err := serveAll(ctx, st, cfg)
	if err != nil {
		t.Fatalf("serveAll: %v", err)
	}
	t.Cleanup(func() { g.cancel(); _ = g.wait() })
	return cfg, s, c, public, admin
}

// TestServeClusterFailover kills (kill -9) the primary of a sale's slot in
// the middle of a crowd on a real Redis Cluster, with --wait-replicas 1 and
// --sink-wait-replicas 1. The replica takes over; afterwards no unit is
// sold twice (live rows ≤ total), nobody holds two orders, and every 201
// the crowd saw is a row: with WAIT, an answered reserve was on the replica
// that took over.
func TestServeClusterFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	cl := redistest.StartCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var errb bytes.Buffer
	cfg, s, c, public, admin := startFailoverServe(ctx, t, cl.URL(), "failover", &errb,
		"--wait-replicas", "1", "--sink-wait-replicas", "1", "--sink-claim-idle", "1s")

	const sale, units, users = "fo", 200, 300
	if _, err := s.cp.CreateSale(ctx, flashgate.Sale{ID: sale, Name: sale, PriceCents: 100, Total: units, AdmitRatio: 5}); err != nil {
		t.Fatal(err)
	}
	if err := s.cp.Start(ctx, sale); err != nil {
		t.Fatal(err)
	}
	m, err := c.primary.(*redis.ClusterClient).MasterForKey(ctx, lua.SaleKey(sale))
	if err != nil {
		t.Fatal(err)
	}
	victim := cl.Node(m.Options().Addr)
	testwait.Eventually(t, 10*time.Second, func() bool { return saleOpen(public, sale) }, "the gateway to see the sale open")

	killed := make(chan struct{})
	go func() {
		// Not a synchronisation: the kill falls 1.5 s into the crowd, on purpose.
		time.Sleep(1500 * time.Millisecond)
		victim.Stop() // SIGKILL
		close(killed)
	}()
	// 300 buyers arriving at 60 a second: the crowd spans the failover.
	r, err := runCrowdSpec(ctx, crowdSpec{Target: public, Sale: sale, Secret: []byte(cfg.JWTSecret),
		UserPrefix: "fo-", Users: users, Concurrency: 32, Rate: 60, Quantity: 1, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("crowd: %v", err)
	}
	<-killed
	// The promoted replica has no replica of its own: the order sink, which
	// commits only what a replica holds, waits until the old primary is
	// back (as a replica of the new one). It comes back once its replica
	// has taken over the slot.
	cc := c.primary.(*redis.ClusterClient)
	testwait.Eventually(t, 30*time.Second, func() bool {
		cc.ReloadState(ctx)
		nm, err := cc.MasterForKey(ctx, lua.SaleKey(sale))
		return err == nil && nm.Options().Addr != victim.Addr
	}, "the replica to take over the sale's slot")
	victim.Restart(t)
	cl.WaitOK(t)
	t.Logf("crowd answers: %v", r.ByAnswer)

	// Wait until the stream is drained and the control plane has rebuilt
	// the sale on the new primary.
	var (
		f       adminFigures
		ferr    error
		rebuilt bool
	)
	if _, ok := testwait.For(30*time.Second, func() bool {
		f, ferr = getAdminFigures(admin, cfg.AdminToken, sale)
		marker, _ := c.primary.Get(ctx, lua.PrimaryKey(sale)).Result()
		nm, _ := cc.MasterForKey(ctx, lua.SaleKey(sale))
		rebuilt = false
		if nm != nil && marker != "" {
			info, _ := nm.Info(ctx, "replication").Result()
			rebuilt = strings.Contains(info, "master_replid:"+marker+"\r\n")
		}
		return ferr == nil && f.StreamBacklog == 0 && rebuilt
	}); !ok {
		t.Fatalf("sale not drained and rebuilt after the failover: %+v, %v, rebuilt %v\n%s", f, ferr, rebuilt, errb.String())
	}
	// With WAIT, an answered reserve was on the replica that took over:
	// every 201 is a row.
	sold := checkRows(t, s, sale, units, r.Orders, false)
	t.Logf("201: %d, live rows: %d units", len(r.Orders), sold)
}

// TestServeSentinelFailover kills (kill -9) the primary of a Sentinel
// set-up in the middle of a crowd. Sentinel promotes the replica, every tier
// follows it, and the control plane rebuilds the sale on the new primary
// before it sells again: no unit is sold twice, and a second crowd sells
// what is left exactly.
func TestServeSentinelFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	sen := redistest.StartSentinel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var errb bytes.Buffer
	cfg, s, c, public, admin := startFailoverServe(ctx, t, sen.URL(), "sentinel", &errb)

	const sale, units = "sf", 150
	if _, err := s.cp.CreateSale(ctx, flashgate.Sale{ID: sale, Name: sale, PriceCents: 100, Total: units, AdmitRatio: 5}); err != nil {
		t.Fatal(err)
	}
	if err := s.cp.Start(ctx, sale); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 10*time.Second, func() bool { return saleOpen(public, sale) }, "the gateway to see the sale open")
	go func() {
		// Not a synchronisation: the kill falls a second into the crowd, on purpose.
		time.Sleep(time.Second)
		sen.Primary.Stop() // SIGKILL
	}()
	crowd := func(prefix string, users int) *crowdResult {
		r, err := runCrowdSpec(ctx, crowdSpec{Target: public, Sale: sale, Secret: []byte(cfg.JWTSecret),
			UserPrefix: prefix, Users: users, Concurrency: 16, Rate: 60, Quantity: 1, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatalf("crowd: %v", err)
		}
		t.Logf("crowd %s answers: %v", prefix, r.ByAnswer)
		return r
	}
	first := crowd("a-", 200)

	// Sentinel promotes the replica; the control plane marks the sale with
	// the new primary's id once it has rebuilt it.
	rc := sen.Replica.Client(t)
	var (
		f    adminFigures
		ferr error
	)
	if _, ok := testwait.For(40*time.Second, func() bool {
		info, _ := rc.Info(ctx, "replication").Result()
		marker, _ := c.primary.Get(ctx, lua.PrimaryKey(sale)).Result()
		f, ferr = getAdminFigures(admin, cfg.AdminToken, sale)
		return strings.Contains(info, "role:master") && marker != "" && strings.Contains(info, "master_replid:"+marker+"\r\n") &&
			ferr == nil && f.StreamBacklog == 0 && f.State == "open"
	}); !ok {
		t.Fatalf("no rebuild on the promoted replica: figures %+v, %v\n%s", f, ferr, errb.String())
	}
	// The rebuilt sale reopens one re-sync later: wait for its start flag
	// on the new primary and for the gateway to see it open.
	testwait.Eventually(t, 10*time.Second, func() bool {
		start, _ := c.primary.HGet(ctx, lua.SaleKey(sale), lua.FieldStart).Result()
		return start == "1" && saleOpen(public, sale)
	}, "the rebuilt sale to reopen")
	second := crowd("b-", 300)
	if _, err := waitDrained(ctx, func() (adminFigures, error) { return getAdminFigures(admin, cfg.AdminToken, sale) }, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	live, err := s.db.LiveOrders(ctx, sale)
	if err != nil {
		t.Fatal(err)
	}
	if len(live) != units {
		t.Errorf("live rows: got %d, want exactly %d (the 201s: %d before and %d after the failover)",
			len(live), units, first.Created(), second.Created())
	}
}

// saleOpen reports whether the gateway at public answers sale as open.
func saleOpen(public, sale string) bool {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(strings.TrimRight(public, "/") + "/api/sales/" + sale)
	if err := fasthttp.DoTimeout(req, resp, 5*time.Second); err != nil || resp.StatusCode() != fasthttp.StatusOK {
		return false
	}
	var v struct {
		State string `json:"state"`
	}
	return json.Unmarshal(resp.Body(), &v) == nil && v.State == "open"
}
