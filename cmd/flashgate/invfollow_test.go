package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/inventory"
	"github.com/flashgate/flashgate/lua"
)

// waitDialProbesEnd waits, after the test (its clients closed), for
// go-redis's dial probes to end: a pool whose dials to a dead primary all
// failed probes it once a second, and sees its Close only when it wakes,
// up to a second later, which the package's leak check would catch.
func waitDialProbesEnd(t *testing.T) {
	t.Cleanup(func() {
		testwait.Eventually(t, 10*time.Second, func() bool {
			buf := make([]byte, 1<<20)
			return !bytes.Contains(buf[:runtime.Stack(buf, true)], []byte("(*ConnPool).tryDial"))
		}, "go-redis's dial probes to end after Close")
	})
}

// TestInventoryFollowsSentinelPromotion kills (kill -9) the primary of a
// Sentinel set-up under the inventory's client (as `inventory` opens it)
// while buyers' calls keep coming, eight at a time, and fail (a buyer hears
// 503 at once). Once the client has switched to the replica the Sentinel
// promotes (a cluster client's view names it; a single client asks the
// Sentinel at each dial, so the naming is its switch), the first call must
// be answered. Before, the client's one pool had failed as many dials as
// its size: go-redis answered every call with the dead primary's connection
// refused until its probe, once a second, dialled again, and the sale sold
// again up to a second after the Sentinel named the promoted replica. No
// timing is asserted.
func TestInventoryFollowsSentinelPromotion(t *testing.T) {
	followsSentinelPromotion(t, (*stack).inventoryPrimary)
}

// TestServeFollowsSentinelPromotion is TestInventoryFollowsSentinelPromotion
// for the request path's primary of `flashgate serve` and `flashgate
// gateway` (stack.primary, as openConns opens it), which the gateway, the
// in-process inventory and, in `serve`, the control plane share. Before, it
// was a single client over the Sentinel's master, and the first call once
// the Sentinel named the promoted replica was answered with the dead
// primary's connection refused until go-redis's probe, once a second.
func TestServeFollowsSentinelPromotion(t *testing.T) {
	followsSentinelPromotion(t, (*stack).primary)
}

// followsSentinelPromotion runs TestInventoryFollowsSentinelPromotion's
// checks on the client open opens.
func followsSentinelPromotion(t *testing.T, open func(*stack, context.Context, string) (redis.UniversalClient, error)) {
	if testing.Short() {
		t.Skip("short")
	}
	sen := redistest.StartSentinel(t)
	waitDialProbesEnd(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st := newStack(&Config{LogLevel: "error"}, io.Discard)
	defer st.close()
	rdb, err := open(st, ctx, sen.URL())
	if err != nil {
		t.Fatal(err)
	}
	// The deadline is no bound on an answer's time, only on the test's.
	const callDeadline = 20 * time.Second
	burst := func() []error {
		errs := make([]error, 8)
		var wg sync.WaitGroup
		for i := range errs {
			wg.Go(func() {
				cctx, cancel := context.WithTimeout(ctx, callDeadline)
				defer cancel()
				errs[i] = rdb.Set(cctx, "inv-follow", i, 0).Err()
			})
		}
		wg.Wait()
		return errs
	}
	for i, err := range burst() {
		if err != nil {
			t.Fatalf("call %d before the kill: %v", i, err)
		}
	}

	sc := redis.NewSentinelClient(&redis.Options{Addr: sen.Addr})
	defer sc.Close()
	named := func() bool {
		addr, err := sc.GetMasterAddrByName(ctx, sen.Name).Result()
		return err == nil && len(addr) == 2 && addr[0]+":"+addr[1] == sen.Replica.Addr
	}
	sen.Primary.Stop() // SIGKILL
	failed, sent := 0, 0
	if _, ok := testwait.For(30*time.Second, func() bool {
		if named() {
			return true
		}
		for _, err := range burst() {
			sent++
			if err != nil {
				failed++
			}
		}
		return false
	}); !ok {
		t.Fatal("the Sentinel never named the promoted replica")
	}
	t.Logf("%d of %d calls failed while the Sentinel named the dead primary", failed, sent)

	// The switch: a cluster client's view of the master names the
	// promoted replica (at the Sentinel's +switch-master, or a reload after a
	// failed call).
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		// go-redis drops a loopback host from the addresses it is given
		// (127.0.0.1:p becomes :p): the port names the server.
		_, port, _ := net.SplitHostPort(sen.Replica.Addr)
		testwait.Eventually(t, 30*time.Second, func() bool {
			n, err := cc.MasterForKey(ctx, "inv-follow")
			if err != nil {
				return false
			}
			_, p, _ := net.SplitHostPort(n.Options().Addr)
			return p == port
		}, "the client to route to the promoted replica %s", sen.Replica.Addr)
	}
	cctx, cancel := context.WithTimeout(ctx, callDeadline)
	defer cancel()
	if err := rdb.Set(cctx, "inv-follow", "after", 0).Err(); err != nil {
		t.Fatalf("the first call once the client switched to the promoted replica: got %v, want it answered", err)
	}
	if got, err := sen.Replica.Client(t).Get(ctx, "inv-follow").Result(); err != nil || got != "after" {
		t.Errorf("the promoted replica's inv-follow: got %q (err %v), want %q", got, err, "after")
	}
}

