package sqldb

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/pgtest"
)

// BenchmarkInsertOrders inserts batches of new orders of one sale, as an
// order sink does, into a table that holds 50,000 rows already; read
// rows/s as a ratio against another run. PostgreSQL runs when the test
// environment provides it.
func BenchmarkInsertOrders(b *testing.B) {
	for _, name := range []string{DialectSQLite, DialectPostgres} {
		for _, batch := range []int{256, 1024} {
			b.Run(fmt.Sprintf("%s/%d", name, batch), func(b *testing.B) {
				dsn := "sqlite://" + filepath.Join(b.TempDir(), "fg.db")
				if name == DialectPostgres {
					dsn = pgtest.New(b)
				}
				benchInsert(b, dsn, batch)
			})
		}
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
	for n < 50000 {
		if _, err := db.InsertOrders(ctx, next()); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		os := next()
		b.StartTimer()
		if k, err := db.InsertOrders(ctx, os); err != nil || k != batch {
			b.Fatalf("InsertOrders: got %d, %v; want %d", k, err, batch)
		}
	}
	b.ReportMetric(float64(batch*b.N)/b.Elapsed().Seconds(), "rows/s")
}
