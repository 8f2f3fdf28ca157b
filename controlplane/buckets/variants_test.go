package buckets

import (
	"fmt"
	"testing"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/internal/cptest"
	"github.com/flashgate/flashgate/controlplane/internal/fencing"
	"github.com/flashgate/flashgate/lua"
)

// variantSale is a bucketed sale in three sizes of uneven stock.
func variantSale(id string) flashgate.Sale {
	return flashgate.Sale{ID: id, Name: "Shoe", Total: 19, Buckets: 3, Variants: []flashgate.Variant{
		{ID: "S", Name: "Small", Total: 10}, {ID: "M", Name: "Medium", Total: 7}, {ID: "L", Name: "Large", Total: 2}}}
}

// checkVariantStock reads every bucket of row and checks the invariants a
// bucketed sale in variants keeps: each bucket's total is the sum of its
// variants' totals and its booked the sum of theirs, no variant holds less
// than its booked in a bucket, and each variant's totals over the buckets
// add up to its own (less wantInFlight units of a move in flight). It
// returns the stock.
func (e *env) checkVariantStock(row flashgate.Sale, inFlight map[string]int64) []bucketStock {
	e.t.Helper()
	stock, err := e.k.readStock(e.ctx, Layout(row), variantIDs(row))
	if err != nil {
		e.t.Fatal(err)
	}
	sums := make([]int64, len(row.Variants))
	for b, st := range stock {
		if !st.found {
			e.t.Fatalf("bucket %d missing", b)
		}
		var total, booked int64
		for i, v := range row.Variants {
			total += st.vtotal[i]
			booked += st.vbooked[i]
			sums[i] += st.vtotal[i]
			if st.vbooked[i] > st.vtotal[i] || st.vtotal[i] < 0 {
				e.t.Errorf("bucket %d variant %s: booked %d of a total of %d", b, v.ID, st.vbooked[i], st.vtotal[i])
			}
		}
		if total != st.total || booked != st.booked {
			e.t.Errorf("bucket %d: total %d booked %d, want the sums of its variants %d and %d", b, st.total, st.booked, total, booked)
		}
	}
	for i, v := range row.Variants {
		if want := v.Total - inFlight[v.ID]; sums[i] != want {
			e.t.Errorf("variant %s: buckets hold %d, want %d", v.ID, sums[i], want)
		}
	}
	return stock
}

// reserveVariant reserves one unit of variant for user in bucket b.
func (e *env) reserveVariant(row flashgate.Sale, b int, order, user, variant string) int64 {
	e.t.Helper()
	tag := Layout(row).Tag(b)
	v, err := lua.Reserve.Run(e.ctx, e.rdb, lua.ReserveKeys(tag), order, user, 1, 0, row.ID, b, "", variant).Slice()
	if err != nil {
		e.t.Fatal(err)
	}
	return v[0].(int64)
}

// TestVariantPlacement: each variant's stock splits over the buckets, its
// spare units spread, and a bucket's total is the sum of its shares.
func TestVariantPlacement(t *testing.T) {
	row := variantSale("p")
	row.BucketSalts = []int{0, 1, 2}
	var sums [3]int64
	for b := range 3 {
		shares := VariantShares(row.Variants, 3, b)
		args := PrepareArgs(row, b)
		var total int64
		for i, n := range shares {
			sums[i] += n
			total += n
		}
		if args[0] != total {
			t.Errorf("bucket %d: total %v, want %d", b, args[0], total)
		}
	}
	if sums != [3]int64{10, 7, 2} {
		t.Errorf("shares add up to %v, want [10 7 2]", sums)
	}
	// L's two units land in two buckets, not both in bucket 0.
	if l0, l1, l2 := VariantShares(row.Variants, 3, 0)[2], VariantShares(row.Variants, 3, 1)[2], VariantShares(row.Variants, 3, 2)[2]; l0 > 1 || l1 > 1 || l2 > 1 {
		t.Errorf("L's shares: got %d %d %d, want at most 1 each", l0, l1, l2)
	}
}

