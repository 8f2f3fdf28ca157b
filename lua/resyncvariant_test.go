package lua_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/lua"
)

// TestResyncVariants: Resync with ARGV[12] sets each variant's booked to
// L_v + max(0, reserved_v - P_v) clamped to [0, total_v] and its reserved
// to max(reserved_v, P_v), and the sale's booked to the sum of its
// variants'; a rebuild after Redis lost the hash writes the variants'
// statics and figures from the snapshot alone.
func TestResyncVariants(t *testing.T) {
	const spec = "S:10,M:25,XL:5"
	ids := []string{"S", "M", "XL"}
	type figs struct{ booked, reserved [3]int64 }
	cases := []struct {
		name string
		lost bool // the hash is gone (a Redis loss): a rebuild
		// before: each variant's booked and reserved in Redis (the sale's
		// are their sums).
		before figs
		L, P   [3]int64
		want   figs
	}{
		{name: "releases and unpersisted units",
			before: figs{booked: [3]int64{3, 5, 0}, reserved: [3]int64{3, 5, 0}},
			// S: one order released in the database; M: one unit reserved
			// but not yet persisted.
			L:    [3]int64{2, 3, 0},
			P:    [3]int64{3, 4, 0},
			want: figs{booked: [3]int64{2, 4, 0}, reserved: [3]int64{3, 5, 0}}},
		{name: "clamped to the variant's total",
			before: figs{booked: [3]int64{0, 0, 5}, reserved: [3]int64{0, 0, 7}},
			L:      [3]int64{0, 0, 5},
			P:      [3]int64{0, 0, 5},
			want:   figs{booked: [3]int64{0, 0, 5}, reserved: [3]int64{0, 0, 7}}},
		{name: "variant reserved behind the database catches up",
			before: figs{booked: [3]int64{1, 4, 0}, reserved: [3]int64{1, 6, 0}},
			L:      [3]int64{3, 2, 0},
			P:      [3]int64{3, 4, 0},
			want:   figs{booked: [3]int64{3, 4, 0}, reserved: [3]int64{3, 6, 0}}},
		{name: "rebuild after the hash is lost", lost: true,
			L:    [3]int64{2, 3, 1},
			P:    [3]int64{3, 4, 2},
			want: figs{booked: [3]int64{2, 3, 1}, reserved: [3]int64{3, 4, 2}}},
	}
	forEach(t, backends(t), "variants", func(t *testing.T, ctx context.Context, rdb *redis.Client) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				id := "rsv-" + c.name
				key := lua.SaleKey(id)
				if !c.lost {
					if err := lua.Prepare.Run(ctx, rdb, lua.SaleKeys(id), 40, 60, 2, 100, "", "", spec).Err(); err != nil {
						t.Fatalf("Prepare: %v", err)
					}
					var sb, sr int64
					for i, v := range ids {
						rdb.HSet(ctx, key, lua.VariantField(v, lua.FieldBooked), c.before.booked[i], lua.VariantField(v, lua.FieldReserved), c.before.reserved[i])
						sb += c.before.booked[i]
						sr += c.before.reserved[i]
					}
					rdb.HSet(ctx, key, lua.FieldBooked, sb, lua.FieldReserved, sr)
				}
				arg := ""
				var L, P, wantBooked, wantReserved int64
				for i, v := range ids {
					if i > 0 {
						arg += ","
					}
					arg += v + ":" + []string{"10", "25", "5"}[i] + ":" + strconv.FormatInt(c.L[i], 10) + ":" + strconv.FormatInt(c.P[i], 10)
					L += c.L[i]
					P += c.P[i]
					wantBooked += c.want.booked[i]
				}
				restored := "0"
				if c.lost {
					restored = "1"
					wantReserved = P
				} else {
					wantReserved = 0
					for i := range ids {
						wantReserved += c.before.reserved[i]
					}
					wantReserved = max(wantReserved, P)
				}
				res, err := lua.Resync.Run(ctx, rdb, lua.SaleKeys(id), L, P, 40, 2, 100,
					"open", "1.5", 0, restored, 1, "", arg).Int64Slice()
				if err != nil || len(res) != 10 {
					t.Fatalf("Resync: got %v, %v", res, err)
				}
				if got, want := res[0], map[bool]int64{true: 1, false: 0}[c.lost]; got != want {
					t.Errorf("rebuilt: got %d, want %d", got, want)
				}
				if res[5] != wantBooked {
					t.Errorf("sale booked: got %d, want %d (the sum of its variants')", res[5], wantBooked)
				}
				if res[6] != wantReserved {
					t.Errorf("sale reserved: got %d, want %d", res[6], wantReserved)
				}
				for i, v := range ids {
					got, err := rdb.HMGet(ctx, key, lua.VariantField(v, lua.FieldBooked), lua.VariantField(v, lua.FieldReserved), lua.VariantField(v, lua.FieldTotal)).Result()
					if err != nil {
						t.Fatal(err)
					}
					want := []any{strconv.FormatInt(c.want.booked[i], 10), strconv.FormatInt(c.want.reserved[i], 10), []string{"10", "25", "5"}[i]}
					for j := range want {
						if got[j] != want[j] {
							t.Errorf("variant %s: got booked, reserved, total %v, want %v", v, got, want)
							break
						}
					}
				}
				if got, err := rdb.HGet(ctx, key, lua.FieldVariants).Result(); err != nil || got != "S,M,XL" {
					t.Errorf("variants field: got %q, %v; want S,M,XL", got, err)
				}
			})
		}
	})
}
