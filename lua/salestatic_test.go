package lua_test

import (
	"context"
	"reflect"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/lua"
)

// TestSaleStaticFieldsOneWriter: the two scripts that create a sale's
// hash, Prepare (a new sale) and Resync (a rebuild after Redis lost it),
// leave the same static fields (lua.SaleStaticFields and each variant's
// total), for a first-come sale, a fair sale, a draw and a sale of variants.
func TestSaleStaticFieldsOneWriter(t *testing.T) {
	forEach(t, backends(t), "static", func(t *testing.T, ctx context.Context, rdb *redis.Client) {
		for _, c := range []struct{ queue, variants, resync string }{
			{"", "", ""},
			{"fair", "", ""},
			{"draw:1000:2000", "", ""},
			{"", "S:10,M:25,XL:5", "S:10:0:0,M:25:0:0,XL:5:0:0"},
		} {
			queue := c.queue
			const total, perUser, price = 40, 2, 1250
			prepared, rebuilt := "static-p"+queue, "static-r"+queue
			if c.variants != "" {
				prepared, rebuilt = prepared+"v", rebuilt+"v"
			}
			if err := lua.Prepare.Run(ctx, rdb, lua.SaleKeys(prepared), total, 60, perUser, price, "", queue, c.variants).Err(); err != nil {
				t.Fatalf("Prepare: %v", err)
			}
			// A rebuild: the caller restored the released set and buyers
			// (ARGV[9] "1"); nothing was sold (L = P = D = 0).
			v, err := lua.Resync.Run(ctx, rdb, lua.SaleKeys(rebuilt), 0, 0, total, perUser, price,
				"open", "1.5", 0, "1", 1, queue, c.resync).Int64Slice()
			if err != nil || len(v) == 0 || v[0] != 1 {
				t.Fatalf("Resync rebuild: got %v, %v; want rebuilt", v, err)
			}
			fields := append([]string(nil), lua.SaleStaticFields...)
			for _, id := range []string{"S", "M", "XL"} {
				fields = append(fields, lua.VariantField(id, lua.FieldTotal))
			}
			read := func(id string) []any {
				got, err := rdb.HMGet(ctx, lua.SaleKey(id), fields...).Result()
				if err != nil {
					t.Fatal(err)
				}
				return got
			}
			p, r := read(prepared), read(rebuilt)
			if !reflect.DeepEqual(p, r) {
				t.Errorf("queue %q: static fields %v: prepared %v, rebuilt %v, want the same", queue, lua.SaleStaticFields, p, r)
			}
			q := p[len(lua.SaleStaticFields)-2]
			if want := any(nil); queue == "fair" || queue == "draw:1000:2000" {
				if q != queue[:4] {
					t.Errorf("prepared %s sale: got queue %v, want %s", queue[:4], q, queue[:4])
				}
				if w := p[len(lua.SaleStaticFields)-4 : len(lua.SaleStaticFields)-2]; queue[:4] == "draw" && !reflect.DeepEqual(w, []any{"1000", "2000"}) {
					t.Errorf("prepared draw sale: got window %v, want [1000 2000]", w)
				}
			} else if q != want {
				t.Errorf("prepared first-come sale: got queue %v, want none", q)
			}
			vs := p[len(lua.SaleStaticFields)-1:]
			want := []any{nil, nil, nil, nil}
			if c.variants != "" {
				want = []any{"S,M,XL", "10", "25", "5"}
			}
			if !reflect.DeepEqual(vs, want) {
				t.Errorf("variants %q: got variants, S, M, XL totals %v, want %v", c.variants, vs, want)
			}
			if c.variants != "" {
				for _, f := range []string{lua.FieldBooked, lua.FieldReserved} {
					for _, id := range []string{"S", "M", "XL"} {
						if got, err := rdb.HGet(ctx, lua.SaleKey(prepared), lua.VariantField(id, f)).Result(); err != nil || got != "0" {
							t.Errorf("prepared %s: got %q, %v; want 0", lua.VariantField(id, f), got, err)
						}
					}
				}
			}
		}
	})
}
