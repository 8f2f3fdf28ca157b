package inventory_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/inventory"
	"github.com/flashgate/flashgate/lua"
)

// prepVariants creates the open sale id sold in the given variants (ids in
// order, totals as given) with per-user limit perUser, as the control plane
// does: Prepare with a variants spec.
func prepVariants(tb testing.TB, rdb redis.UniversalClient, id string, perUser int64, ids []string, totals []int64) {
	tb.Helper()
	ctx := context.Background()
	var sum int64
	spec := make([]string, len(ids))
	for i, v := range ids {
		sum += totals[i]
		spec[i] = v + ":" + strconv.FormatInt(totals[i], 10)
	}
	n, err := lua.Prepare.Run(ctx, rdb, lua.SaleKeys(id),
		sum, flashgate.AdmitCap(sum, 0), perUser, 500, "", "", strings.Join(spec, ",")).Int64()
	if err != nil || n != 1 {
		tb.Fatalf("Prepare %s: got %d, %v; want 1", id, n, err)
	}
	if n, err := lua.SetState.Run(ctx, rdb, lua.SaleKeys(id), "open").Int64(); err != nil || n != 1 {
		tb.Fatalf("SetState %s open: got %d, %v; want 1", id, n, err)
	}
}

// variantBooked reads variant v's booked of sale id.
func variantBooked(tb testing.TB, rdb redis.UniversalClient, id, v string) int64 {
	tb.Helper()
	n, err := rdb.HGet(context.Background(), lua.SaleKey(id), lua.VariantField(v, lua.FieldBooked)).Int64()
	if err != nil {
		tb.Fatalf("HGET %s booked: %v", v, err)
	}
	return n
}

// testVariants, a part of testContract: on a sale of variants a variant sells out while the others
// sell, the order's entry names its variant, one live order per buyer
// across variants, a missing, unknown or malformed variant (or one on a
// sale of one stock) is 400 naming the field with nothing taken, and a
// release gives the unit back to its variant, where it sells again.
func testVariants(t *testing.T, rdb redis.UniversalClient, r reserver) {
	ctx := context.Background()
	prepVariants(t, rdb, "sizes", 1, []string{"S", "M", "L"}, []int64{1, 2, 3})
	prepSale(t, rdb, "plain", 5, 1, "open")

	idS, err := r.Reserve(ctx, "sizes", "alice", "S", 1)
	if err != nil {
		t.Fatalf("Reserve S: %v", err)
	}
	if _, err := r.Reserve(ctx, "sizes", "bob", "S", 1); !errors.Is(err, flashgate.ErrSoldOut) {
		t.Errorf("Reserve of the sold-out S: got %v, want %v", err, flashgate.ErrSoldOut)
	}
	idM, err := r.Reserve(ctx, "sizes", "bob", "M", 1)
	if err != nil {
		t.Fatalf("Reserve M while S is sold out: %v", err)
	}
	var pe *flashgate.PurchasedError
	if _, err := r.Reserve(ctx, "sizes", "alice", "L", 1); !errors.As(err, &pe) || pe.OrderID != idS {
		t.Errorf("alice's second order, of L: got %v, want PurchasedError{%s}", err, idS)
	}
	msgs, err := rdb.XRange(ctx, lua.OrdersKey("sizes"), "-", "+").Result()
	if err != nil || len(msgs) != 2 || entry(msgs[0]).Order != idS || entry(msgs[0]).Variant != "S" ||
		entry(msgs[1]).Order != idM || entry(msgs[1]).Variant != "M" {
		t.Errorf("stream: got %v, %v; want %s of S and %s of M", msgs, err, idS, idM)
	}

	for _, tc := range []struct{ name, sale, variant string }{
		{"missing", "sizes", ""},
		{"unknown", "sizes", "XL"},
		{"malformed", "sizes", "S,M"},
		{"a field name", "sizes", "S:booked"},
		{"too long", "sizes", strings.Repeat("S", flashgate.MaxVariantIDLen+1)},
		{"on a sale of one stock", "plain", "S"},
	} {
		id, err := r.Reserve(ctx, tc.sale, "carol", tc.variant, 1)
		var fe *flashgate.FieldError
		if !errors.Is(err, flashgate.ErrBadRequest) || id != "" {
			t.Errorf("%s variant %q: got %q, %v; want %v", tc.name, tc.variant, id, err, flashgate.ErrBadRequest)
		} else if _, isClient := r.(*inventory.Client); !isClient && (!errors.As(err, &fe) || fe.Field != "variant") {
			t.Errorf("%s variant %q: got %v, want a FieldError on variant", tc.name, tc.variant, err)
		}
	}
	if got := booked(t, rdb, "sizes"); got != 2 {
		t.Errorf("booked after the refusals: got %d, want 2", got)
	}
	if got := booked(t, rdb, "plain"); got != 0 {
		t.Errorf("booked of the plain sale after the refusals: got %d, want 0", got)
	}

	o := flashgate.Order{ID: idS, SaleID: "sizes", UserID: "alice", Quantity: 1, Variant: "S"}
	if ok, err := r.Release(ctx, o); !ok || err != nil {
		t.Fatalf("Release of S: got %v, %v; want true, nil", ok, err)
	}
	if got := variantBooked(t, rdb, "sizes", "S"); got != 0 {
		t.Errorf("S booked after its release: got %d, want 0", got)
	}
	if _, err := r.Reserve(ctx, "sizes", "dave", "S", 1); err != nil {
		t.Errorf("Reserve of the released S: %v", err)
	}
}

