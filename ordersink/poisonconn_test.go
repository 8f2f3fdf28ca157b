package ordersink_test

import (
	"context"
	"testing"

	"github.com/flashgate/flashgate/internal/testenv/dbfault"
	"github.com/flashgate/flashgate/lua"
	"github.com/flashgate/flashgate/ordersink"
)

// TestOrderThatDropsTheConnectionLeavesOthers (review of issue 35): one
// order whose insert makes PostgreSQL end the connection (FATAL 57P01, as a
// record that crashes its backend would), between ordinary orders, while
// the database itself stays up and answers. sqldb classifies that failure
// as the database out of reach (flashgate.ErrUnavailable), which never
// splits a batch and never makes a suspect: the batch is tried whole
// forever and no order of it, nor any later one of the sale, is ever
// stored. One bad record must never stop the others: after a bounded
// number of passes every ordinary order is a row, and the bad one stays
// pending (or is dead-lettered), never lost.
func TestOrderThatDropsTheConnectionLeavesOthers(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		if !dbfault.Disconnect(t, e.dsn, "crash-") {
			t.Skip("SQLite has no connection to lose")
		}
		ctx := context.Background()
		ids := e.reserve(t, "u", 3)
		bad := e.reserveIn(t, sale, "crash-", 1)
		ids = append(ids, e.reserve(t, "v", 3)...)
		d := drainer(e, nil, ordersink.Config{Batch: 64})
		const passes = 12 // splitAfter (3) whole tries, then one by one, with room to spare
		for range passes {
			_, _ = d.DrainOnce(ctx)
		}
		if got := e.rowsOf(t, sale); got != int64(len(ids)) {
			t.Errorf("after %d passes: rows got %d, want the %d ordinary orders (one order that drops the connection stalls the sale)", passes, got, len(ids))
		}
		pending, err := e.rdb.XPending(ctx, lua.OrdersKey(sale), lua.SinkGroup).Result()
		if err != nil {
			t.Fatal(err)
		}
		dead := e.rdb.XLen(ctx, lua.DeadKey(sale)).Val()
		if pending.Count+dead != int64(len(bad)) {
			t.Errorf("after %d passes: %d pending and %d dead letters, want only the bad order's 1", passes, pending.Count, dead)
		}
	})
}
