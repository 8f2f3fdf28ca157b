package systemtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/lua"
)

// variantSale is the sale TestVariantCrowd sells: three sizes, the first
// the most wanted, two units at most per buyer across them.
var variantSale = flashgate.Sale{ID: "sizes", Name: "Sizes", PriceCents: 100, PerUser: 2,
	Variants: []flashgate.Variant{{ID: "S", Name: "Small", Total: 6}, {ID: "M", Name: "Medium", Total: 3}, {ID: "L", Name: "Large", Total: 2}}}

// skewed is a crowd's order for a variant sale: buyer i wants variant
// i mod 6 mapped onto S, S, S, M, M, L (most want S), and the first four
// buyers want two units, the rest one.
func skewed(users []string) func(string) (int64, string) {
	want := map[string]string{}
	qty := map[string]int64{}
	for i, u := range users {
		want[u] = [...]string{"S", "S", "S", "M", "M", "L"}[i%6]
		qty[u] = 1
		if i < 4 {
			qty[u] = 2
		}
	}
	return func(u string) (int64, string) { return qty[u], want[u] }
}

// wanting is a crowd's order where every buyer wants one unit of v.
func wanting(v string) func(string) (int64, string) {
	return func(string) (int64, string) { return 1, v }
}

// TestVariantCrowd runs crowds over real HTTP against every tier on a sale
// sold in three variants, and checks each variant's invariants: its live
// units never above its total, every 201 a row of the variant its buyer
// asked for, every sold-out answer naming the variant asked for, live units
// per buyer within per_user across the variants (one live order each), and
// Redis's per-variant figures equal to the rows'. Then two orders are
// cancelled, Redis loses everything (FLUSHALL), and the re-sync rebuilds
// the sale from the database: per variant, exactly the cancelled units sell
// again, to new buyers of those variants, while the sold-out variant still
// answers 409 naming itself and the first crowd cannot buy again. It runs
// on a sale of one hash and on a sale of three buckets, where each
// variant's stock splits over the buckets, the rebalancing moves it and a
// buyer whose home bucket sold out of their size spills to another.
func TestVariantCrowd(t *testing.T) {
	if testing.Short() {
		t.Skip("system test")
	}
	for _, c := range []struct {
		name    string
		buckets int
	}{{"one hash", 0}, {"three buckets", 3}} {
		t.Run(c.name, func(t *testing.T) { testVariantCrowd(t, c.buckets) })
	}
}

