package drawhold_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/drawhold"
	"github.com/flashgate/flashgate/controlplane/internal/cptest"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/lua"
)

// beforeZRem runs hook once, before the first ZREM its client sends
// (alone or in a pipeline): what another process does while the read path
// is between its read of an entry and its taking the entry's hold off its
// list.
type beforeZRem struct {
	once sync.Once
	hook func()
}

func (h *beforeZRem) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *beforeZRem) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "zrem" {
			h.once.Do(h.hook)
		}
		return next(ctx, cmd)
	}
}

func (h *beforeZRem) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return c.Name() == "zrem" }) {
			h.once.Do(h.hook)
		}
		return next(ctx, cmds)
	}
}

// TestReadPathBesideWithdrawal: the read path finds ann's entry entered
// (entered by it, her hold authorised and its webhook lost; or entered
// already, her hold still listed), and as it takes her hold off its list
// (the close's, an entered entry's), ann withdraws: the withdrawal lists
// her hold for its release. The read path must not unlist it: before the
// fix it did, her gateway's release then found nothing listed and asked
// the provider nothing, and the close does not release a withdrawn
// entry's hold, so it stayed on her card (the interleaving explorer's draw
// seed 20263362).
func TestReadPathBesideWithdrawal(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entered bool // entered by its webhook before the read path looks
	}{{"entered by the read path", false}, {"entered already", true}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, true)
			e.hooks.Store(tc.entered)
			entry := e.enter("ann", 1)
			d, err := e.h.Hold(e.ctx, sale, "ann")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.stand.Confirm(d.PaymentIntent, "4242424242424242"); err != nil {
				t.Fatal(err)
			}
			if tc.entered {
				testwait.Eventually(t, 10*time.Second, func() bool { return e.state("ann") == flashgate.DrawEntered }, "ann's entry entered")
				e.stand.Deliveries.Wait() // its webhook done, the hold unlisted
				// Still listed, as when the webhook's unlisting lost to a
				// change of the entry (doneUnlessWithdrawn).
				if err := e.rdb.ZAdd(e.ctx, lua.DrawCheckKey(sale), redis.Z{Score: 0, Member: entry}).Err(); err != nil {
					t.Fatal(err)
				}
			}
			rdb := redis.NewClient(&redis.Options{Addr: e.rdb.Options().Addr})
			t.Cleanup(func() { _ = rdb.Close() })
			rdb.AddHook(&beforeZRem{hook: func() { e.withdrawOnly("ann") }})
			h := drawhold.New(drawhold.Config{Redis: rdb, Store: sales{}, Provider: e.stripe, Clock: e.clock,
				Logger: cptest.QuietLogger(), Grace: grace, Rate: 1000})
			e.clock.Add(grace)
			if n, err := h.Reconcile(e.ctx, []flashgate.Sale{{ID: sale, Queue: flashgate.QueueDraw}}); err != nil || n != 1 {
				t.Fatalf("Reconcile: %d, %v; want 1 looked at", n, err)
			}
			if got := e.state("ann"); got != flashgate.DrawWithdrawn {
				t.Fatalf("ann: got %s, want withdrawn", got)
			}
			if !e.listed(entry) {
				t.Errorf("ann's withdrawn entry: not on the read path's list, want listed for its hold's release")
			}
			if _, err := e.h.Release(e.ctx, sale, "ann"); err != nil {
				t.Fatalf("Release: %v", err)
			}
			if got := e.intent(d.PaymentIntent).Status; got != flashgate.IntentCanceled {
				t.Errorf("ann's hold after her release: got %s, want canceled", got)
			}
		})
	}
}
