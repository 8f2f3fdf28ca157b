package controlplane

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
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
