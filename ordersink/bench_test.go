package ordersink_test

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/flashgate/flashgate/internal/redistest"
	"github.com/flashgate/flashgate/lua"
	"github.com/flashgate/flashgate/ordersink"
)

// BenchmarkDrainOnce drains 3 sales of 1,000 reserved orders each into
// SQLite per iteration; read as a ratio against another run.
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
		b.StartTimer()
		if n, err := d.DrainOnce(ctx); err != nil || n != 3000 {
			b.Fatalf("DrainOnce: got %d, %v, want 3000", n, err)
		}
	}
	b.ReportMetric(float64(3000*b.N)/b.Elapsed().Seconds(), "orders/s")
}
