package controlplane

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/lua"
)

func TestValidateVariants(t *testing.T) {
	vs := func(n int) []flashgate.Variant {
		out := make([]flashgate.Variant, n)
		for i := range out {
			out[i] = flashgate.Variant{ID: "v" + strings.Repeat("x", i%10) + string(rune('a'+i%26)) + string(rune('a'+i/26)), Name: "V", Total: 1}
		}
		return out
	}
	base := func(mod func(*flashgate.Sale)) flashgate.Sale {
		s := flashgate.Sale{ID: "v", Name: "V", Total: 8, Variants: []flashgate.Variant{{ID: "S", Name: "Small", Total: 3}, {ID: "M", Name: "Medium", Total: 5}}}
		mod(&s)
		return s
	}
	cases := []struct {
		name  string
		sale  flashgate.Sale
		field string // "" = valid
	}{
		{"two variants", base(func(*flashgate.Sale) {}), ""},
		{"one stock", base(func(s *flashgate.Sale) { s.Variants = nil }), ""},
		{"total omitted takes the sum", variantTotal(base(func(s *flashgate.Sale) { s.Total = 0 })), ""},
		{"a hundred", variantTotal(flashgate.Sale{ID: "v", Name: "V", Variants: vs(100)}), ""},
		{"fair with variants", base(func(s *flashgate.Sale) { st := t0; s.Queue, s.StartsAt = flashgate.QueueFair, &st }), ""},
		{"empty list", base(func(s *flashgate.Sale) { s.Variants = []flashgate.Variant{} }), "variants"},
		{"a hundred and one", variantTotal(flashgate.Sale{ID: "v", Name: "V", Variants: vs(101)}), "variants"},
		{"total not the sum", base(func(s *flashgate.Sale) { s.Total = 9 }), "total"},
		{"bad id", base(func(s *flashgate.Sale) { s.Variants[1].ID = "M:L" }), "variants[1].id"},
		{"long id", base(func(s *flashgate.Sale) { s.Variants[0].ID = strings.Repeat("a", 17) }), "variants[0].id"},
		{"empty id", base(func(s *flashgate.Sale) { s.Variants[0].ID = "" }), "variants[0].id"},
		{"id twice", base(func(s *flashgate.Sale) { s.Variants[1].ID = "S" }), "variants[1].id"},
		{"no name", base(func(s *flashgate.Sale) { s.Variants[0].Name = "" }), "variants[0].name"},
		{"long name", base(func(s *flashgate.Sale) { s.Variants[0].Name = strings.Repeat("n", 101) }), "variants[0].name"},
		{"zero total", base(func(s *flashgate.Sale) { s.Variants[1].Total, s.Total = 0, 3 }), "variants[1].total"},
		{"negative total", base(func(s *flashgate.Sale) { s.Variants[1].Total, s.Total = -5, -2 }), "variants[1].total"},
		{"with buckets", base(func(s *flashgate.Sale) { s.Buckets = 2 }), ""},
		{"per_user over the sum", base(func(s *flashgate.Sale) { s.PerUser = 9 }), "per_user"},
	}
	for _, c := range cases {
		err := validateSale(c.sale)
		var fe *flashgate.FieldError
		switch {
		case c.field == "" && err != nil:
			t.Errorf("%s: got %v, want valid", c.name, err)
		case c.field != "" && (!errors.As(err, &fe) || fe.Field != c.field):
			t.Errorf("%s: got %v, want a bad %s", c.name, err, c.field)
		}
	}
}

// TestVariantSale: a sale created with variants (total omitted) is stored
// with them and prepared in Redis with each variant's figures; the re-sync
// sets each variant's booked from the database's rows of it (a released
// order, a unit reserved but not yet persisted) and the sale's booked to
// their sum; after Redis loses everything, the rebuild restores each
// variant's statics and figures; the admin status shows them.
func TestVariantSale(t *testing.T) {
	for _, dsn := range []struct{ name string }{{"sqlite"}, {"postgres"}} {
		t.Run(dsn.name, func(t *testing.T) {
			d := sqliteDSN(t)
			if dsn.name == "postgres" {
				d = postgresDSN(t)
			}
			testVariantSale(t, newEnv(t, d, nil))
		})
	}
}

