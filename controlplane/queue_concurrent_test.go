package controlplane

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/lua"
)

// TestQueueAdmitWhileBuying runs 20 fair drops in which buyers buy the
// moment the frontier reaches them while the leader admits: no admitted
// buyer is refused sold_out. Admission reads the stock and the buyers in
// one script, so a reserve between two of the leader's reads cannot make
// it promise a unit twice.
func TestQueueAdmitWhileBuying(t *testing.T) {
	e := newEnv(t, sqliteDSN(t), func(c *Config) { c.QueueBacklog = 1 << 30; c.QueueLatency = time.Hour })
	ctx := e.ctx
	fence, err := e.rdb.Incr(ctx, lua.FenceKey()).Result()
	if err != nil {
		t.Fatal(err)
	}
	const runs, units, entrants, buyers = 20, 40, 160, 8
	var refused, bought int64
	for run := range runs {
		id := "fc" + strconv.Itoa(run)
		starts := e.clock.Now().Add(time.Minute)
		sale, err := e.svc.CreateSale(ctx, flashgate.Sale{ID: id, Name: "Fair", PriceCents: 1, Total: units, StartsAt: &starts,
			Queue: flashgate.QueueFair, AdmitPerMinute: 6000, AdmitSeconds: 3600})
		if err != nil {
			t.Fatal(err)
		}
		e.clock.Set(starts.Add(-time.Second))
		if err := e.svc.QueueStep(ctx, sale, fence); err != nil { // opens the queue
			t.Fatal(err)
		}
		for i := range entrants {
			if err := lua.QueueEnter.Run(ctx, e.rdb, lua.QueueEnterKeys(id, "none"), fmt.Sprintf("u%03d", i), 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
		e.clock.Set(starts)
		if err := e.svc.Start(ctx, id); err != nil {
			t.Fatal(err)
		}
		if err := e.svc.QueueStep(ctx, sale, fence); err != nil { // starts and ranks, admits a first burst
			t.Fatal(err)
		}
		// Each buyer goroutine watches its share of the users and buys for
		// each as soon as its position is admitted.
		done := make(chan struct{})
		var wg sync.WaitGroup
		for b := range buyers {
			wg.Go(func() {
				pos := map[string]int64{}
				tried := map[string]bool{}
				for i := b; i < entrants; i += buyers {
					u := fmt.Sprintf("u%03d", i)
					v, err := e.rdb.HGet(ctx, lua.QueueKey(id), u).Result()
					if err != nil {
						t.Error(err)
						return
					}
					pos[u], _ = strconv.ParseInt(v[1:], 10, 64)
				}
				for n := 0; n < 100_000; n++ {
					select {
					case <-done:
						return
					default:
					}
					k, err := e.rdb.HGet(ctx, lua.SaleKey(id), lua.FieldQueueAdmitted).Int64()
					if err != nil {
						t.Error(err)
						return
					}
					for u, p := range pos {
						if p > k || tried[u] {
							continue
						}
						tried[u] = true
						v, err := lua.Reserve.Run(ctx, e.rdb, lua.ReserveKeys(id), "o-"+u, u, 1, 1, id).Slice()
						if err != nil {
							t.Error(err)
							return
						}
						switch v[0] {
						case int64(lua.ReserveOK):
							atomic.AddInt64(&bought, 1)
						case int64(lua.ReserveSoldOut):
							atomic.AddInt64(&refused, 1)
							t.Errorf("run %d: %s at admitted position %d (queue_admitted %d) refused sold_out", run, u, p, k)
						default:
							t.Errorf("run %d: %s at admitted position %d: got %v, want a unit", run, u, p, v)
						}
					}
				}
			})
		}
		// The leader admits, a tick at a time, until every unit is booked.
		for n := 0; n < 10_000; n++ {
			booked, err := e.rdb.HGet(ctx, lua.SaleKey(id), lua.FieldBooked).Int64()
			if err != nil {
				t.Fatal(err)
			}
			if booked == units {
				break
			}
			e.clock.Add(10 * time.Millisecond)
			if err := e.svc.QueueStep(ctx, sale, fence); err != nil {
				t.Fatal(err)
			}
		}
		close(done)
		wg.Wait()
		if booked, _ := e.rdb.HGet(ctx, lua.SaleKey(id), lua.FieldBooked).Int64(); booked != units {
			t.Fatalf("run %d: %d of %d units booked", run, booked, units)
		}
	}
	t.Logf("%d runs: %d units bought, %d admitted buyers refused sold_out", runs, bought, refused)
	if bought != runs*units {
		t.Errorf("got %d units bought, want %d", bought, runs*units)
	}
}
