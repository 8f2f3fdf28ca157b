package lua_test

import (
	"context"
	"reflect"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/lua"
)

// TestVariantReserveRelease walks one sale sold in two variants through
// every script that moves its units, and checks after each step the
// answer, the sale's booked and each variant's booked (their sum the
// sale's), the buyers and the entries' variants: a variant sells out while
// the other sells, per_user counts across variants (one live order per
// buyer), a missing or unknown variant (or one named on a sale of one
// stock) changes nothing, and Release, ReleaseBatch and Retake give back to
// and take from the order's variant.
func TestVariantReserveRelease(t *testing.T) {
	forEach(t, backends(t), "variants", func(t *testing.T, ctx context.Context, rdb *redis.Client) {
		if err := lua.Prepare.Run(ctx, rdb, lua.SaleKeys(saleID), 5, 10, 2, 100, "", "", "S:3,M:2").Err(); err != nil {
			t.Fatal(err)
		}
		if err := lua.SetState.Run(ctx, rdb, lua.SaleKeys(saleID), "open").Err(); err != nil {
			t.Fatal(err)
		}
		res := func(order, user string, qty int, variant string) []any {
			t.Helper()
			v, err := lua.Reserve.Run(ctx, rdb, lua.ReserveKeys(saleID), order, user, qty, 1700000000123, saleID, "", "", variant).Slice()
			if err != nil {
				t.Fatalf("Reserve %s: %v", order, err)
			}
			return v
		}
		figures := func(step string, booked, s, m int) {
			t.Helper()
			got := []string{hget(t, ctx, rdb, lua.SaleKey(saleID), lua.FieldBooked),
				hget(t, ctx, rdb, lua.SaleKey(saleID), lua.VariantField("S", lua.FieldBooked)),
				hget(t, ctx, rdb, lua.SaleKey(saleID), lua.VariantField("M", lua.FieldBooked))}
			want := []string{strconv.Itoa(booked), strconv.Itoa(s), strconv.Itoa(m)}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s: booked, S booked, M booked: got %v, want %v", step, got, want)
			}
		}
		for _, tc := range []struct {
			step                 string
			order, user          string
			qty                  int
			variant              string
			want                 []any
			booked, sBook, mBook int
		}{
			{"M: two units", "o1", "u1", 2, "M", []any{int64(0), "o1"}, 2, 0, 2},
			{"M sold out, S sells", "o2", "u2", 1, "M", []any{int64(lua.ReserveSoldOut), ""}, 2, 0, 2},
			{"no variant", "o2", "u2", 1, "", []any{int64(lua.ReserveBadVariant), ""}, 2, 0, 2},
			{"unknown variant", "o2", "u2", 1, "XL", []any{int64(lua.ReserveBadVariant), ""}, 2, 0, 2},
			{"a field's name as a variant", "o2", "u2", 1, "S:total", []any{int64(lua.ReserveBadVariant), ""}, 2, 0, 2},
			{"S: one unit", "o2", "u2", 1, "S", []any{int64(0), "o2"}, 3, 1, 2},
			{"u1 again, in S", "o3", "u1", 1, "S", []any{int64(lua.ReservePurchased), "o1"}, 3, 1, 2},
			{"above per_user", "o3", "u3", 3, "S", []any{int64(lua.ReserveBadQuantity), ""}, 3, 1, 2},
			{"S: two more", "o3", "u3", 2, "S", []any{int64(0), "o3"}, 5, 3, 2},
			{"all sold out", "o4", "u4", 1, "S", []any{int64(lua.ReserveSoldOut), ""}, 5, 3, 2},
		} {
			if got := res(tc.order, tc.user, tc.qty, tc.variant); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("%s: got %v, want %v", tc.step, got, tc.want)
			}
			figures(tc.step, tc.booked, tc.sBook, tc.mBook)
		}
		msgs, err := rdb.XRange(ctx, lua.OrdersKey(saleID), "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, m := range msgs {
			e, ok := lua.ReadEntry(m.Values)
			if !ok {
				t.Fatalf("entry %v unreadable", m.Values)
			}
			got = append(got, e.Order+"/"+e.Variant)
		}
		if want := []string{"o1/M", "o2/S", "o3/S"}; !reflect.DeepEqual(got, want) {
			t.Errorf("entries: got %v, want %v", got, want)
		}

		// Release gives o1's two units back to M, once.
		for i := 0; i < 2; i++ {
			if _, err := lua.Release.Run(ctx, rdb, lua.ReleaseKeys(saleID), "o1", "u1", 2, "M").Int64(); err != nil {
				t.Fatal(err)
			}
		}
		figures("o1 released twice", 3, 3, 0)
		if got := res("o5", "u5", 1, "S"); got[0] != int64(lua.ReserveSoldOut) {
			t.Fatalf("S after M's release: got %v, want sold out", got)
		}
		if got := res("o5", "u5", 1, "M"); got[0] != int64(0) {
			t.Fatalf("M after its release: got %v, want reserved", got)
		}
		figures("o5 in M", 4, 3, 1)
		// ReleaseBatch gives o2 to S and o5 to M.
		v, err := lua.ReleaseBatch.Run(ctx, rdb, lua.ReleaseKeys(saleID), "", "o2", "u2", 1, "S", "o5", "u5", 1, "M", "o2", "u2", 1, "S").Int64Slice()
		if want := []int64{0, 2, 2}; err != nil || !reflect.DeepEqual(v, want) {
			t.Fatalf("ReleaseBatch: got %v, %v; want %v", v, err, want)
		}
		figures("o2 and o5 released", 2, 2, 0)
		// A late payment of o1 takes M's two units again; of o2, S's one.
		for _, r := range []struct {
			order, user string
			qty         int
			variant     string
		}{{"o1", "u1", 2, "M"}, {"o2", "u2", 1, "S"}} {
			if code, err := lua.Retake.Run(ctx, rdb, lua.RetakeKeys(saleID), r.order, r.user, r.qty, r.variant).Int(); err != nil || code != 0 {
				t.Fatalf("Retake %s: got %d, %v", r.order, code, err)
			}
		}
		figures("o1 and o2 retaken", 5, 3, 2)
		// With M full again, retaking o5 (released, M) finds no unit.
		if code, err := lua.Retake.Run(ctx, rdb, lua.RetakeKeys(saleID), "o5", "u5", 1, "M").Int(); err != nil || code != 3 {
			t.Fatalf("Retake o5 into a full M: got %d, %v; want 3", code, err)
		}
		figures("o5 not retaken", 5, 3, 2)
	})
}

