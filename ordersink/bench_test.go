package ordersink_test

import (
	"context"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/lua"
	"github.com/flashgate/flashgate/ordersink"
)

// BenchmarkDrainOnce drains 3 sales of 1,000 reserved orders each into
// SQLite per iteration; read as a ratio against another run. Per order it
// reports this process's CPU time (the sink's), the CPU redis-server spent
// while draining (INFO cpu), and the time of the commands of the sink's
// acknowledgement (INFO commandstats: the AckTrim script, or XACK and XDEL
// where there is none).
func BenchmarkDrainOnce(b *testing.B) {
	rs := redistest.Start(b)
	rdb := rs.Client(b)
	ctx := context.Background()
	sales := []string{"b1", "b2", "b3"}
	for _, s := range sales {
		openSale(b, rdb, s, 1<<40)
	}
	db := openDB(b, "sqlite://"+filepath.Join(b.TempDir(), "fg.db"))
	d := ordersink.New(rdb, db, ordersink.Config{Consumer: "bench", Logger: quiet})
	user := 0
	var redisCPU, ackUsec, ownCPU float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		for _, s := range sales {
			keys := lua.ReserveKeys(s)
			p := rdb.Pipeline()
			for j := 0; j < 1000; j++ {
				user++
				lua.Reserve.Eval(ctx, p, keys, ulid.Make().String(), "u"+strconv.Itoa(user), 1, time.Now().UnixMilli(), s)
			}
			if _, err := p.Exec(ctx); err != nil {
				b.Fatal(err)
			}
		}
		if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		cpu, own := redisCPUSeconds(b, rdb), processCPUSeconds()
		b.StartTimer()
		if n, err := d.DrainOnce(ctx); err != nil || n != 3000 {
			b.Fatalf("DrainOnce: got %d, %v, want 3000", n, err)
		}
		b.StopTimer()
		ownCPU += processCPUSeconds() - own
		redisCPU += redisCPUSeconds(b, rdb) - cpu
		// The commands a script runs count in the script's time as well as
		// in their own.
		st := redistest.Commands(b, rdb)
		if script := st["evalsha"].Usec + st["eval"].Usec; script > 0 {
			ackUsec += float64(script) // its XACK, XTRIM… included
		} else {
			ackUsec += float64(st["xack"].Usec + st["xdel"].Usec)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(3000*b.N)/b.Elapsed().Seconds(), "orders/s")
	b.ReportMetric(redisCPU*1e6/float64(3000*b.N), "redis-µs/order")
	b.ReportMetric(ownCPU*1e6/float64(3000*b.N), "cpu-µs/order")
	b.ReportMetric(ackUsec/float64(3000*b.N), "ack-µs/order")
}

// processCPUSeconds returns the CPU time this process used so far: the
// sink's, SQLite included, which a busy machine disturbs less than the
// elapsed time.
func processCPUSeconds() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// redisCPUSeconds returns used_cpu_user + used_cpu_sys of INFO cpu.
func redisCPUSeconds(b *testing.B, rdb *redis.Client) float64 {
	b.Helper()
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	return redistest.CPUSeconds(info)
}