func testVariantCrowd(t *testing.T, buckets int) {
	s := startFaultSystem(t, "single")
	s.startGateway(t)
	s.startSink("sink", s.db)
	ctx := context.Background()
	sale := variantSale
	sale.Buckets = buckets
	sale, err := s.cp.CreateSale(ctx, sale)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cp.Start(ctx, sale.ID); err != nil {
		t.Fatal(err)
	}
	users := func(prefix string, n int) []string {
		u := make([]string, n)
		for i := range u {
			u[i] = prefix + strconv.Itoa(i)
		}
		return u
	}

	// A crowd three times the stock, skewed to S, sells most of it.
	first := users("a", 33)
	outs := (&crowd{s: s, sale: sale.ID, users: first, workers: 6, order: skewed(first)}).run(ctx, t)
	// Late waves of one-unit buyers per variant fill what the crowd could
	// not: a variant with one unit left refuses two, and on buckets a home
	// bucket sold out of a size refuses a buyer whose spill finds no bucket
	// with their quantity free. Each of those sold-out answers keeps its
	// admission, so the crowd can fill the admission cap (total × admit
	// ratio attempts) with units left, and the gateway then answers every
	// buyer sold_out until a re-sync raises the cap: what the product
	// promises is that after a re-sync the units left are buyable again
	// (docs/design.md, invariant 4), not that they are before it. So the
	// first wave goes to every variant, and later waves, to the variants
	// with units left, go on until every unit is booked; a unit stuck
	// where no buyer reaches it still fails the check below.
	for _, v := range sale.Variants {
		outs = append(outs, (&crowd{s: s, sale: sale.ID, users: users("fill"+v.ID+"-", int(v.Total)+2), workers: 2, order: wanting(v.ID)}).run(ctx, t)...)
	}
	waves := 0
	testwait.For(20*time.Second, func() bool {
		all, booked := variantBooked(t, s, sale.ID)
		if all >= variantTotal(sale) {
			return true
		}
		waves++
		for _, v := range sale.Variants {
			if booked[v.ID] < v.Total {
				outs = append(outs, (&crowd{s: s, sale: sale.ID, users: users(fmt.Sprintf("fill%s%d-", v.ID, waves), 2), workers: 2, order: wanting(v.ID)}).run(ctx, t)...)
			}
		}
		return false
	})
	t.Logf("fill waves after the first: %d", waves)
	confirmed := checkVariantAnswers(t, outs)
	s.drainAndResync(t, sale.ID)
	live := checkVariantRows(t, s, sale, confirmed)
	for _, v := range sale.Variants {
		if got := live[v.ID]; got != v.Total {
			t.Errorf("variant %s: %d live units after the crowd, want all %d sold", v.ID, got, v.Total)
		}
	}

	// Cancel one order of M and one of L: their units go back to M and L.
	rows, err := s.db.LiveOrders(ctx, sale.ID)
	if err != nil {
		t.Fatal(err)
	}
	freed := map[string]int64{}
	cancelled := map[string]bool{}
	for _, o := range rows {
		if (o.Variant == "M" || o.Variant == "L") && freed[o.Variant] == 0 {
			if _, err := s.cp.Cancel(ctx, o.ID, o.UserID); err != nil {
				t.Fatalf("cancelling %s: %v", o.ID, err)
			}
			freed[o.Variant] = o.Quantity
			cancelled[o.UserID] = true
		}
	}
	if len(freed) != 2 {
		t.Fatalf("found orders of %v to cancel, want M and L", freed)
	}

	if err := flushAll(ctx, s.rdb); err != nil {
		t.Fatal(err)
	}
	if _, ok := testwait.For(10*time.Second, func() bool {
		for _, tag := range append([]string{sale.ID}, bucketTags(sale)...) {
			h, err := s.rdb.HMGet(ctx, lua.SaleKey(tag), lua.FieldTotal, lua.FieldStart).Result()
			if err != nil || h[0] == nil || h[1] != "1" {
				return false
			}
		}
		return true
	}); !ok {
		t.Fatal("the sale was not rebuilt and reopened within 10s of the FLUSHALL")
	}
	_, booked := variantBooked(t, s, sale.ID)
	for _, v := range sale.Variants {
		if want := v.Total - freed[v.ID]; booked[v.ID] != want {
			t.Errorf("variant %s after the rebuild: booked %d, want %d", v.ID, booked[v.ID], want)
		}
	}
	// Each variant's stock is all in the buckets again (once a move
	// between buckets in flight lands): a bucket Redis lost while a re-sync
	// pass was running was once rebuilt with total 0 (and booked 0), its
	// units gone for good.
	if buckets > 0 {
		sums := map[string]int64{}
		if _, ok := testwait.For(10*time.Second, func() bool {
			clear(sums)
			for _, tag := range bucketTags(sale) {
				for _, v := range sale.Variants {
					n, err := s.rdb.HGet(ctx, lua.SaleKey(tag), lua.VariantField(v.ID, lua.FieldTotal)).Int64()
					if err != nil {
						return false
					}
					sums[v.ID] += n
				}
			}
			for _, v := range sale.Variants {
				if sums[v.ID] != v.Total {
					return false
				}
			}
			return true
		}); !ok {
			t.Errorf("after the rebuild: the buckets' totals per variant add up to %v, want each variant's total", sums)
		}
	}

	// The buyers' view shows the freed units once the gateway's cache has
	// read the rebuilt sale (it may lag by its refresh window).
	var view map[string]int64
	if _, ok := testwait.For(10*time.Second, func() bool {
		view = variantsRemaining(t, s, sale.ID)
		return view["S"] == 0 && view["M"] == freed["M"] && view["L"] == freed["L"]
	}); !ok {
		t.Fatalf("GET /api/sales/%s: remaining per variant %v, want S 0, M %d, L %d", sale.ID, view, freed["M"], freed["L"])
	}
	// The first crowd's holders cannot buy again; new buyers get exactly
	// the freed units of their variant, and S stays sold out.
	var holders []string
	for _, o := range rows {
		if !cancelled[o.UserID] {
			holders = append(holders, o.UserID)
		}
	}
	again := (&crowd{s: s, sale: sale.ID, users: holders, workers: 4, order: wanting("M")}).run(ctx, t)
	held := map[string]string{}
	for _, o := range rows {
		held[o.UserID] = o.ID
	}
	// (A holder turned away by the admission cap, which counts every
	// admitted request, hears sold_out: never a second order.)
	for _, o := range again {
		if (o.answer != "409 already_purchased" || o.orderID != held[o.user]) && o.answer != "409 sold_out" {
			t.Errorf("holder %s buying again after the rebuild: %s naming %q, want 409 already_purchased naming %s", o.user, o.answer, o.orderID, held[o.user])
		}
	}
	// New buyers in waves, each variant's, until every unit is booked: the
	// admission cap lets a little more traffic in than units remain, and
	// the re-sync raises it while units remain (as for a sale of one
	// stock). The checks below say whether exactly the freed units sold.
	late := []buyOutcome{}
	wave := 0
	testwait.For(20*time.Second, func() bool {
		for _, v := range sale.Variants {
			late = append(late, (&crowd{s: s, sale: sale.ID, users: users(fmt.Sprintf("late%s%d-", v.ID, wave), 4), workers: 2, order: wanting(v.ID)}).run(ctx, t)...)
		}
		wave++
		all, _ := variantBooked(t, s, sale.ID)
		return all >= variantTotal(sale)
	})
	all := append(outs, late...) // again's answers name orders outs confirmed
	confirmed = checkVariantAnswers(t, all)
	s.drainAndResync(t, sale.ID)
	live = checkVariantRows(t, s, sale, confirmed)
	for _, v := range sale.Variants {
		if got := live[v.ID]; got != v.Total {
			t.Errorf("variant %s: %d live units at the end, want all %d sold again", v.ID, got, v.Total)
		}
	}
	for _, o := range late {
		if o.variant == "S" && o.answer != "409 sold_out" {
			t.Errorf("late buyer %s of sold-out S: %s, want 409 sold_out", o.user, o.answer)
		}
	}
}

