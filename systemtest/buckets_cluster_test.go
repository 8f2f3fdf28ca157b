package systemtest

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/inventory"
	"github.com/flashgate/flashgate/lua"
)

// scriptCalls is the EVALSHA and EVAL calls a node counted since its last
// CONFIG RESETSTAT (INFO commandstats).
func scriptCalls(tb testing.TB, ctx context.Context, n *redis.Client) int64 {
	tb.Helper()
	info, err := n.Info(ctx, "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	st := redistest.CommandStats(info)
	return st["evalsha"].Calls + st["eval"].Calls
}

// TestBucketedSaleOnCluster: one sale of 1,000 units in 3 buckets on a
// real Redis Cluster of 3 primaries; 20,000 distinct buyers reserve at once
// through the inventory service (in process). Exactly 1,000 sell, nobody
// twice, every reserve becomes one row, and the reserve scripts spread over
// the three primaries, each within ±15% of a third.
func TestBucketedSaleOnCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("a 20,000-buyer crowd")
	}
	cl := redistest.StartCluster(t)
	cc := cl.Client(t, false)
	s := newBucketSystem(t, cc)
	ctx := s.ctx
	const sale, total, n, buyers = "cluster-hot", 1000, 3, 20000
	created, err := s.cp.CreateSale(ctx, flashgate.Sale{ID: sale, Name: "Hot", PriceCents: 100, Total: total, Buckets: n})
	if err != nil {
		t.Fatal(err)
	}
	l := lua.Layout{Sale: sale, Salts: created.BucketSalts}
	primaryOf := map[string]string{} // bucket tag → primary address
	for _, tag := range l.Tags() {
		c, err := cc.MasterForKey(ctx, lua.SaleKey(tag))
		if err != nil {
			t.Fatal(err)
		}
		primaryOf[tag] = c.Options().Addr
	}
	distinct := map[string]bool{}
	for _, a := range primaryOf {
		distinct[a] = true
	}
	if len(distinct) != n {
		t.Fatalf("buckets on primaries %v, want %d different ones", primaryOf, n)
	}
	if err := s.cp.Start(ctx, sale); err != nil {
		t.Fatal(err)
	}
	if err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		return c.ConfigResetStat(ctx).Err()
	}); err != nil {
		t.Fatal(err)
	}
	// Script calls stand for reserves only when each goes alone: batches
	// (lua.ReserveMany) carry many.
	s.inv = inventory.New(cc, inventory.Config{Logger: quiet, MaxReserveBatch: 1})

	var (
		mu      sync.Mutex
		sold    = map[string]string{} // order → user
		next    atomic.Int64
		wg      sync.WaitGroup
		failure atomic.Value
	)
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= buyers {
					return
				}
				u := "buyer" + strconv.FormatInt(i, 10)
				id, err := s.inv.Reserve(ctx, sale, u, "", 1)
				switch {
				case err == nil:
					mu.Lock()
					sold[id] = u
					mu.Unlock()
				case errors.Is(err, flashgate.ErrSoldOut):
				default:
					failure.CompareAndSwap(nil, err.Error())
					return
				}
			}
		}()
	}
	wg.Wait()
	if f := failure.Load(); f != nil {
		t.Fatalf("reserve: %v", f)
	}
	if len(sold) != total {
		t.Fatalf("sold: got %d, want %d", len(sold), total)
	}
	calls := map[string]int64{}
	var all int64
	if err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		k := scriptCalls(t, ctx, c)
		mu.Lock()
		calls[c.Options().Addr] = k
		all += k
		mu.Unlock()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("reserve scripts per primary: %v", calls)
	if all < buyers {
		t.Fatalf("script calls: got %d, want at least one per buyer (%d)", all, buyers)
	}
	for addr, k := range calls {
		if third := float64(all) / 3; float64(k) < 0.85*third || float64(k) > 1.15*third {
			t.Errorf("primary %s ran %d of %d scripts, want within ±15%% of a third", addr, k, all)
		}
	}

	s.drain(t)
	live, err := s.db.LiveOrders(ctx, sale)
	if err != nil {
		t.Fatal(err)
	}
	if len(live) != total {
		t.Fatalf("rows: got %d, want %d", len(live), total)
	}
	users := map[string]bool{}
	for _, o := range live {
		if users[o.UserID] {
			t.Errorf("user %s holds two orders", o.UserID)
		}
		users[o.UserID] = true
		if sold[o.ID] != o.UserID {
			t.Errorf("row %s of %s was not a reserve's answer", o.ID, o.UserID)
		}
		if h := l.Home(o.UserID); o.Bucket != h {
			// Spilled: the home bucket holds the order's marker.
			if v, _ := cc.HGet(ctx, lua.BuyersKey(l.Tag(h)), o.UserID).Result(); v != lua.SpillMarker(o.ID, o.Bucket) {
				t.Errorf("row %s: bucket %d, home %d holds %q, want %s's home or its marker", o.ID, o.Bucket, h, v, o.UserID)
			}
		}
	}
	st, err := s.cp.SaleStatus(ctx, sale)
	if err != nil {
		t.Fatal(err)
	}
	if st.Booked != total || st.Remaining != 0 || st.State != flashgate.StateSoldOut {
		t.Errorf("status: got booked %d remaining %d state %s, want %d, 0, sold_out", st.Booked, st.Remaining, st.State, total)
	}
}
