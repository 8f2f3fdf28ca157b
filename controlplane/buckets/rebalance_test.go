package buckets

import (
	"testing"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/lua"
)

// TestRebalanceEndGame: near the end no two buckets differ by 2, yet an
// empty bucket whose buyers are turned away (want) gets a unit from a
// bucket that has one and no such buyers; a bucket without demand gets
// none, and a stale token moves nothing.
func TestRebalanceEndGame(t *testing.T) {
	e := newEnv(t)
	const sale = "end"
	row := e.startBucketed(flashgate.Sale{ID: sale, Name: "End", Total: 3, Buckets: 3})
	l := Layout(row)
	tag := l.Tag(0)
	if err := lua.Reserve.Run(e.ctx, e.rdb, lua.ReserveKeys(tag),
		"o1", "u1", 1, 0, sale, 0).Err(); err != nil {
		t.Fatal(err)
	}
	total := func(b int) int64 {
		n, _ := e.rdb.HGet(e.ctx, lua.SaleKey(l.Tag(b)), lua.FieldTotal).Int64()
		return n
	}
	// The newest token: the start's writes raised the buckets' fences.
	tok := e.takeFence()
	if moved, err := e.k.Rebalance(e.ctx, row, tok); err != nil || moved != 0 {
		t.Fatalf("without demand: got %d moved, %v; want 0, nil", moved, err)
	}
	if err := e.rdb.HSet(e.ctx, lua.SaleKey(tag), lua.FieldWant, 3).Err(); err != nil {
		t.Fatal(err)
	}
	if moved, err := e.k.Rebalance(e.ctx, row, tok); err != nil || moved != 1 {
		t.Fatalf("with demand: got %d moved, %v; want 1, nil", moved, err)
	}
	if got := []int64{total(0), total(1), total(2)}; got[0] != 2 || got[0]+got[1]+got[2] != 3 {
		t.Errorf("totals: got %v, want bucket 0 at 2 and 3 in all", got)
	}
	if w, _ := e.rdb.HGet(e.ctx, lua.SaleKey(tag), lua.FieldWant).Int64(); w != 0 {
		t.Errorf("want after the move: got %d, want 0", w)
	}
	// A stale leader (a lower token than the ledger's) moves nothing.
	empty := 1
	if total(1) == 1 {
		empty = 2
	}
	if err := e.rdb.HSet(e.ctx, lua.SaleKey(l.Tag(empty)), lua.FieldWant, 2).Err(); err != nil {
		t.Fatal(err)
	}
	if moved, err := e.k.Rebalance(e.ctx, row, tok-1); err == nil || moved != 0 {
		t.Fatalf("stale token: got %d moved, %v; want 0 and an error", moved, err)
	}
	if w, _ := e.rdb.HGet(e.ctx, lua.SaleKey(l.Tag(empty)), lua.FieldWant).Int64(); w != 2 {
		t.Errorf("want after a stale call: got %d, want 2 (untouched)", w)
	}
}