// TestVariantRebalance: moves between the buckets of a sale in variants
// move one variant's units, from where it is plentiful to where it sold
// out; every step keeps each variant's units whole and never below its
// booked in a bucket, a move a crashed leader left in flight is finished
// with its variant, and a re-sync rebuilds a lost bucket with its share of
// each variant, its rows' units first.
func TestVariantRebalance(t *testing.T) {
	e := newEnv(t)
	row := e.startBucketed(variantSale("vr"))
	l := Layout(row)
	stock := e.checkVariantStock(row, nil)
	// Sell out S in bucket 0; one more buyer there is turned away.
	for i := range stock[0].vtotal[0] {
		if code := e.reserveVariant(row, 0, fmt.Sprintf("o%d", i), fmt.Sprintf("u%d", i), "S"); code != lua.ReserveOK {
			t.Fatalf("reserve %d: got code %d", i, code)
		}
	}
	if code := e.reserveVariant(row, 0, "ox", "ux", "S"); code != lua.ReserveSoldOut {
		t.Fatalf("reserve of a sold-out size: got code %d, want sold out", code)
	}
	if code := e.reserveVariant(row, 0, "om", "um", "M"); code != lua.ReserveOK {
		t.Fatalf("reserve of M in bucket 0: got code %d, want OK", code)
	}
	tok := e.takeFence()
	for step := range 20 {
		moved, err := e.k.Rebalance(e.ctx, row, tok)
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		e.checkVariantStock(row, nil)
		if moved == 0 {
			break
		}
	}
	stock = e.checkVariantStock(row, nil)
	if stock[0].vfree(0) == 0 {
		t.Errorf("S in bucket 0 after rebalancing: got %d free, want some moved in", stock[0].vfree(0))
	}
	for b := range stock {
		for c := range stock {
			if d := stock[b].vfree(0) - stock[c].vfree(0); d > 1 {
				t.Errorf("S free: bucket %d has %d, bucket %d %d; want within 1", b, stock[b].vfree(0), c, stock[c].vfree(0))
			}
		}
	}

	// A leader crashed after shrinking bucket 1's M for a move to bucket
	// 2: the units are in the ledger only, and the next step credits them
	// to bucket 2's M.
	before := stock[2].vtotal[1]
	v, err := lua.Ledger.Run(e.ctx, e.rdb, lua.LedgerKeys(row.ID), "begin", tok, 1, 2, 1, "M").Slice()
	if err != nil || v[0] != int64(0) {
		t.Fatalf("ledger begin: %v, %v", v, err)
	}
	seq := v[1].(int64)
	freed, err := lua.Shrink.Run(e.ctx, e.rdb, lua.SaleKeys(l.Tag(1)), seq, 1, "M").Int64()
	if err != nil || freed != 1 {
		t.Fatalf("shrink: got %d, %v; want 1", freed, err)
	}
	e.checkVariantStock(row, map[string]int64{"M": 1})
	if got, _ := e.rdb.HGet(e.ctx, lua.SaleKey(l.Tag(1)), lua.FieldShrinkVariant).Result(); got != "M" {
		t.Errorf("bucket 1's shrink variant: got %q, want M", got)
	}
	if _, err := e.k.Rebalance(e.ctx, row, tok); err != nil {
		t.Fatal(err)
	}
	stock = e.checkVariantStock(row, nil)
	if stock[2].vtotal[1] != before+1 {
		t.Errorf("bucket 2's M after the finished move: got %d, want %d", stock[2].vtotal[1], before+1)
	}

	// Orders in bucket 1 reach the database, then Redis loses bucket 1.
	if stock[1].vfree(1) < 1 {
		t.Fatalf("bucket 1 holds no M to sell: %+v", stock[1])
	}
	for i := range stock[1].vfree(1) {
		if code := e.reserveVariant(row, 1, fmt.Sprintf("p%d", i), fmt.Sprintf("w%d", i), "M"); code != lua.ReserveOK {
			t.Fatalf("reserve of M in bucket 1: got code %d", code)
		}
	}
	if code := e.reserveVariant(row, 1, "pl", "wl", "L"); code != lua.ReserveOK && code != lua.ReserveSoldOut {
		t.Fatalf("reserve of L in bucket 1: got code %d", code)
	}
	for _, tag := range l.Tags() {
		cptest.Persist(t, e.ctx, e.rdb, e.db, tag)
	}
	figs, per, err := e.db.BucketVariantFigures(e.ctx, row.ID, 3)
	if err != nil {
		t.Fatal(err)
	}
	if per[1]["M"].LiveUnits != stock[1].vfree(1) || per[0]["S"].LiveUnits != stock[0].vbooked[0] || figs[0].LiveUnits != stock[0].booked {
		t.Errorf("BucketVariantFigures: got %+v, %+v", figs, per)
	}
	if err := e.rdb.Del(e.ctx, lua.SaleKey(l.Tag(1))).Err(); err != nil {
		t.Fatal(err)
	}
	ctx := fencing.WithValue(e.ctx, e.takeFence())
	for pass := range 2 { // the second pass reopens the rebuilt bucket
		if _, _, err := e.k.Resync(ctx, row); err != nil {
			t.Fatalf("re-sync pass %d: %v", pass, err)
		}
	}
	stock = e.checkVariantStock(row, nil)
	for i, v := range row.Variants {
		if live := per[1][v.ID].LiveUnits; stock[1].vbooked[i] != live || stock[1].vtotal[i] < live {
			t.Errorf("rebuilt bucket 1 %s: total %d booked %d, want booked %d and a total that covers it", v.ID, stock[1].vtotal[i], stock[1].vbooked[i], live)
		}
	}
	// The rebuilt bucket sells its M again, and its buyers stay known.
	if code := e.reserveVariant(row, 1, "p0x", "w0", "M"); code != lua.ReservePurchased {
		t.Errorf("a buyer of the lost bucket buys again: got code %d, want purchased", code)
	}
}

