package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/redistest"
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
			time.Sleep(100 * time.Millisecond) // the gateways see the sales open
			for addr, id := range sales {
				r, err := runCrowdSpec(ctx, crowdSpec{Target: public, Sale: id, Secret: []byte(cfg.JWTSecret),
					UserPrefix: id + "-", Users: users, Concurrency: 16, Quantity: 1, Timeout: 5 * time.Second})
				if err != nil {
					t.Fatalf("crowd %s: %v", id, err)
				}
				if r.Created() != units {
					t.Errorf("sale %s on %s: got %d answers 201 (%v), want %d", id, addr, r.Created(), r.ByAnswer, units)
				}
				f, err := waitDrained(ctx, func() (adminFigures, error) { return getAdminFigures(admin, cfg.AdminToken, id) }, 20*time.Second)
				if err != nil {
					t.Fatalf("drain %s: %v", id, err)
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
		info, err := c.Info(context.Background(), "commandstats").Result()
		_ = c.Close()
		if err != nil {
			t.Fatalf("INFO commandstats on %s: %v", addr, err)
		}
		for _, line := range strings.Split(info, "\r\n") {
			if rest, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":calls="); ok {
				out[addr], _ = strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
			}
		}
	}
	return out
}
