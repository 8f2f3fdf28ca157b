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
// order: Reserve, and a ReserveMany of 32 orders, on a sale of one stock
// and on a sale of 20 variants (each order the next variant, so that a
// batch names all 20). The two sales live on two redis-servers that take
// a call each in turn, so that both meet the same load on a shared
// machine; each reports its INFO commandstats usec per EVALSHA over the
// orders of a call (1stock-us/order, 20v-us/order), and 20v/1stock is
// their ratio, the figure to read.
func BenchmarkReserveVariants(b *testing.B) {
	for _, many := range []int{1, 32} {
		name := "Reserve"
		if many > 1 {
			name = "ReserveMany" + strconv.Itoa(many)
		}
		b.Run(name, func(b *testing.B) {
			one := newReserveBench(b, lua.Reserve, lua.ReserveMany, many, 0)
			twenty := newReserveBench(b, lua.Reserve, lua.ReserveMany, many, 20)
			for b.Loop() {
				one.step(b)
				twenty.step(b)
			}
			a, v := one.usec(b), twenty.usec(b)
			b.ReportMetric(a, "1stock-us/order")
			b.ReportMetric(v, "20v-us/order")
			b.ReportMetric(v/a, "20v/1stock")
		})
	}
}

// reserveBench is one open sale on a redis-server of its own, reserved
// from by step with the given scripts (lua.Reserve and lua.ReserveMany, or
// others of the same contract to compare with).
type reserveBench struct {
	rdb                  *redis.Client
	reserve, reserveMany *redis.Script
	many                 int
	ids                  []string // the variants orders name in turn
	n                    int      // orders sent
	args                 []any
}

// newReserveBench starts a redis-server holding one open sale of a large
// stock, in variants variants if not 0, whose orders step sends many at a
// time (1: Reserve; more: ReserveMany).
func newReserveBench(b *testing.B, reserve, reserveMany *redis.Script, many, variants int) *reserveBench {
	b.Helper()
	ctx := context.Background()
	rb := &reserveBench{rdb: redistest.Start(b).Client(b), reserve: reserve, reserveMany: reserveMany,
		many: many, ids: []string{""}, args: make([]any, 0, 3+4*many)}
	args := []any{1 << 40, 1 << 40, 1, 500}
	if variants > 0 {
		rb.ids = rb.ids[:0]
		spec := make([]string, variants)
		for i := range variants {
			rb.ids = append(rb.ids, "v"+strconv.Itoa(i))
			spec[i] = rb.ids[i] + ":" + strconv.Itoa(1<<35)
		}
		args = []any{variants << 35, 1 << 40, 1, 500, "", "", strings.Join(spec, ",")}
	}
	if err := lua.Prepare.Run(ctx, rb.rdb, lua.SaleKeys(saleID), args...).Err(); err != nil {
		b.Fatal(err)
	}
	if err := lua.SetState.Run(ctx, rb.rdb, lua.SaleKeys(saleID), "open").Err(); err != nil {
		b.Fatal(err)
	}
	if err := rb.rdb.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	return rb
}

// step sends one call: one order through Reserve, or rb.many through
// ReserveMany; each must be reserved.
func (rb *reserveBench) step(b *testing.B) {
	ctx := context.Background()
	keys := lua.ReserveKeys(saleID)
	var res []any
	var err error
	if rb.many == 1 {
		rb.n++
		u := strconv.Itoa(rb.n)
		res, err = rb.reserve.Run(ctx, rb.rdb, keys, "o"+u, "u"+u, 1, 1700000000123, saleID, "", "", rb.ids[rb.n%len(rb.ids)]).Slice()
	} else {
		rb.args = append(rb.args[:0], 1700000000123, saleID, "")
		for range rb.many {
			rb.n++
			u := strconv.Itoa(rb.n)
			rb.args = append(rb.args, "o"+u, "u"+u, 1, rb.ids[rb.n%len(rb.ids)])
		}
		res, err = rb.reserveMany.Run(ctx, rb.rdb, keys, rb.args...).Slice()
	}
	if err != nil || res[0] != int64(lua.ReserveOK) {
		b.Fatalf("reserve: got %v, %v; want reserved", res, err)
	}
	if rb.n%50000 < rb.many { // keep the stream and the buyers small
		b.StopTimer()
		_ = rb.rdb.Del(ctx, lua.OrdersKey(saleID), lua.BuyersKey(saleID)).Err()
		b.StartTimer()
	}
}

// usec returns redis-server's usec per order of the calls step sent
// (INFO commandstats, EVALSHA).
func (rb *reserveBench) usec(b *testing.B) float64 {
	st := redistest.Commands(b, rb.rdb)["evalsha"]
	if st.Calls == 0 {
		b.Fatal("no EVALSHA counted")
	}
	return float64(st.Usec) / float64(st.Calls) / float64(rb.many)
}
