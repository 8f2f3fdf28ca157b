package controlplane

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/internal/testenv/testclock"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/lua"
	"github.com/flashgate/flashgate/ordersink"
)

// TestFailoverDefaultsOversellNothing is the lagging-replica failover with
// every tier on its defaults: a real order sink (ordersink.Config{}, as
// --sink-wait-replicas auto) and the reserve scripts as the inventory runs
// them. The replica's link is held back while half of a 20-unit sale is
// bought and the sink tries to commit it; the primary dies (kill -9), the
// replica is promoted and the tiers move to it; 30 new buyers (and the
// first ten again) try before the control plane's next tick, and again
// after it rebuilt the sale. Before safe defaults, the sink committed the
// held-back half and the promoted replica sold the whole stock again
// before the tick: 30 live orders for 20 units. Now the sink holds the
// half the replica lacks (it is lost: a 201 without a row), and the
// reserve script's fence refuses to sell on the promoted replica until the
// control plane has rebuilt the sale from the database.
func TestFailoverDefaultsOversellNothing(t *testing.T) {
	ctx := context.Background()
	primary := redistest.Start(t, "--repl-diskless-sync-delay", "0")
	link := redistest.StartProxy(t, primary.Addr)
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(link.Port))
	replica.WaitReplica(t)

	var cur atomic.Value
	cur.Store(primary.Addr)
	rdb := redis.NewClient(&redis.Options{
		Addr: "primary", MaxRetries: 2,
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
	sink := ordersink.New(rdb, e.db, ordersink.Config{Consumer: "sink", Logger: quietLogger()})
	drain := func() { _, _ = sink.DrainOnce(ctx) }
	lastResync := time.Now()
	tick := func() { svc.tick(ctx, &lastResync) }

	const total = 20
	e.openSale("d", total, 1)
	tick() // leads, and marks the sale's primary
	testwait.Eventually(t, 10*time.Second, func() bool {
		return strings.Count(rdb.Info(ctx, "replication").Val(), "state=online") == 1
	}, "the primary to count its replica online")
	if err := rdb.Wait(ctx, 1, 5000).Err(); err != nil {
		t.Fatalf("WAIT: %v", err)
	}

	link.Pause()
	for i := range total / 2 {
		if code, _ := e.reserve("d", "u"+strconv.Itoa(i)); code != lua.ReserveOK {
			t.Fatalf("reserve before the failover: code %d", code)
		}
	}
	drain() // the replica lags: nothing may be committed

	primary.Stop()
	rc := replica.Client(t)
	if err := rc.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatalf("REPLICAOF NO ONE: %v", err)
	}
	cur.Store(replica.Addr)

	// On the promoted replica, before the control plane's next tick: 30 new
	// buyers try, then the first ten again.
	buy := func() (sold int) {
		for i := range 40 {
			user := "n" + strconv.Itoa(i)
			if i >= 30 {
				user = "u" + strconv.Itoa(i-30)
			}
			if code, _ := e.reserve("d", user); code == lua.ReserveOK {
				sold++
			}
		}
		return sold
	}
	if sold := buy(); sold != 0 {
		t.Errorf("reserves on the promoted replica before the control plane noticed it: got %d, want 0 (fenced)", sold)
	}
	// The control plane notices, the sink drains, the sale is rebuilt and
	// reopens; everyone tries again.
	testwait.Eventually(t, 10*time.Second, func() bool {
		drain()
		lastResync = lastResync.Add(-time.Hour) // a re-sync is due each time
		tick()
		return field(t, rc, "d", lua.FieldStart) == 1
	}, "the sale rebuilt and reopened on the new primary")
	buy()
	drain()

	live, err := e.db.LiveOrders(ctx, "d")
	if err != nil {
		t.Fatal(err)
	}
	units, per := int64(0), map[string]int{}
	for _, o := range live {
		units += o.Quantity
		per[o.UserID]++
	}
	if units > total {
		t.Errorf("live units after the failover: got %d, want at most %d (oversold)", units, total)
	}
	for user, n := range per {
		if n > 1 {
			t.Errorf("user %s holds %d live orders, want at most 1", user, n)
		}
	}
	if got := field(t, rc, "d", lua.FieldBooked); got > total {
		t.Errorf("booked: got %d, want at most %d", got, total)
	}
}
