package lua_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/lua"
)

// BenchmarkReserveFence measures what the failover fence costs redis-server
// per script call (INFO commandstats, usec per EVALSHA, as server-us/op):
// "unmarked" is a sale without a primary marker (the fence reads the marker
// only), "marked" one whose marker names this primary (the fence also runs
// INFO replication and compares), for Reserve and for a ReserveMany of 32
// orders. The ratio marked/unmarked is the check's cost.
func BenchmarkReserveFence(b *testing.B) {
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	ctx := context.Background()
	id := replID(ctx, rdb)
	for _, many := range []int{1, 32} {
		for _, marked := range []bool{false, true} {
			name := "Reserve"
			if many > 1 {
				name = "ReserveMany" + strconv.Itoa(many)
			}
			name += map[bool]string{false: "/unmarked", true: "/marked"}[marked]
			b.Run(name, func(b *testing.B) {
				if err := rdb.FlushAll(ctx).Err(); err != nil {
					b.Fatal(err)
				}
				if err := lua.Prepare.Run(ctx, rdb, lua.SaleKeys(saleID), 1<<40, 1<<40, 1, 500).Err(); err != nil {
					b.Fatal(err)
				}
				if err := lua.SetState.Run(ctx, rdb, lua.SaleKeys(saleID), "open").Err(); err != nil {
					b.Fatal(err)
				}
				if marked {
					if err := rdb.Set(ctx, lua.PrimaryKey(saleID), id, 0).Err(); err != nil {
						b.Fatal(err)
					}
				}
				if v, err := lua.Reserve.Run(ctx, rdb, lua.ReserveKeys(saleID), "o0", "u0", 1, 1700000000123, saleID).Slice(); err != nil || v[0] != int64(lua.ReserveOK) {
					b.Fatalf("a first reserve: got %v, %v; want reserved (not fenced on this primary's own marker)", v, err)
				}
				if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
					b.Fatal(err)
				}
				keys := lua.ReserveKeys(saleID)
				n := 0
				args := make([]any, 0, 3+3*many)
				b.ResetTimer()
				for b.Loop() {
					var err error
					if many == 1 {
						n++
						u := strconv.Itoa(n)
						err = lua.Reserve.Run(ctx, rdb, keys, "o"+u, "u"+u, 1, 1700000000123, saleID).Err()
					} else {
						args = append(args[:0], 1700000000123, saleID, "")
						for range many {
							n++
							u := strconv.Itoa(n)
							args = append(args, "o"+u, "u"+u, 1, "")
						}
						err = lua.ReserveMany.Run(ctx, rdb, keys, args...).Err()
					}
					if err != nil {
						b.Fatal(err)
					}
					if n%50000 < many { // keep the stream and hashes small
						b.StopTimer()
						_ = rdb.Del(ctx, lua.OrdersKey(saleID), lua.BuyersKey(saleID)).Err()
						b.StartTimer()
					}
				}
				b.StopTimer()
				st := redistest.Commands(b, rdb)["evalsha"]
				if st.Calls > 0 {
					b.ReportMetric(float64(st.Usec)/float64(st.Calls), "server-us/op")
				}
			})
		}
	}
}
