package systemtest

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/lua"
)

// dropSeed returns the seed of a drop test's random choices: the env var
// FLASHGATE_DROP_SEED if set (to rerun a failed drop), else the clock. It
// logs the seed either way.
func dropSeed(t *testing.T) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("FLASHGATE_DROP_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("FLASHGATE_DROP_SEED=%q: %v", v, err)
		}
		seed = n
	}
	t.Logf("seed %d (rerun with FLASHGATE_DROP_SEED=%d)", seed, seed)
	return seed
}

// TestFairQueueConcurrentDrop runs 20 fair drops in which every admitted
// buyer buys at once while the control plane admits in a loop of its own:
// purchases land between the reads of one admission step. An admitted
// buyer is sure of a unit (docs/api.md), so none may be refused sold_out,
// and the stock sells exactly once.
func TestFairQueueConcurrentDrop(t *testing.T) {
	if testing.Short() {
		t.Skip("20 drops")
	}
	s := startDropSystem(t, time.Now().Truncate(time.Second))
	rng := rand.New(rand.NewPCG(dropSeed(t), 27))
	const runs = 20
	refused := 0
	for run := range runs {
		id := fmt.Sprintf("cdrop%02d", run)
		total := int64(10 + rng.IntN(21))
		n := int(total) + 10 + rng.IntN(int(total))
		got := concurrentDrop(t, s, id, total, n)
		refused += got
		if got > 0 {
			t.Errorf("%s: %d admitted buyers refused sold_out (%d units, %d entrants)", id, got, total, n)
		}
	}
	t.Logf("%d drops: %d admitted buyers refused sold_out", runs, refused)
}

// concurrentDrop opens a fair sale of total units, enters n buyers before
// the start, starts it, then steps the queue in one goroutine while the
// buyers poll and buy in others until the stock is sold (bounded). It
// checks the stock and returns how many admitted buyers were refused
// sold_out.
func concurrentDrop(t *testing.T, s *dropSystem, id string, total int64, n int) int {
	t.Helper()
	ctx := s.ctx
	opens := s.clock.Now()
	starts := opens.Add(60 * time.Second)
	if _, err := s.cp.CreateSale(ctx, flashgate.Sale{ID: id, Name: "Drop " + id, PriceCents: 100, Total: total,
		StartsAt: &starts, Queue: flashgate.QueueFair, PrequeueSeconds: 60, ChallengeMaxNumber: 300,
		AdmitSeconds: 600}); err != nil {
		t.Fatal(err)
	}
	if _, ok := testwait.For(10*time.Second, func() bool {
		s.step(t, id)
		return s.saleQueue(t, id).Open
	}); !ok {
		t.Fatalf("sale %s: the queue never opened", id)
	}
	crowd := make([]*entrant, n)
	for i := range crowd {
		en := &entrant{user: fmt.Sprintf("%s-%03d", id, i), admitted: -1, buys: true}
		en.token = s.token(t, en.user)
		s.enter(t, id, en)
		crowd[i] = en
	}
	s.clock.Set(starts)
	if err := s.cp.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	sale, err := s.db.Sale(ctx, id)
	if err != nil {
		t.Fatal(err)
	}

	var refused, booked atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { // the leader: admission steps back to back
		for {
			select {
			case <-done:
				return
			default:
			}
			if err := s.cp.QueueStep(ctx, sale, s.fence); err != nil {
				t.Errorf("QueueStep: %v", err)
				return
			}
		}
	})
	errs := make(chan error, n)
	deadline := time.Now().Add(30 * time.Second)
	var buyers sync.WaitGroup
	for _, en := range crowd {
		buyers.Go(func() {
			for time.Now().Before(deadline) && booked.Load() < total {
				code, body, _ := s.call("GET", "/api/sales/"+id+"/queue", en.token, en.ticket, "")
				var st queueStatus
				if code != 200 || json.Unmarshal(body, &st) != nil {
					errs <- fmt.Errorf("%s polls: got %d %s", en.user, code, body)
					return
				}
				if st.Ticket != "" {
					en.ticket = st.Ticket
				}
				if st.State != "admitted" {
					time.Sleep(time.Millisecond) // a bounded poll; the frontier reaches the gateway in 5 ms
					continue
				}
				code, body, _ = s.call("POST", "/api/sales/"+id+"/orders", en.token, en.ticket, "")
				switch {
				case code == 201:
					en.bought = true
					booked.Add(1)
				case code == 409 && jsonHas(body, `"error":"sold_out"`):
					refused.Add(1)
				default:
					errs <- fmt.Errorf("%s (admitted) buys: got %d %s", en.user, code, body)
				}
				return
			}
		})
	}
	buyers.Wait()
	close(done)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	got, err := s.rdb.HGet(ctx, lua.SaleKey(id), lua.FieldBooked).Int64()
	if err != nil || got != total || booked.Load() != total {
		t.Fatalf("%s: booked %d in Redis, %d purchases answered 201 (%v), want %d", id, got, booked.Load(), err, total)
	}
	return int(refused.Load())
}
