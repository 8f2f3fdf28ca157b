package controlplane

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testwait"
	"github.com/flashgate/flashgate/lua"
)

// TestLeaderRebalancesBuckets: the leader's loop takes a fencing token with
// its lease and, after re-syncing a bucketed sale, moves unheld units from
// the buckets that have them to a sold-out one, keeping the buckets' totals
// equal to the sale's.
func TestLeaderRebalancesBuckets(t *testing.T) {
	e := newEnv(t, sqliteDSN(t), func(c *Config) {
		c.TickEvery = 20 * time.Millisecond
		c.ResyncEvery = 50 * time.Millisecond
	})
	const sale = "hot"
	l := e.startBucketed(flashgate.Sale{ID: sale, Name: "Hot", Total: 12, Buckets: 3})
	// Bucket 0 sells out (4 units); 1 and 2 keep 4 each.
	tag := l.Tag(0)
	for i := 0; i < 4; i++ {
		keys := lua.ReserveKeys(tag)
		u := "u" + strconv.Itoa(i)
		if err := lua.Reserve.Run(e.ctx, e.rdb, keys, "o"+u, u, 1, 0, sale, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	free := func(b int) (total, free int64) {
		v, _ := e.rdb.HMGet(e.ctx, lua.SaleKey(l.Tag(b)), lua.FieldTotal, lua.FieldBooked).Result()
		tt, _ := strconv.ParseInt(v[0].(string), 10, 64)
		bk, _ := strconv.ParseInt(v[1].(string), 10, 64)
		return tt, tt - bk
	}
	if _, f := free(0); f != 0 {
		t.Fatalf("bucket 0 free: got %d, want 0", f)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = e.svc.Run(ctx) }()
	defer func() { cancel(); <-done }()
	testwait.Eventually(t, 5*time.Second, func() bool { _, f := free(0); return f > 0 }, "the leader to move units to the sold-out bucket")
	cancel()
	<-done
	var sum int64
	for b := 0; b < 3; b++ {
		tt, _ := free(b)
		sum += tt
	}
	if sum != 12 {
		t.Errorf("buckets' totals: got %d, want 12", sum)
	}
	if f, _ := e.rdb.Get(e.ctx, lua.FenceKey()).Int64(); f < 1 {
		t.Errorf("fencing token: got %d, want >= 1", f)
	}
}

// TestRebalanceEndGame: near the end no two buckets differ by 2, yet an
// empty bucket whose buyers are turned away (want) gets a unit from a
// bucket that has one and no such buyers; a bucket without demand gets
// none, and a stale token moves nothing.
func TestRebalanceEndGame(t *testing.T) {
	e := newEnv(t, sqliteDSN(t), nil)
	const sale = "end"
	l := e.startBucketed(flashgate.Sale{ID: sale, Name: "End", Total: 3, Buckets: 3})
	tag := l.Tag(0)
	if err := lua.Reserve.Run(e.ctx, e.rdb, lua.ReserveKeys(tag),
		"o1", "u1", 1, 0, sale, 0).Err(); err != nil {
		t.Fatal(err)
	}
	total := func(b int) int64 {
		n, _ := e.rdb.HGet(e.ctx, lua.SaleKey(l.Tag(b)), lua.FieldTotal).Int64()
		return n
	}
	// The newest token: Start's writes raised the buckets' fences.
	tok, err := e.svc.takeFence(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if moved, err := e.svc.Rebalance(e.ctx, sale, tok); err != nil || moved != 0 {
		t.Fatalf("without demand: got %d moved, %v; want 0, nil", moved, err)
	}
	if err := e.rdb.HSet(e.ctx, lua.SaleKey(tag), lua.FieldWant, 3).Err(); err != nil {
		t.Fatal(err)
	}
	if moved, err := e.svc.Rebalance(e.ctx, sale, tok); err != nil || moved != 1 {
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
	if moved, err := e.svc.Rebalance(e.ctx, sale, tok-1); err == nil || moved != 0 {
		t.Fatalf("stale token: got %d moved, %v; want 0 and an error", moved, err)
	}
	if w, _ := e.rdb.HGet(e.ctx, lua.SaleKey(l.Tag(empty)), lua.FieldWant).Int64(); w != 2 {
		t.Errorf("want after a stale call: got %d, want 2 (untouched)", w)
	}
}