// variantBooked is a sale's booked in Redis, of the whole sale and per
// variant, as the admin status reads it (a bucketed sale's summed over its
// buckets).
func variantBooked(t *testing.T, s *faultSystem, sale string) (int64, map[string]int64) {
	t.Helper()
	st, err := s.cp.SaleStatus(s.ctx, sale)
	if err != nil {
		t.Fatalf("SaleStatus: %v", err)
	}
	per := map[string]int64{}
	for _, v := range st.Variants {
		per[v.ID] = v.Booked
	}
	return st.Booked, per
}

// variantTotal is the units of all of sale's variants.
func variantTotal(sale flashgate.Sale) int64 {
	var n int64
	for _, v := range sale.Variants {
		n += v.Total
	}
	return n
}

// variantsRemaining is each variant's remaining in the buyers' view of the
// sale (GET /api/sales/{id}).
func variantsRemaining(t *testing.T, s *faultSystem, sale string) map[string]int64 {
	t.Helper()
	resp, err := http.Get(*s.base.Load() + "/api/sales/" + sale)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v struct {
		Variants []struct {
			ID        string `json:"id"`
			Remaining int64  `json:"remaining"`
		} `json:"variants"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatalf("GET /api/sales/%s: %v", sale, err)
	}
	out := map[string]int64{}
	for _, x := range v.Variants {
		out[x.ID] = x.Remaining
	}
	return out
}

// checkVariantAnswers checks each final answer against what its buyer
// asked: a 201 names the variant asked for, a sold-out answer names it too,
// and no answer is one a buyer should not get; it returns the confirmed
// orders (order id → user), one per user.
func checkVariantAnswers(t *testing.T, outs []buyOutcome) map[string]string {
	t.Helper()
	byAnswer, confirmed, _ := tally(t, outs)
	for _, o := range outs {
		switch o.answer {
		case "201":
			if o.named != o.variant {
				t.Errorf("buyer %s asked for %s and got a 201 naming %q", o.user, o.variant, o.named)
			}
		case "409 sold_out":
			// The whole sale sold out is answered without a variant.
			if o.named != o.variant && o.named != "" {
				t.Errorf("buyer %s asked for %s and got sold out naming %q", o.user, o.variant, o.named)
			}
		case "409 already_purchased":
		default:
			t.Errorf("buyer %s (%s): %s", o.user, o.variant, o.answer)
		}
	}
	t.Logf("answers:%s", answers(byAnswer))
	return confirmed
}

// checkVariantRows checks the database's rows and Redis's figures of a
// variant sale, and returns the live units per variant: every row of a
// known variant, its live units within its total, one live order per user
// within per_user, every confirmed order exactly one row of its user and
// every row confirmed, and each variant's booked in Redis equal to its
// live units (their sum the sale's booked).
func checkVariantRows(t *testing.T, s *faultSystem, sale flashgate.Sale, confirmed map[string]string) map[string]int64 {
	t.Helper()
	live, err := s.db.LiveOrders(s.ctx, sale.ID)
	if err != nil {
		t.Fatal(err)
	}
	released, err := s.db.ReleasedOrders(s.ctx, sale.ID)
	if err != nil {
		t.Fatal(err)
	}
	units := map[string]int64{}
	holders := map[string]string{}
	for _, o := range live {
		if _, ok := sale.Variant(o.Variant); !ok {
			t.Errorf("live row %s has variant %q, not one of the sale's", o.ID, o.Variant)
		}
		if o.Quantity < 1 || o.Quantity > sale.PerUser {
			t.Errorf("live row %s holds %d units, want 1..%d", o.ID, o.Quantity, sale.PerUser)
		}
		if prev, dup := holders[o.UserID]; dup {
			t.Errorf("user %s holds two live orders, %s and %s", o.UserID, prev, o.ID)
		}
		holders[o.UserID] = o.ID
		units[o.Variant] += o.Quantity
	}
	var sum int64
	all, booked := variantBooked(t, s, sale.ID)
	for _, v := range sale.Variants {
		if units[v.ID] > v.Total {
			t.Errorf("variant %s oversold: %d live units, total %d", v.ID, units[v.ID], v.Total)
		}
		if booked[v.ID] != units[v.ID] {
			t.Errorf("variant %s: booked %d in Redis, %d live units in the database", v.ID, booked[v.ID], units[v.ID])
		}
		sum += units[v.ID]
	}
	if all != sum {
		t.Errorf("the sale's booked is %d, its variants' live units sum to %d", all, sum)
	}
	rows := map[string]int{}
	for _, o := range append(append([]flashgate.Order(nil), live...), released...) {
		rows[o.ID]++
		if user, ok := confirmed[o.ID]; !ok || user != o.UserID {
			t.Errorf("row %s of %s (%s, %s) was not answered 201 to its user (%q)", o.ID, o.UserID, o.Variant, o.Status, user)
		}
	}
	for id, user := range confirmed {
		if rows[id] != 1 {
			t.Errorf("order %s confirmed to %s is %d rows, want 1", id, user, rows[id])
		}
	}
	t.Logf("live units per variant: %s", fmt.Sprint(units))
	return units
}

// TestVariantOneOrderPerBuyer is the scalper's try: one buyer sends many
// purchases at once, each naming another size, to two gateways' worth of
// connections; exactly one is answered 201, the others name that order
// (409 already_purchased) or are turned away, and the database holds one
// row for them; on a sale of one hash and on a bucketed one, where some
// sizes are bought through the spill path.
func TestVariantOneOrderPerBuyer(t *testing.T) {
	if testing.Short() {
		t.Skip("system test")
	}
	// On three buckets the sizes are placed so that the buyer's home bucket
	// lacks one or two of them: those tries spill to another bucket while
	// the others reserve at home, at the same moment.
	bucketed := flashgate.Sale{ID: "scalpb", Name: "Sizes", PriceCents: 100, PerUser: 2, Buckets: 3,
		Variants: []flashgate.Variant{{ID: "S", Name: "Small", Total: 3}, {ID: "M", Name: "Medium", Total: 1}, {ID: "L", Name: "Large", Total: 1}}}
	single := variantSale
	single.ID = "scalp"
	for _, sale := range []flashgate.Sale{single, bucketed} {
		t.Run(sale.ID, func(t *testing.T) { testVariantOneOrderPerBuyer(t, sale) })
	}
}

func testVariantOneOrderPerBuyer(t *testing.T, sale flashgate.Sale) {
	s := startFaultSystem(t, "single")
	s.startGateway(t)
	s.startSink("sink", s.db)
	if _, err := s.cp.CreateSale(s.ctx, sale); err != nil {
		t.Fatal(err)
	}
	if err := s.cp.Start(s.ctx, sale.ID); err != nil {
		t.Fatal(err)
	}
	const tries = 24
	users := make([]string, tries)
	for i := range users {
		users[i] = "scalper" // the same buyer every time
	}
	sizes := []string{"S", "M", "L"}
	var n atomic.Int64
	outs := (&crowd{s: s, sale: sale.ID, users: users, workers: tries, order: func(string) (int64, string) {
		return 1, sizes[int(n.Add(1))%len(sizes)]
	}}).run(s.ctx, t)
	created, order := 0, ""
	for _, o := range outs {
		switch o.answer {
		case "201":
			created++
			order = o.orderID
		case "409 already_purchased", "409 sold_out", "429 rate_limited":
		default:
			t.Errorf("a scalper's try: %s", o.answer)
		}
	}
	if created != 1 {
		t.Fatalf("%d purchases of one buyer answered 201, want exactly 1", created)
	}
	for _, o := range outs {
		if o.answer == "409 already_purchased" && o.orderID != order {
			t.Errorf("already_purchased names %s, want the buyer's order %s", o.orderID, order)
		}
	}
	s.drainAndResync(t, sale.ID)
	live, err := s.db.LiveOrders(s.ctx, sale.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(live) != 1 || live[0].ID != order {
		t.Errorf("rows of the scalper's sale: %+v, want the one order %s", live, order)
	}
}
