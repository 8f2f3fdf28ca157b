package lua_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/lua"
)

// BenchmarkReserveVariants measures what variants cost redis-server per
// order (INFO commandstats, usec per EVALSHA over the orders of a call, as
// server-us/order): Reserve and a ReserveMany of 32 orders on a sale of one
// stock and on a sale of 20 variants (each order the next variant, so a
// batch names all 20), in the same run, to be read as ratios.
func BenchmarkReserveVariants(b *testing.B) {
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	for _, many := range []int{1, 32} {
		for _, variants := range []int{0, 20} {
			name := "Reserve"
			if many > 1 {
				name = "ReserveMany" + strconv.Itoa(many)
			}
			b.Run(name+"/variants="+strconv.Itoa(variants), func(b *testing.B) {
				benchReserveVariants(b, rdb, lua.Reserve, lua.ReserveMany, many, variants)
			})
		}
	}
}

// benchReserveVariants runs one case of BenchmarkReserveVariants with the
// given reserve scripts (lua.Reserve and lua.ReserveMany, or others of the
// same contract to compare with).
func benchReserveVariants(b *testing.B, rdb *redis.Client, reserve, reserveMany *redis.Script, many, variants int) {
	ctx := context.Background()
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	args := []any{1 << 40, 1 << 40, 1, 500}
	ids := []string{""}
	if variants > 0 {
		ids = ids[:0]
		spec := make([]string, variants)
		for i := range variants {
			ids = append(ids, "v"+strconv.Itoa(i))
			spec[i] = ids[i] + ":" + strconv.Itoa(1<<35)
		}
		args = []any{variants << 35, 1 << 40, 1, 500, "", "", strings.Join(spec, ",")}
	}
	if err := lua.Prepare.Run(ctx, rdb, lua.SaleKeys(saleID), args...).Err(); err != nil {
		b.Fatal(err)
	}
	if err := lua.SetState.Run(ctx, rdb, lua.SaleKeys(saleID), "open").Err(); err != nil {
		b.Fatal(err)
	}
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	keys := lua.ReserveKeys(saleID)
	n := 0
	args = make([]any, 0, 3+4*many)
	b.ResetTimer()
	for b.Loop() {
		var res []any
		var err error
		if many == 1 {
			n++
			u := strconv.Itoa(n)
			res, err = reserve.Run(ctx, rdb, keys, "o"+u, "u"+u, 1, 1700000000123, saleID, "", "", ids[n%len(ids)]).Slice()
		} else {
			args = append(args[:0], 1700000000123, saleID, "")
			for range many {
				n++
				u := strconv.Itoa(n)
				args = append(args, "o"+u, "u"+u, 1, ids[n%len(ids)])
			}
			res, err = reserveMany.Run(ctx, rdb, keys, args...).Slice()
		}
		if err != nil || res[0] != int64(lua.ReserveOK) {
			b.Fatalf("reserve: got %v, %v; want reserved", res, err)
		}
		if n%50000 < many { // keep the stream and hashes small
			b.StopTimer()
			_ = rdb.Del(ctx, lua.OrdersKey(saleID), lua.BuyersKey(saleID)).Err()
			b.StartTimer()
		}
	}
	b.StopTimer()
	if st := redistest.Commands(b, rdb)["evalsha"]; st.Calls > 0 {
		b.ReportMetric(float64(st.Usec)/float64(st.Calls)/float64(many), "server-us/order")
	}
}
