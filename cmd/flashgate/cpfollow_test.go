package main

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
)

// TestControlplaneFollowsSentinelPromotion kills (kill -9) the primary of a
// Sentinel set-up under the control plane's client (as `controlplane`
// opens it) while calls keep coming as its ticks send them, each with a
// short deadline of its own, eight at a time. The first call sent once the
// Sentinel names the promoted replica must be answered. Before, each of
// the calls failed its dial at once; after the pool's size of failed dials
// go-redis stopped dialling and answered every call with the dead
// primary's connection refused until its probe, once a second, dialled
// again: the call after the naming failed, and the leader took its lease
// back and rebuilt the sale up to a second later. No timing is asserted:
// only whether that one call is answered.
func TestControlplaneFollowsSentinelPromotion(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	sen := redistest.StartSentinel(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st := newStack(&Config{LogLevel: "error"}, io.Discard)
	defer st.close()
	rdb, err := st.controlplanePrimary(ctx, sen.URL())
	if err != nil {
		t.Fatal(err)
	}
	// A few connections in the pool, as a running control plane has.
	tick := func(d time.Duration) []error {
		errs := make([]error, 8)
		var wg sync.WaitGroup
		for i := range errs {
			wg.Go(func() {
				cctx, cancel := context.WithTimeout(ctx, d)
				defer cancel()
				errs[i] = rdb.Set(cctx, "cp-follow", i, 0).Err()
			})
		}
		wg.Wait()
		return errs
	}
	for i, err := range tick(5 * time.Second) {
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
	// The ticks while the Sentinel names the dead primary: each fails (its
	// deadline ends, or its dial is refused).
	failed, sent := 0, 0
	if _, ok := testwait.For(30*time.Second, func() bool {
		if named() {
			return true
		}
		for _, err := range tick(200 * time.Millisecond) {
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

	// The deadline is no bound on the answer's time, only on the test's.
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := rdb.Set(cctx, "cp-follow", "after", 0).Err(); err != nil {
		t.Fatalf("the first call once the Sentinel named the promoted replica: got %v, want it answered", err)
	}
	info, err := sen.Replica.Client(t).Info(ctx, "replication").Result()
	if err != nil || !strings.Contains(info, "role:master") {
		t.Fatalf("the promoted replica: role %v (err %v), want master", info, err)
	}
	if got, err := sen.Replica.Client(t).Get(ctx, "cp-follow").Result(); err != nil || got != "after" {
		t.Errorf("the promoted replica's cp-follow: got %q (err %v), want %q", got, err, "after")
	}
}
