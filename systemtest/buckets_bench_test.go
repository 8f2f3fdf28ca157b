package systemtest

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
)

// BenchmarkBucketedReserve measures reserve scripts per second of one sale
// on a real local Redis Cluster of 3 primaries, unbucketed (one primary runs
// every script) and in 3 buckets (one per primary), in one run; each
// reserve is a distinct buyer through the inventory service (in process,
// go-redis auto-pipelining). Run:
//
//	go test ./systemtest -run '^$' -bench BucketedReserve -benchtime 100000x
func BenchmarkBucketedReserve(b *testing.B) {
	cl := redistest.StartCluster(b)
	s := newBucketSystem(b, cl.Client(b, false))
	round := 0
	for _, n := range []int{1, 3} {
		b.Run("buckets="+strconv.Itoa(n), func(b *testing.B) {
			round++
			sale := "bench" + strconv.Itoa(n) + "-" + strconv.Itoa(round)
			if _, err := s.cp.CreateSale(s.ctx, flashgate.Sale{ID: sale, Name: "Bench", Total: 1_000_000, Buckets: n}); err != nil {
				b.Fatal(err)
			}
			if err := s.cp.Start(s.ctx, sale); err != nil {
				b.Fatal(err)
			}
			var next atomic.Int64
			b.SetParallelism(16)
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					u := "u" + strconv.FormatInt(next.Add(1), 10)
					if _, err := s.inv.Reserve(s.ctx, sale, u, "", 1); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "reserves/s")
		})
	}
}