// TestVariantEndGame: near the end, an empty bucket gets one unit of the
// size its turned-away buyers asked for (the inventory counts want per
// variant), not of another size it also lacks, and that demand is then
// answered.
func TestVariantEndGame(t *testing.T) {
	e := newEnv(t)
	row := e.startBucketed(flashgate.Sale{ID: "eg", Name: "End", Total: 6, Buckets: 3, Variants: []flashgate.Variant{
		{ID: "S", Name: "Small", Total: 3}, {ID: "M", Name: "Medium", Total: 3}}})
	l := Layout(row)
	// Bucket 0 sells its one S and its one M; then a buyer of M is
	// turned away there.
	for i, v := range []string{"S", "M"} {
		if code := e.reserveVariant(row, 0, fmt.Sprintf("o%d", i), fmt.Sprintf("u%d", i), v); code != lua.ReserveOK {
			t.Fatalf("reserve of %s: got code %d", v, code)
		}
	}
	if code := e.reserveVariant(row, 0, "ox", "ux", "M"); code != lua.ReserveSoldOut {
		t.Fatalf("reserve of a sold-out M: got code %d, want sold out", code)
	}
	if w, _ := e.rdb.HGet(e.ctx, lua.SaleKey(l.Tag(0)), lua.VariantField("M", lua.FieldWant)).Int64(); w != 1 {
		t.Fatalf("bucket 0's want of M: got %d, want 1", w)
	}
	tok := e.takeFence()
	if moved, err := e.k.Rebalance(e.ctx, row, tok); err != nil || moved != 1 {
		t.Fatalf("rebalance: got %d moved, %v; want 1", moved, err)
	}
	stock := e.checkVariantStock(row, nil)
	if stock[0].vfree(1) != 1 || stock[0].vfree(0) != 0 {
		t.Errorf("bucket 0 after the end-game move: S free %d, M free %d; want 0 and 1", stock[0].vfree(0), stock[0].vfree(1))
	}
	if stock[0].vwant[1] != 0 {
		t.Errorf("bucket 0's want of M after the move: got %d, want 0", stock[0].vwant[1])
	}
	// Nobody wants S in bucket 0: nothing more moves.
	if moved, err := e.k.Rebalance(e.ctx, row, tok); err != nil || moved != 0 {
		t.Errorf("second rebalance: got %d moved, %v; want 0", moved, err)
	}
}