// TestVariantsCrowd sends a crowd — repeat buyers, all 20 variants, the
// popular ones most — through the batched path (one script call of the
// sale out at a time, so reserves go in batches naming many variants), and
// wants each variant sold to no more than its total, its booked the orders
// answered for it, the popular ones sold out, the sale's figures the sums,
// and each order's entry naming the variant it was sold from; then
// releases half the orders in one ReleaseBatch and wants the units back in
// their variants.
func TestVariantsCrowd(t *testing.T) {
	_, rdb := newRedis(t)
	ctx := context.Background()
	svc := inventory.New(rdb, inventory.Config{Logger: quiet(), ReserveCallsInFlight: 1})
	ids := make([]string, 20)
	totals := make([]int64, 20)
	var sum int64
	for i := range ids {
		ids[i] = strconv.Itoa(36 + i)
		totals[i] = int64(5 + i%4*5)
		sum += totals[i]
	}
	prepVariants(t, rdb, "crowd", 1, ids, totals)
	before := redistest.Commands(t, rdb)["evalsha"].Calls
	const attempts, buyers = 4000, 3000
	var mu sync.Mutex
	won := map[string]flashgate.Order{} // user → order
	var sold, soldOut, again atomic.Int64
	run(attempts, 128, func(i int) {
		user := "user-" + strconv.Itoa(i%buyers)
		v := ids[(i*i)%7] // skewed: most want 7 of the 20
		if i%3 == 0 {
			v = ids[i%len(ids)]
		}
		id, err := svc.Reserve(ctx, "crowd", user, v, 1)
		var pe *flashgate.PurchasedError
		switch {
		case err == nil:
			sold.Add(1)
			mu.Lock()
			if prev, ok := won[user]; ok {
				t.Errorf("user %s bought twice: %s and %s", user, prev.ID, id)
			}
			won[user] = flashgate.Order{ID: id, SaleID: "crowd", UserID: user, Quantity: 1, Variant: v}
			mu.Unlock()
		case errors.Is(err, flashgate.ErrSoldOut):
			soldOut.Add(1)
		case errors.As(err, &pe):
			again.Add(1)
		default:
			t.Errorf("Reserve %s of %s: %v", user, v, err)
		}
	})
	scripts := redistest.Commands(t, rdb)["evalsha"].Calls - before
	t.Logf("%d sold, %d sold out, %d already purchased, in %d script calls", sold.Load(), soldOut.Load(), again.Load(), scripts)
	if scripts >= attempts/2 {
		t.Errorf("script calls: got %d for %d reserves, want fewer than half (batches)", scripts, attempts)
	}
	perVariant := map[string]int64{}
	for _, o := range won {
		perVariant[o.Variant]++
	}
	for i, v := range ids {
		got := variantBooked(t, rdb, "crowd", v)
		if got > totals[i] || got != perVariant[v] {
			t.Errorf("variant %s: booked %d, orders answered %d, total %d", v, got, perVariant[v], totals[i])
		}
	}
	for _, v := range ids[:7] {
		if perVariant[v] != totals[slices.Index(ids, v)] {
			t.Errorf("popular variant %s: sold %d of %d, want it sold out", v, perVariant[v], totals[slices.Index(ids, v)])
		}
	}
	if soldOut.Load() == 0 {
		t.Error("no sold-out answer: the crowd must outnumber the popular variants")
	}
	if got := booked(t, rdb, "crowd"); got != sold.Load() || got > sum {
		t.Errorf("booked: got %d, want the %d sold (total %d)", got, sold.Load(), sum)
	}
	checkSums(t, rdb, "crowd", ids)
	msgs, err := rdb.XRange(ctx, lua.OrdersKey("crowd"), "-", "+").Result()
	if err != nil || int64(len(msgs)) != sold.Load() {
		t.Fatalf("stream: got %d entries, %v; want %d", len(msgs), err, sold.Load())
	}
	for _, m := range msgs {
		e := entry(m)
		if o, ok := won[e.User]; !ok || o.ID != e.Order || o.Variant != e.Variant {
			t.Errorf("entry %s of %s, variant %q: the buyer was answered %+v", e.Order, e.User, e.Variant, o)
		}
	}

	// Half the orders released: each unit back in its variant.
	var rel []flashgate.Order
	back := map[string]int64{}
	for _, o := range won {
		if len(rel) < len(won)/2 {
			rel = append(rel, o)
			back[o.Variant]++
		}
	}
	n, err := svc.ReleaseBatch(ctx, rel)
	if err != nil || n != len(rel) {
		t.Fatalf("ReleaseBatch: got %d, %v; want %d", n, err, len(rel))
	}
	for _, v := range ids {
		if got, want := variantBooked(t, rdb, "crowd", v), perVariant[v]-back[v]; got != want {
			t.Errorf("variant %s after the releases: booked %d, want %d", v, got, want)
		}
	}
	checkSums(t, rdb, "crowd", ids)
}