// TestVariantOnOneStock: a variant named on a sale of one stock is
// refused (Reserve and ReserveMany), and changes nothing.
func TestVariantOnOneStock(t *testing.T) {
	forEach(t, backends(t), "one stock", func(t *testing.T, ctx context.Context, rdb *redis.Client) {
		prepare(t, ctx, rdb, sale{total: 3, state: "open"})
		v, err := lua.Reserve.Run(ctx, rdb, lua.ReserveKeys(saleID), "o1", "u1", 1, 1700000000123, saleID, "", "", "S").Slice()
		if want := []any{int64(lua.ReserveBadVariant), ""}; err != nil || !reflect.DeepEqual(v, want) {
			t.Fatalf("Reserve: got %v, %v; want %v", v, err, want)
		}
		v, err = lua.ReserveMany.Run(ctx, rdb, lua.ReserveKeys(saleID), 1700000000123, saleID, "", "o1", "u1", 1, "S", "o2", "u2", 1, "").Slice()
		if want := []any{int64(lua.ReserveBadVariant), "", int64(0), "o2"}; err != nil || !reflect.DeepEqual(v, want) {
			t.Fatalf("ReserveMany: got %v, %v; want %v", v, err, want)
		}
		if b := hget(t, ctx, rdb, lua.SaleKey(saleID), lua.FieldBooked); b != "1" {
			t.Errorf("booked: got %s, want 1", b)
		}
	})
}
