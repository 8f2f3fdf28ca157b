package gateway

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/internal/testenv/testclock"
)

// TestQueueEntryUnreadableCount: with WaitAuto, a count of replicas the
// sale's primary cannot give (INFO refused with an error reply; a node that
// says role:slave) is not a count of none: the entry waits for at least one
// replica, and with none there is answered 503, never 201 without WAIT.
func TestQueueEntryUnreadableCount(t *testing.T) {
	for _, c := range []struct {
		name  string
		start func(t *testing.T) (admin, rdb *redis.Client)
	}{
		{"INFO refused", func(t *testing.T) (*redis.Client, *redis.Client) {
			rs := redistest.Start(t)
			admin := rs.Client(t)
			if err := admin.Do(context.Background(), "ACL", "SETUSER", "noinfo", "on", "nopass", "~*", "&*", "+@all", "-info").Err(); err != nil {
				t.Fatal(err)
			}
			c := redis.NewClient(&redis.Options{Addr: rs.Addr, Username: "noinfo", Password: "any"})
			t.Cleanup(func() { _ = c.Close() })
			return admin, c
		}},
		{"a node that says role:slave", func(t *testing.T) (*redis.Client, *redis.Client) {
			primary := redistest.Start(t, "--repl-diskless-sync-delay", "0")
			rs := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port), "--replica-read-only", "no")
			rs.WaitReplica(t)
			c := rs.Client(t)
			return c, c
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			admin, rdb := c.start(t)
			clock := testclock.New(time.Now())
			cat := &fakeCatalog{}
			s, err := New(Config{Primary: rdb, Reserver: &luaReserver{c: rdb}, Catalog: cat, Orders: &fakeOrders{orders: map[string]flashgate.Order{}},
				JWTSecret: testSecret, Logger: discard(), Metrics: prometheus.NewRegistry(), ShutdownDelay: -1, UserRate: -1, Clock: clock,
				WaitTimeout: 100 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			openFairSale(t, s, admin, cat, clock.Now())
			for _, user := range []string{"alice", "bob"} {
				r := do(s.Handler(), req{method: "POST", path: "/api/sales/fq/queue", token: token(t, user)})
				if code := r.StatusCode(); code != 503 {
					t.Errorf("%s's entry: got %d %s, want 503", user, code, r.Body())
				}
			}
		})
	}
}
