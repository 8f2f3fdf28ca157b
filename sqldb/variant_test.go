package sqldb

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

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

// recountVariants computes a sale's figures per variant from its rows, as
// VariantFigures did before the counters: the reference they must equal.
func recountVariants(t *testing.T, db *DB, sale string) map[string]flashgate.SaleFigures {
	t.Helper()
	rows, err := db.r.QueryContext(context.Background(), db.q(`SELECT variant, status, COUNT(*), CAST(SUM(quantity) AS BIGINT)
		FROM orders WHERE sale_id = ? AND variant <> '' GROUP BY variant, status`), sale)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]flashgate.SaleFigures{}
	for rows.Next() {
		var (
			v, st         string
			orders, units int64
		)
		if err := rows.Scan(&v, &st, &orders, &units); err != nil {
			t.Fatal(err)
		}
		f := out[v]
		addFigures(&f, flashgate.OrderStatus(st), orders, units)
		out[v] = f
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkVariantFigures compares VariantFigures of sale with a recount of
// its rows (a variant whose counters all went back to 0 counts as absent).
func checkVariantFigures(t *testing.T, db *DB, sale string) {
	t.Helper()
	all, per, err := db.VariantFigures(context.Background(), sale)
	if err != nil {
		t.Fatal(err)
	}
	if want := recount(t, db, sale); all != want {
		t.Errorf("VariantFigures(%s) of the sale: got %+v, want %+v", sale, all, want)
	}
	want := recountVariants(t, db, sale)
	for v, f := range per {
		if f != want[v] {
			t.Errorf("VariantFigures(%s) of %q: got %+v, want %+v", sale, v, f, want[v])
		}
	}
	for v, f := range want {
		if _, ok := per[v]; !ok {
			t.Errorf("VariantFigures(%s): %q missing, want %+v", sale, v, f)
		}
	}
}

// TestVariantCountersFollowRows: after inserts across variants (with
// conflicts), transitions, an expiry batch and hand-made UPDATEs (one
// moving an order to another variant) and a DELETE, VariantFigures, which
// reads counters, equals a recount of the rows, per variant and for the
// whole sale; a sale of one stock keeps no variant counters.
func TestVariantCountersFollowRows(t *testing.T) {
	each(t, func(t *testing.T, _ string, db *DB) {
		ctx := context.Background()
		rng := rand.New(rand.NewPCG(3, 4))
		var batch []flashgate.Order
		for i := 0; i < 240; i++ {
			sale := []string{"a", "b"}[i%2]
			o := order(fmt.Sprintf("o%03d", i), sale, fmt.Sprintf("u%d", i), int64(1+rng.IntN(3)), t0.Add(time.Duration(i)*time.Second))
			if sale == "a" {
				o.Variant = []string{"S", "M", "L", "XL", ""}[rng.IntN(5)]
			}
			batch = append(batch, o)
		}
		rng.Shuffle(len(batch), func(i, j int) { batch[i], batch[j] = batch[j], batch[i] })
		for start := 0; start < len(batch); start += 60 {
			if n, err := db.InsertOrders(ctx, batch[start:start+60]); err != nil || n != 60 {
				t.Fatalf("InsertOrders: got %d, %v; want 60", n, err)
			}
		}
		if n, err := db.InsertOrders(ctx, batch[:30]); err != nil || n != 0 {
			t.Fatalf("InsertOrders again: got %d, %v; want 0", n, err)
		}
		checkVariantFigures(t, db, "a")
		pp := []flashgate.OrderStatus{flashgate.StatusPendingPayment}
		for i := 0; i < 80; i++ {
			id := fmt.Sprintf("o%03d", rng.IntN(240))
			to := []flashgate.OrderStatus{flashgate.StatusPaid, flashgate.StatusCancelled}[rng.IntN(2)]
			_, _ = db.Transition(ctx, id, pp, to, t0)
		}
		if _, err := db.ExpireDue(ctx, t0.Add(100*time.Second), t0, 50, 1); err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{
			`UPDATE orders SET status = 'refunded' WHERE sale_id = 'a' AND status = 'paid' AND order_id < 'o100'`,
			`UPDATE orders SET variant = 'S' WHERE order_id IN ('o200', 'o202')`,
			`UPDATE orders SET variant = '' WHERE order_id = 'o204'`,
			`DELETE FROM orders WHERE order_id IN ('o206', 'o208')`,
		} {
			if _, err := db.w.ExecContext(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		checkVariantFigures(t, db, "a")
		if _, per, err := db.VariantFigures(ctx, "b"); err != nil || len(per) != 0 {
			t.Errorf("VariantFigures(b) of a sale of one stock: got %+v, %v; want no variants", per, err)
		}
	})
}

// TestMigrationFillsVariantCounters: a database written by version 10 (no
// variant counters) gets counters equal to its rows when it upgrades.
func TestMigrationFillsVariantCounters(t *testing.T) {
	each(t, func(t *testing.T, dsn string, db *DB) {
		ctx := context.Background()
		var batch []flashgate.Order
		for i := 0; i < 40; i++ {
			o := order(fmt.Sprintf("m%02d", i), "s", fmt.Sprintf("u%d", i), int64(1+i%2), t0)
			o.Variant = []string{"S", "M", ""}[i%3]
			o.Status = []flashgate.OrderStatus{flashgate.StatusPendingPayment, flashgate.StatusPaid, flashgate.StatusRefunded, flashgate.StatusExpired}[i%4]
			batch = append(batch, o)
		}
		down := []string{`DROP TABLE variant_counts`, `DELETE FROM schema_migrations WHERE version = 11`}
		if db.dialect == DialectPostgres {
			down = append([]string{`DROP TRIGGER orders_variant_count_insert ON orders`, `DROP TRIGGER orders_variant_count_update ON orders`,
				`DROP TRIGGER orders_variant_count_delete ON orders`, `DROP FUNCTION flashgate_count_variants()`}, down...)
		} else {
			down = append([]string{`DROP TRIGGER orders_variant_count_insert`, `DROP TRIGGER orders_variant_count_update`,
				`DROP TRIGGER orders_variant_count_delete`}, down...)
		}
		for _, s := range down {
			if _, err := db.w.ExecContext(ctx, s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
		if n, err := db.InsertOrders(ctx, batch); err != nil || n != 40 {
			t.Fatalf("InsertOrders: got %d, %v; want 40", n, err)
		}
		up := open(t, dsn)
		checkVariantFigures(t, up, "s")
		if _, err := up.Transition(ctx, "m00", []flashgate.OrderStatus{flashgate.StatusPendingPayment}, flashgate.StatusCancelled, t0); err != nil {
			t.Fatal(err)
		}
		checkVariantFigures(t, up, "s")
	})
}
