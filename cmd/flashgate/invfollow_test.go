package main

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
)

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
	if testing.Short() {
		t.Skip("short")
	}
	sen := redistest.StartSentinel(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st := newStack(&Config{LogLevel: "error"}, io.Discard)
	defer st.close()
	rdb, err := st.inventoryPrimary(ctx, sen.URL())
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
