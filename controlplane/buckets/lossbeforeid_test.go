package buckets

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/internal/cptest"
	"github.com/flashgate/flashgate/controlplane/internal/fencing"
	"github.com/flashgate/flashgate/lua"
)

// loseBeforeRestored is a Redis hook that, once armed, runs lose before
// the next call of lua.Restored (once).
type loseBeforeRestored struct {
	lose  func()
	armed atomic.Bool
}

func (*loseBeforeRestored) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *loseBeforeRestored) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if a := cmd.Args(); len(a) > 1 && a[0] == "evalsha" && a[1] == lua.Restored.Hash() && h.armed.CompareAndSwap(true, false) {
			h.lose()
		}
		return next(ctx, cmd)
	}
}

func (*loseBeforeRestored) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestBucketRebuildLosesRedisBeforeRestoreID: Redis loses a bucketed sale
// again while a rebuild of it runs, after the restore's pages and before
// it records the buckets' restore ids (lua.Restored). The rebuild fails,
// and the next passes rebuild every bucket from the rows: each reopens
// with its live unit booked and its buyer's entry. Before, each
// lua.Restored wrote its id into an empty bucket, whose final run then
// rebuilt it over an empty released set and no buyers: the next pass
// delivered the queued release of each bucket's expired order a second
// time, and the buckets opened with booked 0 while an order was live in
// each (an oversell), their buyers free to buy again.
func TestBucketRebuildLosesRedisBeforeRestoreID(t *testing.T) {
	e := newEnv(t)
	ctx, db := e.ctx, e.db
	sale := e.startBucketed(flashgate.Sale{ID: "twice", Name: "Twice", Total: 4, Buckets: 2, PerUser: 1, PriceCents: 100})
	l := Layout(sale)
	// Two orders in each bucket: the first stays live, the second expires
	// once Redis lost the sale (its release queued in the database).
	users := make([][]string, l.N())
	for i := 0; len(users[0]) < 2 || len(users[1]) < 2; i++ {
		u := "u" + strconv.Itoa(i)
		b := l.Home(u)
		if len(users[b]) == 2 {
			continue
		}
		users[b] = append(users[b], u)
		res, err := lua.Reserve.Run(ctx, e.rdb, lua.ReserveKeys(l.Tag(b)), "o"+u, u, 1, e.clock.Now().UnixMilli(), sale.ID, b, "", "").Slice()
		if err != nil || res[0] != int64(lua.ReserveOK) {
			t.Fatalf("reserve for %s in bucket %d: %v, %v", u, b, res, err)
		}
		cptest.Persist(t, ctx, e.rdb, db, l.Tag(b))
	}
	flush := func() {
		if err := e.rdb.FlushAll(ctx).Err(); err != nil {
			t.Errorf("FLUSHALL: %v", err)
		}
	}
	flush()
	for b := range users {
		if _, err := db.Transition(ctx, "o"+users[b][1], []flashgate.OrderStatus{flashgate.StatusPendingPayment}, flashgate.StatusExpired, time.Now()); err != nil {
			t.Fatalf("Transition: %v", err)
		}
	}
	hook := &loseBeforeRestored{lose: flush}
	e.rdb.AddHook(hook)
	hook.armed.Store(true)
	if _, _, err := e.k.Resync(fencing.WithValue(ctx, e.takeFence()), sale); !errors.Is(err, flashgate.ErrUnavailable) {
		t.Errorf("the rebuild: got %v, want an error wrapping ErrUnavailable (Redis lost the sale again; the next pass rebuilds it)", err)
	}
	for i := range 3 {
		_, after, err := e.k.Resync(fencing.WithValue(ctx, e.takeFence()), sale)
		if err != nil {
			t.Fatalf("pass %d after the rebuild: %v", i, err)
		}
		t.Logf("pass %d: booked %d", i, after.Booked)
	}
	for b, tag := range l.Tags() {
		if start, booked := cptest.Field(t, e.rdb, tag, lua.FieldStart), cptest.Field(t, e.rdb, tag, lua.FieldBooked); start != 1 || booked != 1 {
			t.Errorf("bucket %d after three passes: got start %d, booked %d; want it open with booked 1 (o%s live)", b, start, booked, users[b][0])
		}
		if got, err := e.rdb.HGet(ctx, lua.BuyersKey(tag), users[b][0]).Result(); err != nil || got != "o"+users[b][0] {
			t.Errorf("bucket %d: %s's buyer entry got %q, %v; want o%s (live)", b, users[b][0], got, err, users[b][0])
		}
	}
}
