package sqldb

import (
	"context"
	"reflect"
	"testing"

	"github.com/flashgate/flashgate"
)

// TestVariants: a sale's variants and an order's variant round-trip, and
// VariantFigures counts each variant's live and all-rows units with the
// whole sale's from one query.
func TestVariants(t *testing.T) {
	each(t, func(t *testing.T, _ string, db *DB) {
		ctx := context.Background()
		vs := []flashgate.Variant{{ID: "42", Name: "EU 42", Total: 3}, {ID: "43", Name: "EU 43 \"wide\"", Total: 5}}
		if err := db.CreateSale(ctx, flashgate.Sale{ID: "v", Name: "Shoe", PriceCents: 100, Total: 8, Variants: vs}); err != nil {
			t.Fatalf("CreateSale: %v", err)
		}
		if err := db.CreateSale(ctx, flashgate.Sale{ID: "one", Name: "One", PriceCents: 100, Total: 8}); err != nil {
			t.Fatalf("CreateSale: %v", err)
		}
		got, err := db.Sale(ctx, "v")
		if err != nil || !reflect.DeepEqual(got.Variants, vs) {
			t.Errorf("Sale(v) variants: got %+v, %v; want %+v", got.Variants, err, vs)
		}
		if got, err := db.Sale(ctx, "one"); err != nil || got.Variants != nil {
			t.Errorf("Sale(one) variants: got %+v, %v; want none", got.Variants, err)
		}
		all, err := db.Sales(ctx)
		if err != nil || len(all) != 2 || !reflect.DeepEqual(all[1].Variants, vs) {
			t.Errorf("Sales: got %+v, %v; want v's variants %+v", all, err, vs)
		}

		o := func(id, user, variant string, qty int64) flashgate.Order {
			x := order(id, "v", user, qty, t0)
			x.Variant = variant
			return x
		}
		if n, err := db.InsertOrders(ctx, []flashgate.Order{o("a", "u1", "42", 2), o("b", "u2", "43", 1), o("c", "u3", "43", 3), o("d", "u4", "", 1)}); err != nil || n != 4 {
			t.Fatalf("InsertOrders: got %d, %v; want 4", n, err)
		}
		for id, want := range map[string]string{"a": "42", "b": "43", "d": ""} {
			if got, err := db.Order(ctx, id); err != nil || got.Variant != want {
				t.Errorf("Order(%s): got variant %q, %v; want %q", id, got.Variant, err, want)
			}
		}
		if o, err := db.Transition(ctx, "c", []flashgate.OrderStatus{flashgate.StatusPendingPayment}, flashgate.StatusCancelled, t0); err != nil || o.Variant != "43" {
			t.Fatalf("Transition(c): got %+v, %v; want variant 43", o, err)
		}
		sale, per, err := db.VariantFigures(ctx, "v")
		if err != nil {
			t.Fatal(err)
		}
		whole, err := db.Figures(ctx, "v")
		if err != nil {
			t.Fatal(err)
		}
		if sale != whole {
			t.Errorf("VariantFigures' sale figures: got %+v, want Figures' %+v", sale, whole)
		}
		if sale.LiveUnits != 4 || sale.PersistedUnits != 7 {
			t.Errorf("sale: got live %d, all-rows %d units; want 4, 7", sale.LiveUnits, sale.PersistedUnits)
		}
		want := map[string][2]int64{"42": {2, 2}, "43": {1, 4}}
		if len(per) != len(want) {
			t.Errorf("variants: got %+v, want %v", per, want)
		}
		for id, w := range want {
			if f := per[id]; f.LiveUnits != w[0] || f.PersistedUnits != w[1] {
				t.Errorf("variant %s: got live %d, all-rows %d units; want %d, %d", id, f.LiveUnits, f.PersistedUnits, w[0], w[1])
			}
		}
	})
}
