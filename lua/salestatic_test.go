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
// leave the same static fields (lua.SaleStaticFields), for a first-come
// and for a fair sale.
func TestSaleStaticFieldsOneWriter(t *testing.T) {
	forEach(t, backends(t), "static", func(t *testing.T, ctx context.Context, rdb *redis.Client) {
		for _, queue := range []string{"", "fair"} {
			const total, perUser, price = 40, 2, 1250
			prepared, rebuilt := "static-p"+queue, "static-r"+queue
			if err := lua.Prepare.Run(ctx, rdb, lua.SaleKeys(prepared), total, 60, perUser, price, "", queue).Err(); err != nil {
				t.Fatalf("Prepare: %v", err)
			}
			// A rebuild: the caller restored the released set and buyers
			// (ARGV[9] "1"); nothing was sold (L = P = D = 0).
			v, err := lua.Resync.Run(ctx, rdb, lua.SaleKeys(rebuilt), 0, 0, total, perUser, price,
				"open", "1.5", 0, "1", 1, queue).Int64Slice()
			if err != nil || len(v) == 0 || v[0] != 1 {
				t.Fatalf("Resync rebuild: got %v, %v; want rebuilt", v, err)
			}
			read := func(id string) []any {
				got, err := rdb.HMGet(ctx, lua.SaleKey(id), lua.SaleStaticFields...).Result()
				if err != nil {
					t.Fatal(err)
				}
				return got
			}
			p, r := read(prepared), read(rebuilt)
			if !reflect.DeepEqual(p, r) {
				t.Errorf("queue %q: static fields %v: prepared %v, rebuilt %v, want the same", queue, lua.SaleStaticFields, p, r)
			}
			if want := any(nil); queue == "fair" {
				if p[len(p)-1] != "fair" {
					t.Errorf("prepared fair sale: got queue %v, want fair", p[len(p)-1])
				}
			} else if p[len(p)-1] != want {
				t.Errorf("prepared first-come sale: got queue %v, want none", p[len(p)-1])
			}
		}
	})
}