// checkSums wants sale id's booked and reserved to be its variants' sums.
func checkSums(t *testing.T, rdb redis.UniversalClient, id string, ids []string) {
	t.Helper()
	h, err := rdb.HGetAll(context.Background(), lua.SaleKey(id)).Result()
	if err != nil {
		t.Fatal(err)
	}
	var b, r int64
	for _, v := range ids {
		x, _ := strconv.ParseInt(h[lua.VariantField(v, lua.FieldBooked)], 10, 64)
		y, _ := strconv.ParseInt(h[lua.VariantField(v, lua.FieldReserved)], 10, 64)
		b, r = b+x, r+y
	}
	if got, want := h[lua.FieldBooked]+" "+h[lua.FieldReserved], strconv.FormatInt(b, 10)+" "+strconv.FormatInt(r, 10); got != want {
		t.Errorf("booked and reserved: got %s, want the variants' sums %s", got, want)
	}
}

// TestVariantMetrics: a reserve refused for its variant — unknown, missing,
// malformed, or named on a sale of one stock — counts under
// flashgate_reserve_total{outcome="bad_variant"}, not bad_request, which
// keeps a bad quantity.
func TestVariantMetrics(t *testing.T) {
	_, rdb := newRedis(t)
	prepVariants(t, rdb, "sizes", 1, []string{"S", "M"}, []int64{1, 1})
	prepSale(t, rdb, "plain", 1, 1, "open")
	reg := prometheus.NewRegistry()
	svc := inventory.New(rdb, inventory.Config{Logger: quiet(), Metrics: reg})
	ctx := context.Background()
	for _, c := range []struct{ sale, variant string }{{"sizes", "XL"}, {"sizes", ""}, {"sizes", "S,M"}, {"plain", "S"}} {
		if _, err := svc.Reserve(ctx, c.sale, "u1", c.variant, 1); !errors.Is(err, flashgate.ErrBadRequest) {
			t.Fatalf("Reserve %s of %q: got %v, want %v", c.sale, c.variant, err, flashgate.ErrBadRequest)
		}
	}
	if _, err := svc.Reserve(ctx, "sizes", "u1", "S", 2); !errors.Is(err, flashgate.ErrBadRequest) {
		t.Fatalf("Reserve of 2 over per_user 1: got %v, want %v", err, flashgate.ErrBadRequest)
	}
	if _, err := svc.Reserve(ctx, "sizes", "u1", "S", 1); err != nil {
		t.Fatalf("Reserve S: %v", err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() == "flashgate_reserve_total" {
			for _, m := range mf.GetMetric() {
				got[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
			}
		}
	}
	for outcome, want := range map[string]float64{"bad_variant": 4, "bad_request": 1, "ok": 1} {
		if got[outcome] != want {
			t.Errorf("flashgate_reserve_total{outcome=%q}: got %v, want %v", outcome, got[outcome], want)
		}
	}
}
