package controlplane

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/internal/testenv/testclock"
	"github.com/flashgate/flashgate/lua"
)

// markerHook runs before, once armed, just before the first command that
// writes key (any command naming it but a GET): a buyer arriving at the
// last moment of a rebuild, when the watch records the new primary.
type markerHook struct {
	key    string
	armed  atomic.Bool
	before func()
}

func (h *markerHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *markerHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() != "get" && slices.Contains(cmd.Args(), any(h.key)) && h.armed.CompareAndSwap(true, false) {
			h.before()
		}
		return next(ctx, cmd)
	}
}

func (h *markerHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// replID is the master_replid Redis reports.
func replID(t *testing.T, c redis.Cmdable) string {
	t.Helper()
	info, err := c.Info(context.Background(), "replication").Result()
	if err != nil {
		t.Fatalf("INFO replication: %v", err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "master_replid:"); ok {
			return v
		}
	}
	t.Fatal("no master_replid in INFO replication")
	return ""
}

// TestRestartThenReplicaLeavesNoOrphanPause is the sale stuck paused after
// a Redis restart (issue 35): the primary is killed and restarted on its
// address (a new replication id), the watch rebuilds the sale, then the
// replica links to the restarted primary, whose replication id changes a
// second time (Redis gives a primary a new id when its first replica
// attaches), and the watch rebuilds again. The second rebuild's own
// re-sync reopens the sale (the first left it marked to resume) before the
// watch records the new id; a buyer arriving in that moment meets the
// reserve script's failover fence, which pauses the sale (start = 0,
// resume = 2). If the watch then records the new id, nobody owns that
// pause: the watch sees nothing to recover, and a re-sync never reopens
// resume = 2. Every later purchase is answered 503, for good.
func TestRestartThenReplicaLeavesNoOrphanPause(t *testing.T) {
	ctx := context.Background()
	primary := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always", "--repl-diskless-sync-delay", "0")
	rdb := redis.NewClient(&redis.Options{Addr: primary.Addr, MaxRetries: 3})
	t.Cleanup(func() { _ = rdb.Close() })
	buyers := redis.NewClient(&redis.Options{Addr: primary.Addr, MaxRetries: 3})
	t.Cleanup(func() { _ = buyers.Close() })
	e := &env{t: t, ctx: ctx, rdb: rdb, db: openDB(t, sqliteDSN(t)), clock: testclock.New(t0)}
	e.rel = &luaReleaser{RDB: rdb}
	svc, err := New(Config{Redis: rdb, Store: e.db, Releaser: e.rel, AdminToken: testToken,
		Clock: e.clock, Logger: quietLogger(), PersistWait: -1, NodeID: "test"})
	if err != nil {
		t.Fatal(err)
	}
	e.svc = svc
	lastResync := time.Now()
	tick := func() { svc.tick(ctx, &lastResync) }
	late := 0 // buyers who arrived in the rebuild's last moment
	hook := &markerHook{key: lua.PrimaryKey("r"), before: func() {
		late++
		_, _ = lua.Reserve.Run(ctx, buyers, lua.ReserveKeys("r"), "olate"+strconv.Itoa(late), "late"+strconv.Itoa(late), 1, t0.UnixMilli(), "r").Result()
	}}
	rdb.AddHook(hook)

	const total = 10
	e.openSale("r", total, 2)
	tick() // leads, and marks the sale's primary
	for i := range 3 {
		if code, _ := e.reserve("r", "u"+strconv.Itoa(i)); code != lua.ReserveOK {
			t.Fatalf("reserve u%d: code %d", i, code)
		}
	}
	e.persist("r")

	// kill -9 and restart on the same address, from the AOF: a new id.
	primary.Restart(t)
	lastResync = time.Now() // no re-sync pass due: only the watch acts
	tick()
	first := replID(t, rdb)
	if got, _ := rdb.Get(ctx, lua.PrimaryKey("r")).Result(); got != first {
		t.Fatalf("marker after the first rebuild: got %q, want the restarted primary's id %q", got, first)
	}

	// The replica links: the primary's id changes again.
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port))
	replica.WaitReplica(t)
	if second := replID(t, rdb); second == first {
		t.Fatalf("the primary kept its id %q when its first replica linked; the test needs it changed", first)
	}
	hook.armed.Store(true)
	lastResync = time.Now()
	tick()
	if late == 0 {
		t.Fatal("the second rebuild never wrote the primary marker")
	}

	// The watch, the re-sync passes and an admin's re-syncs must reopen it.
	for range 3 {
		e.persist("r")
		lastResync = lastResync.Add(-time.Hour) // a re-sync pass is due
		tick()
		if _, _, err := svc.Resync(ctx, "r"); err != nil {
			t.Fatalf("admin Resync: %v", err)
		}
	}
	if start, resume := field(t, rdb, "r", lua.FieldStart), field(t, rdb, "r", lua.FieldResume); start != 1 {
		t.Fatalf("after the rebuilds, three ticks and three admin re-syncs: start=%d resume=%d, want the sale open (start=1)", start, resume)
	}
	if code, _ := e.reserve("r", "after"); code != lua.ReserveOK {
		t.Errorf("a buyer after the recovery: code %d, want %d (reserved)", code, lua.ReserveOK)
	}
}

