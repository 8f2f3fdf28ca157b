package buckets

import (
	"context"
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

// failoverAtPage is a Redis hook that copies every key before the at-th
// call of lua.Restore (what a lagging replica has) and puts the copy back
// in place of every key before the next call of lua.Restored (the
// replica promoted).
type failoverAtPage struct {
	t     *testing.T
	rdb   redis.UniversalClient
	at    int64
	pages atomic.Int64
	done  atomic.Bool
	keys  map[string]string
}

func (*failoverAtPage) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *failoverAtPage) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if a := cmd.Args(); len(a) > 1 && a[0] == "evalsha" {
			switch {
			case a[1] == lua.Restore.Hash() && h.pages.Add(1) == h.at:
				keys, err := h.rdb.Keys(ctx, "*").Result()
				if err != nil {
					h.t.Errorf("KEYS: %v", err)
				}
				h.keys = map[string]string{}
				for _, k := range keys {
					h.keys[k] = h.rdb.Dump(ctx, k).Val()
				}
			case a[1] == lua.Restored.Hash() && h.keys != nil && h.done.CompareAndSwap(false, true):
				if err := h.rdb.FlushAll(ctx).Err(); err != nil {
					h.t.Errorf("FLUSHALL: %v", err)
				}
				for k, v := range h.keys {
					if err := h.rdb.RestoreReplace(ctx, k, 0, v).Err(); err != nil {
						h.t.Errorf("RESTORE %s: %v", k, err)
					}
				}
			}
		}
		return next(ctx, cmd)
	}
}

func (*failoverAtPage) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestBucketRebuildFailsOverToLaggingReplica: a rebuild of a bucketed sale
// Redis lost writes each bucket's page of expired orders, then each
// bucket's page of live ones, and the primary dies: the replica promoted
// had the buckets' restore ids and first pages, not the live ones. The
// buckets must not reopen without their live buyers' entries.
func TestBucketRebuildFailsOverToLaggingReplica(t *testing.T) {
	e := newEnv(t)
	ctx, db := e.ctx, e.db
	sale := e.startBucketed(flashgate.Sale{ID: "twice", Name: "Twice", Total: 4, Buckets: 2, PerUser: 1, PriceCents: 100})
	l := Layout(sale)
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
	if err := e.rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatalf("FLUSHALL: %v", err)
	}
	for b := range users {
		if _, err := db.Transition(ctx, "o"+users[b][1], []flashgate.OrderStatus{flashgate.StatusPendingPayment}, flashgate.StatusExpired, time.Now()); err != nil {
			t.Fatalf("Transition: %v", err)
		}
	}
	// Pages: each bucket's expired one, then each bucket's live one.
	e.rdb.AddHook(&failoverAtPage{t: t, rdb: e.rdb, at: int64(l.N()) + 1})
	_, _, err := e.k.Resync(fencing.WithValue(ctx, e.takeFence()), sale)
	t.Logf("the rebuild: %v", err)
	for i := range 3 {
		_, after, err := e.k.Resync(fencing.WithValue(ctx, e.takeFence()), sale)
		if err != nil {
			t.Fatalf("pass %d after the rebuild: %v", i, err)
		}
		t.Logf("pass %d: booked %d", i, after.Booked)
	}
	for b, tag := range l.Tags() {
		if got, err := e.rdb.HGet(ctx, lua.BuyersKey(tag), users[b][0]).Result(); err != nil || got != "o"+users[b][0] {
			t.Errorf("bucket %d: %s's buyer entry got %q, %v; want o%s (live)", b, users[b][0], got, err, users[b][0])
		}
	}
}