// TestInventoryReservesOnSentinelMaster runs the inventory's reserves (as
// `inventory` runs them, WaitAuto) through its Sentinel client, a cluster
// client over the master: one after another and a crowd at once, each on
// the replica when answered (its WAIT went on the reserve's own
// connection to the master); then, the primary killed, the first reserves
// on the promoted replica, which has no replica of its own, are answered
// once the client routes to it.
func TestInventoryReservesOnSentinelMaster(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	sen := redistest.StartSentinel(t)
	waitDialProbesEnd(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st := newStack(&Config{LogLevel: "error"}, io.Discard)
	defer st.close()
	rdb, err := st.inventoryPrimary(ctx, sen.URL())
	if err != nil {
		t.Fatal(err)
	}
	const sale = "inv-wait"
	if n, err := lua.Prepare.Run(ctx, rdb, lua.SaleKeys(sale), 1000, flashgate.AdmitCap(1000, 0), 1, 500).Int64(); err != nil || n != 1 {
		t.Fatalf("Prepare: got %d, %v; want 1", n, err)
	}
	if n, err := lua.SetState.Run(ctx, rdb, lua.SaleKeys(sale), "open").Int64(); err != nil || n != 1 {
		t.Fatalf("SetState: got %d, %v; want 1", n, err)
	}
	inv := inventory.New(rdb, inventory.Config{Logger: st.log})
	defer inv.Close()
	rc := sen.Replica.Client(t)
	for i := range 5 {
		user := "u" + strconv.Itoa(i)
		id, err := inv.Reserve(ctx, sale, user, "", 1)
		if err != nil {
			t.Fatalf("Reserve %s: %v", user, err)
		}
		if got, err := rc.HGet(ctx, lua.BuyersKey(sale), user).Result(); err != nil || got != id {
			t.Errorf("the replica's buyer %s right after Reserve: got %q, %v; want %q", user, got, err, id)
		}
	}
	const crowd = 64
	ids := make([]string, crowd)
	errs := make([]error, crowd)
	var wg sync.WaitGroup
	for i := range crowd {
		wg.Go(func() { ids[i], errs[i] = inv.Reserve(ctx, sale, "c"+strconv.Itoa(i), "", 1) })
	}
	wg.Wait()
	for i := range crowd {
		if errs[i] != nil {
			t.Fatalf("crowd Reserve %d: %v", i, errs[i])
		}
		if got, err := rc.HGet(ctx, lua.BuyersKey(sale), "c"+strconv.Itoa(i)).Result(); err != nil || got != ids[i] {
			t.Errorf("the replica's buyer c%d after the crowd: got %q, %v; want %q", i, got, err, ids[i])
		}
	}

	sen.Primary.Stop() // SIGKILL
	var id string
	testwait.Eventually(t, 30*time.Second, func() bool {
		id, err = inv.Reserve(ctx, sale, "after", "", 1)
		return err == nil
	}, "a reserve to be answered by the promoted replica")
	if got, err := rc.HGet(ctx, lua.BuyersKey(sale), "after").Result(); err != nil || got != id {
		t.Errorf("the promoted replica's buyer after: got %q, %v; want %q", got, err, id)
	}
}