func testVariantSale(t *testing.T, e *env) {
	ctx := e.ctx
	variants := []flashgate.Variant{{ID: "S", Name: "Small", Total: 3}, {ID: "M", Name: "Medium", Total: 5}}
	sale, err := e.svc.CreateSale(ctx, flashgate.Sale{ID: "shoe", Name: "Shoe", PriceCents: 500, Variants: variants})
	if err != nil {
		t.Fatalf("CreateSale: %v", err)
	}
	if sale.Total != 8 {
		t.Errorf("CreateSale: got total %d, want 8 (the sum)", sale.Total)
	}
	if row, err := e.db.Sale(ctx, "shoe"); err != nil || row.Total != 8 || !reflect.DeepEqual(row.Variants, variants) {
		t.Errorf("stored sale: got %+v, %v; want total 8, variants %+v", row, err, variants)
	}
	if err := e.svc.Start(ctx, "shoe"); err != nil {
		t.Fatal(err)
	}
	hash := func(want map[string]string) {
		t.Helper()
		for f, w := range want {
			if got, _ := e.rdb.HGet(ctx, lua.SaleKey("shoe"), f).Result(); got != w {
				t.Errorf("sale hash %s: got %q, want %q", f, got, w)
			}
		}
	}
	hash(map[string]string{lua.FieldVariants: "S,M", lua.FieldTotal: "8",
		lua.VariantField("S", lua.FieldTotal): "3", lua.VariantField("M", lua.FieldTotal): "5",
		lua.VariantField("S", lua.FieldBooked): "0", lua.VariantField("M", lua.FieldReserved): "0"})

	// Five units reserved as reserve.lua books them: two of S, three of M,
	// of which four reach the database; then one S order is cancelled.
	key := lua.SaleKey("shoe")
	for f, n := range map[string]int64{lua.FieldBooked: 5, lua.FieldReserved: 5,
		lua.VariantField("S", lua.FieldBooked): 2, lua.VariantField("S", lua.FieldReserved): 2,
		lua.VariantField("M", lua.FieldBooked): 3, lua.VariantField("M", lua.FieldReserved): 3} {
		if err := e.rdb.HIncrBy(ctx, key, f, n).Err(); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	var rows []flashgate.Order
	for i, v := range []string{"S", "S", "M", "M"} {
		id := "vo" + string(rune('1'+i))
		rows = append(rows, flashgate.Order{ID: id, SaleID: "shoe", UserID: "u" + id, Quantity: 1, PriceCents: 500, Variant: v, CreatedAt: now, UpdatedAt: now})
	}
	if _, err := e.db.InsertOrders(ctx, rows); err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.Transition(ctx, "vo1", []flashgate.OrderStatus{flashgate.StatusPendingPayment}, flashgate.StatusCancelled, now); err != nil {
		t.Fatal(err)
	}
	if _, after, err := e.svc.Resync(ctx, "shoe"); err != nil || after.Booked != 4 {
		t.Fatalf("Resync: got booked %d, %v; want 4 (S 1 live, M 2 live and 1 not yet persisted)", after.Booked, err)
	}
	hash(map[string]string{lua.VariantField("S", lua.FieldBooked): "1", lua.VariantField("S", lua.FieldReserved): "2",
		lua.VariantField("M", lua.FieldBooked): "3", lua.VariantField("M", lua.FieldReserved): "3"})
	status := func(want []VariantStatus) {
		t.Helper()
		st, err := e.svc.SaleStatus(ctx, "shoe")
		if err != nil {
			t.Fatal(err)
		}
		for i := range st.Variants {
			st.Variants[i].Orders = flashgate.SaleFigures{LiveUnits: st.Variants[i].Orders.LiveUnits, PersistedUnits: st.Variants[i].Orders.PersistedUnits}
		}
		if !reflect.DeepEqual(st.Variants, want) {
			t.Errorf("status variants: got %+v, want %+v", st.Variants, want)
		}
	}
	status([]VariantStatus{
		{ID: "S", Name: "Small", Total: 3, Booked: 1, Reserved: 2, Remaining: 2, Orders: flashgate.SaleFigures{LiveUnits: 1, PersistedUnits: 2}},
		{ID: "M", Name: "Medium", Total: 5, Booked: 3, Reserved: 3, Remaining: 2, Orders: flashgate.SaleFigures{LiveUnits: 2, PersistedUnits: 2}},
	})

	// Redis loses everything (the unpersisted M unit with it): the rebuild
	// restores the variants from the sale row and each one's figures from
	// its rows.
	e.flushAll()
	if _, after, err := e.svc.Resync(ctx, "shoe"); err != nil || after.Booked != 3 {
		t.Fatalf("Resync after the loss: got booked %d, %v; want 3", after.Booked, err)
	}
	hash(map[string]string{lua.FieldVariants: "S,M", lua.FieldTotal: "8",
		lua.VariantField("S", lua.FieldTotal): "3", lua.VariantField("M", lua.FieldTotal): "5",
		lua.VariantField("S", lua.FieldBooked): "1", lua.VariantField("S", lua.FieldReserved): "2",
		lua.VariantField("M", lua.FieldBooked): "2", lua.VariantField("M", lua.FieldReserved): "2"})
	status([]VariantStatus{
		{ID: "S", Name: "Small", Total: 3, Booked: 1, Reserved: 2, Remaining: 2, Orders: flashgate.SaleFigures{LiveUnits: 1, PersistedUnits: 2}},
		{ID: "M", Name: "Medium", Total: 5, Booked: 2, Reserved: 2, Remaining: 3, Orders: flashgate.SaleFigures{LiveUnits: 2, PersistedUnits: 2}},
	})
}

// TestVariantRefundExpiry: a refund and an expiry of a variant sale's
// orders give their units back to their own variants (the release the
// Service makes, and the re-sync's delivery of a release that failed), and
// a re-sync after them leaves each variant's booked equal to its live
// units.
func TestVariantRefundExpiry(t *testing.T) {
	e := newEnv(t, sqliteDSN(t), nil)
	ctx := e.ctx
	if _, err := e.svc.CreateSale(ctx, flashgate.Sale{ID: "tee", Name: "Tee", PriceCents: 500,
		Variants: []flashgate.Variant{{ID: "S", Name: "Small", Total: 2}, {ID: "M", Name: "Medium", Total: 3}}}); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.Start(ctx, "tee"); err != nil {
		t.Fatal(err)
	}
	for i, v := range []string{"S", "S", "M", "M", "M"} {
		res, err := lua.Reserve.Run(ctx, e.rdb, lua.ReserveKeys("tee"), fmt.Sprintf("t%d", i), fmt.Sprintf("u%d", i), 1, e.clock.Now().UnixMilli(), "tee", "", "", v).Slice()
		if err != nil || res[0] != int64(lua.ReserveOK) {
			t.Fatalf("reserving %s for u%d: %v, %v", v, i, res, err)
		}
	}
	orders := e.persist("tee")
	byID := map[string]flashgate.Order{}
	for _, o := range orders {
		byID[o.ID] = o
	}
	booked := func(step string, s, m int64) {
		t.Helper()
		for v, want := range map[string]int64{"S": s, "M": m} {
			if got := field(t, e.rdb, "tee", lua.VariantField(v, lua.FieldBooked)); got != want {
				t.Errorf("%s: %s booked %d, want %d", step, v, got, want)
			}
		}
		if got := field(t, e.rdb, "tee", lua.FieldBooked); got != s+m {
			t.Errorf("%s: the sale's booked %d, want %d", step, got, s+m)
		}
	}
	booked("reserved", 2, 3)
	// t0 (S) and t2 (M) paid, then t0 refunded: S gets its unit back.
	for _, id := range []string{"t0", "t2"} {
		if _, err := e.svc.Pay(ctx, id, byID[id].UserID); err != nil {
			t.Fatalf("Pay(%s): %v", id, err)
		}
	}
	if o, err := e.svc.Refund(ctx, "t0"); err != nil || o.Status != flashgate.StatusRefunded || o.Variant != "S" {
		t.Fatalf("Refund(t0) = %+v, %v; want refunded, variant S", o, err)
	}
	booked("t0 refunded", 1, 3)
	// The unpaid t1 (S), t3 and t4 (M) expire while releases fail: only
	// the re-sync gives their units back, each to its variant.
	e.rel.Fail.Store(true)
	e.clock.Set(t0.Add(16 * time.Minute))
	if n, err := e.svc.ExpireDue(ctx); err != nil || n != 3 {
		t.Fatalf("ExpireDue = %d, %v; want 3", n, err)
	}
	e.rel.Fail.Store(false)
	booked("expired, releases failed", 1, 3)
	if _, _, err := e.svc.Resync(ctx, "tee"); err != nil {
		t.Fatal(err)
	}
	booked("after the re-sync", 0, 1)
	// The freed units sell again, per variant.
	res, err := lua.Reserve.Run(ctx, e.rdb, lua.ReserveKeys("tee"), "t9", "u9", 1, e.clock.Now().UnixMilli(), "tee", "", "", "S").Slice()
	if err != nil || res[0] != int64(lua.ReserveOK) {
		t.Fatalf("reserving a freed S: %v, %v", res, err)
	}
	booked("a freed S sold", 1, 1)
}
