package sqldb

import (
	"context"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/pgtest"
)

// BenchmarkInsertOrders inserts batches of 1,024 new orders of one sale
// (an order sink's batch while its stream is busy) into a table that holds
// 20,000 rows already; read rows/s and rows/cpu-s as ratios against another
// run. PostgreSQL runs when the test environment provides it.
func BenchmarkInsertOrders(b *testing.B) {
	for _, name := range []string{DialectSQLite, DialectPostgres} {
		b.Run(name, func(b *testing.B) {
			dsn := "sqlite://" + filepath.Join(b.TempDir(), "fg.db")
			if name == DialectPostgres {
				dsn = pgtest.New(b)
			}
			benchInsert(b, dsn, 1024)
		})
	}
}

func benchInsert(b *testing.B, dsn string, batch int) {
	ctx := context.Background()
	db, err := Open(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	n := 0
	next := func() []flashgate.Order {
		os := make([]flashgate.Order, batch)
		for i := range os {
			n++
			os[i] = flashgate.Order{ID: fmt.Sprintf("01K%023d", n), SaleID: "s", UserID: fmt.Sprintf("user-%d", n*7919%1000003),
				Quantity: 1, PriceCents: 2500, Status: flashgate.StatusReserved, CreatedAt: time.UnixMilli(int64(1e12 + n))}
		}
		return os
	}
	for n < 20000 {
		if _, err := db.InsertOrders(ctx, next()); err != nil {
			b.Fatal(err)
		}
	}
	var cpu time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		os := next()
		c0 := cpuTime()
		b.StartTimer()
		if k, err := db.InsertOrders(ctx, os); err != nil || k != batch {
			b.Fatalf("InsertOrders: got %d, %v; want %d", k, err, batch)
		}
		b.StopTimer()
		cpu += cpuTime() - c0
		b.StartTimer()
	}
	b.ReportMetric(float64(batch*b.N)/b.Elapsed().Seconds(), "rows/s")
	// The process's CPU time is steadier than the wall clock on a shared
	// machine (PostgreSQL's own is not in it).
	b.ReportMetric(float64(batch*b.N)/cpu.Seconds(), "rows/cpu-s")
}

// cpuTime is the CPU time the process used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