// TestEveryPauseIsReopenedWithinATick: whoever paused an open sale (a
// failover's recovery, the reserve scripts' fence, a re-sync restoring it)
// the failover watch reopens it within a tick of its rebuild, with no
// re-sync pass due and no admin call.
func TestEveryPauseIsReopenedWithinATick(t *testing.T) {
	for _, tc := range []struct {
		name  string
		pause func(e *env, srv *redistest.Server)
	}{
		{"restart", func(e *env, srv *redistest.Server) { srv.Restart(e.t) }},
		{"fence after the check", func(e *env, _ *redistest.Server) {
			// What the race of TestRestartThenReplicaLeavesNoOrphanPause
			// leaves: paused by the fence, the marker naming the primary.
			if err := e.rdb.HSet(e.ctx, lua.SaleKey("p"), lua.FieldStart, 0, lua.FieldResume, 2).Err(); err != nil {
				e.t.Fatal(err)
			}
		}},
		{"re-sync restore cut short", func(e *env, _ *redistest.Server) {
			if err := e.rdb.HSet(e.ctx, lua.SaleKey("p"), lua.FieldStart, 0, lua.FieldResume, 1).Err(); err != nil {
				e.t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, sqliteDSN(t), nil)
			srv := e.srv
			if tc.name == "restart" {
				srv = redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
				e.rdb = redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: 3})
				t.Cleanup(func() { _ = e.rdb.Close() })
				e.rel = &luaReleaser{RDB: e.rdb}
				svc, err := New(Config{Redis: e.rdb, Store: e.db, Releaser: e.rel, AdminToken: testToken,
					Clock: e.clock, Logger: quietLogger(), PersistWait: -1, NodeID: "test"})
				if err != nil {
					t.Fatal(err)
				}
				e.svc = svc
			}
			lastResync := time.Now()
			tick := func() {
				lastResync = time.Now() // never a re-sync pass: the watch alone
				e.svc.tick(e.ctx, &lastResync)
			}
			e.openSale("p", 10, 2)
			tick()
			for i := range 3 {
				e.reserve("p", "u"+strconv.Itoa(i))
			}
			e.persist("p")
			tc.pause(e, srv)
			ticks := 0
			for ; ticks < 4 && field(t, e.rdb, "p", lua.FieldStart) != 1; ticks++ {
				e.persist("p")
				tick()
				if field(t, e.rdb, "p", lua.FieldStart) == 1 {
					break
				}
				// Paused: the admin status says why, and since when.
				st, err := e.svc.SaleStatus(e.ctx, "p")
				if err != nil {
					t.Fatal(err)
				}
				if st.Paused == nil || st.Paused.Reason == "" || st.Paused.Since == nil {
					t.Errorf("tick %d: the sale is paused, its admin status's paused: %+v, want a reason and a since", ticks+1, st.Paused)
				}
			}
			if start := field(t, e.rdb, "p", lua.FieldStart); start != 1 {
				t.Fatalf("after %d ticks: start=%d resume=%d, want the sale open", ticks, start, field(t, e.rdb, "p", lua.FieldResume))
			}
			if ticks > 2 {
				t.Errorf("reopened at tick %d, want within a tick of its rebuild (2)", ticks)
			}
			if _, ok := e.svc.failover.PausedSale("p"); ok {
				t.Errorf("the watch still notes the sale paused after it reopened")
			}
			if st, err := e.svc.SaleStatus(e.ctx, "p"); err != nil || st.Paused != nil {
				t.Errorf("admin status after the reopening: paused %+v (%v), want none", st.Paused, err)
			}
			if got := field(t, e.rdb, "p", lua.FieldBooked); got != 3 {
				t.Errorf("booked after the reopening: got %d, want 3", got)
			}
			if code, _ := e.reserve("p", "u0"); code != lua.ReservePurchased {
				t.Errorf("u0 buying again: code %d, want %d (already purchased)", code, lua.ReservePurchased)
			}
		})
	}
}
