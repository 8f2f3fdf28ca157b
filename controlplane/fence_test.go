package controlplane

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/internal/fencing"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/lua"
)

// second is another control plane on e's Redis and database.
func (e *env) second(node string, mod func(*Config)) *Service {
	e.t.Helper()
	cfg := Config{
		Redis: e.rdb, Store: e.db, Releaser: e.rel, AdminToken: testToken,
		Clock: e.clock, Logger: quietLogger(), PersistWait: -1, NodeID: node,
	}
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

// redisSale is every key of a sale Redis holds, for before/after checks.
func (e *env) redisSale(id string) string {
	e.t.Helper()
	h, err := e.rdb.HGetAll(e.ctx, lua.SaleKey(id)).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	b, err := e.rdb.HGetAll(e.ctx, lua.BuyersKey(id)).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	r, err := e.rdb.SMembers(e.ctx, lua.ReleasedKey(id)).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	return fmt.Sprint(h, b, r)
}

// TestStaleLeaderFenced: a leader whose lease another control plane took
// (it was paused past it) and that goes on with its term's context writes
// nothing: its expiry, re-sync, restore and close are refused by Redis and
// by the database, and what the new leader did stays as it left it. Then
// its next renewal ends its term.
func TestStaleLeaderFenced(t *testing.T) {
	for _, db := range []struct {
		name string
		dsn  func(*testing.T) string
	}{{"sqlite", sqliteDSN}, {"postgres", postgresDSN}} {
		t.Run(db.name, func(t *testing.T) {
			// a is paused past its lease: its term's keeper must not run
			// (its renewal would end the term before the stale writes), so
			// its tick and lease are long; b takes the lease once it is gone.
			e := newEnv(t, db.dsn(t), func(c *Config) { c.TickEvery, c.LeaderTTL = time.Hour, time.Hour })
			a, b := e.svc, e.second("b", nil)
			const sale = "fenced"
			e.openSale(sale, 10, 0)
			if got := e.reserveMany(sale, "first", 4); got != 4 {
				t.Fatalf("reserved %d, want 4", got)
			}
			e.persist(sale)

			ta, err := a.lead(e.ctx)
			if err != nil || ta == nil {
				t.Fatalf("a leads: %v, %v", ta, err)
			}
			// a is paused past its lease: the lease runs out, b takes it.
			if err := e.rdb.Del(e.ctx, lua.LeaderKey()).Err(); err != nil {
				t.Fatal(err)
			}
			tb, err := b.lead(e.ctx)
			if err != nil || tb == nil {
				t.Fatalf("b leads: %v, %v", tb, err)
			}
			if fencing.Of(tb) <= fencing.Of(ta) {
				t.Fatalf("tokens: b's %d not above a's %d", fencing.Of(tb), fencing.Of(ta))
			}
			// b expires the first orders and re-syncs; then two more are due.
			e.clock.Add(time.Hour)
			if n, err := b.ExpireDue(tb); err != nil || n != 4 {
				t.Fatalf("b's expiry: got %d, %v; want 4", n, err)
			}
			if _, _, err := b.Resync(tb, sale); err != nil {
				t.Fatalf("b's re-sync: %v", err)
			}
			if got := e.reserveMany(sale, "second", 2); got != 2 {
				t.Fatalf("reserved %d, want 2", got)
			}
			late := e.persist(sale)
			e.clock.Add(time.Hour)
			redisBefore := e.redisSale(sale)

			// a resumes with its old term's context.
			if _, err := a.ExpireDue(ta); !errors.Is(err, flashgate.ErrFenced) {
				t.Errorf("stale expiry: got %v, want ErrFenced", err)
			}
			for _, o := range late {
				if got, err := e.db.Order(e.ctx, o.ID); err != nil || got.Status != flashgate.StatusPendingPayment {
					t.Errorf("order %s after the stale expiry: got %v, %v; want pending_payment", o.ID, got.Status, err)
				}
			}
			if _, _, err := a.Resync(ta, sale); !errors.Is(err, flashgate.ErrFenced) {
				t.Errorf("stale re-sync: got %v, want ErrFenced", err)
			}
			if _, err := a.sync.Restore(ta, sale); !errors.Is(err, flashgate.ErrFenced) {
				t.Errorf("stale restore: got %v, want ErrFenced", err)
			}
			if err := a.Stop(ta, sale); !errors.Is(err, flashgate.ErrFenced) {
				t.Errorf("stale close: got %v, want ErrFenced", err)
			}
			if err := a.mark(ta, sale, lua.FieldResume, 1); !errors.Is(err, flashgate.ErrFenced) {
				t.Errorf("stale mark: got %v, want ErrFenced", err)
			}
			if got := e.redisSale(sale); got != redisBefore {
				t.Errorf("redis after the stale writes:\n got %s\nwant %s", got, redisBefore)
			}
			if s, err := e.db.Sale(e.ctx, sale); err != nil || s.State != flashgate.StateOpen {
				t.Errorf("sale row after the stale close: got %v, %v; want open", s.State, err)
			}
			if n, err := b.ExpireDue(tb); err != nil || n != 2 {
				t.Errorf("b's expiry of the late orders: got %d, %v; want 2", n, err)
			}

			// a's next renewal finds the lease gone: its term ends.
			if tc, err := a.lead(e.ctx); tc != nil || err != nil {
				t.Errorf("a's renewal: got %v, %v; want not leading", tc, err)
			}
			if ta.Err() == nil || !errors.Is(context.Cause(ta), errLeaseLost) {
				t.Errorf("a's term after its lease was lost: got %v (cause %v), want ended by errLeaseLost", ta.Err(), context.Cause(ta))
			}
		})
	}
}

// TestTermEnds: a term lives on while its keeper renews the lease (here
// without any tick loop), ends by itself when its lease's time runs out
// because no renewal gets through (the leader's transport frozen), ends
// when the lease is lost and when a renewal fails; a restore that outlives
// its pass's deadline still ends with its term.
func TestTermEnds(t *testing.T) {
	e := newEnv(t, sqliteDSN(t), nil)
	// A lease of 1s renewed every 20ms: room for a loaded machine's pauses.
	const ttl = time.Second
	proxy := redistest.StartProxy(t, e.srv.Addr)
	frozen := redis.NewClient(&redis.Options{Addr: proxy.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = frozen.Close() })
	a := e.second("a", func(c *Config) { c.Redis, c.LeaderTTL, c.TickEvery = frozen, ttl, 20*time.Millisecond })
	defer a.resign()

	ta, err := a.lead(e.ctx)
	if err != nil || ta == nil {
		t.Fatalf("lead: %v, %v", ta, err)
	}
	// For four lease times the keeper's renewals keep the term alive.
	if _, ended := testwait.For(4*ttl, func() bool { return ta.Err() != nil }); ended {
		t.Fatalf("the term ended while its keeper renewed the lease: %v", context.Cause(ta))
	}
	proxy.Pause()
	select {
	case <-ta.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the term outlived its lease")
	}
	proxy.Resume()
	if !errors.Is(context.Cause(ta), errLeaseRanOut) {
		t.Errorf("cause: got %v, want errLeaseRanOut", context.Cause(ta))
	}
	testwait.Eventually(t, 10*time.Second, func() bool { return !a.Leading() }, "not leading after the term ran out")

	// The lease is lost: the keeper ends the term.
	tb, err := a.lead(e.ctx)
	if err != nil || tb == nil {
		t.Fatalf("lead again: %v, %v", tb, err)
	}
	if err := e.rdb.Del(e.ctx, lua.LeaderKey()).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-tb.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the term outlived its lost lease")
	}
	if !errors.Is(context.Cause(tb), errLeaseLost) {
		t.Errorf("cause: got %v, want errLeaseLost", context.Cause(tb))
	}

	tc, err := a.lead(e.ctx)
	if err != nil || tc == nil {
		t.Fatalf("lead a third time: %v, %v", tc, err)
	}
	pass, cancel := context.WithTimeout(tc, time.Millisecond)
	defer cancel()
	rctx, rcancel := restoreContext(pass)
	defer rcancel()
	<-pass.Done()
	if rctx.Err() != nil {
		t.Fatalf("the restore ended with its pass's deadline: %v", rctx.Err())
	}
	if fencing.Of(rctx) != fencing.Of(tc) || fencing.Of(tc) < 1 {
		t.Errorf("restore's token: got %d, want the term's %d", fencing.Of(rctx), fencing.Of(tc))
	}
	// A renewal that fails (here: its context is already done) ends the term.
	dead, kill := context.WithCancel(e.ctx)
	kill()
	if td, err := a.lead(dead); td != nil || err == nil {
		t.Fatalf("renewal on a dead context: got %v, %v; want an error", td, err)
	}
	select {
	case <-rctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the restore outlived its term")
	}
	if !errors.Is(context.Cause(tc), errRenewFailed) {
		t.Errorf("cause: got %v, want errRenewFailed", context.Cause(tc))
	}
}

// TestAdminResyncFences: an admin re-sync on a control plane that does not
// lead takes a fresh token, which fences off the leader's writes to that
// sale until the leader's next renewal takes a newer one.
func TestAdminResyncFences(t *testing.T) {
	e := newEnv(t, sqliteDSN(t), nil)
	leader, other := e.svc, e.second("other", nil)
	const sale = "admin"
	e.openSale(sale, 5, 0)
	tl, err := leader.lead(e.ctx)
	if err != nil || tl == nil {
		t.Fatalf("lead: %v, %v", tl, err)
	}
	if _, _, err := leader.Resync(tl, sale); err != nil {
		t.Fatalf("leader's re-sync: %v", err)
	}
	if _, _, err := other.Resync(e.ctx, sale); err != nil {
		t.Fatalf("admin re-sync on the other: %v", err)
	}
	if _, _, err := leader.Resync(tl, sale); !errors.Is(err, flashgate.ErrFenced) {
		t.Fatalf("leader's re-sync after the admin's: got %v, want ErrFenced", err)
	}
	// An admin re-sync on the leader tries the lease's token, refused here,
	// then a fresh one.
	if _, _, err := leader.Resync(e.ctx, sale); err != nil {
		t.Fatalf("admin re-sync on the leader after the other's: %v", err)
	}
	old := fencing.Of(tl)
	if tc, err := leader.lead(e.ctx); tc != tl || err != nil {
		t.Fatalf("renewal: got %v, %v; want the same term", tc, err)
	}
	if fencing.Of(tl) <= old {
		t.Errorf("token after the renewal: got %d, want above %d", fencing.Of(tl), old)
	}
	if _, _, err := leader.Resync(tl, sale); err != nil {
		t.Errorf("leader's re-sync after its renewal: %v", err)
	}
	// Now an admin re-sync on the leader carries the lease's token: no
	// token is taken, and the loops' next write is not refused.
	before, _ := e.rdb.Get(e.ctx, lua.FenceKey()).Int64()
	if _, _, err := leader.Resync(e.ctx, sale); err != nil {
		t.Errorf("admin re-sync on the leader: %v", err)
	}
	if after, _ := e.rdb.Get(e.ctx, lua.FenceKey()).Int64(); after != before {
		t.Errorf("tokens handed out by an admin re-sync on the leader: got %d, want 0", after-before)
	}
	if _, _, err := leader.Resync(tl, sale); err != nil {
		t.Errorf("leader's re-sync after an admin re-sync on it: %v", err)
	}
}

// TestLeaderTokenAboveLostCounter: a Sentinel failover loses the fencing
// counter's last increment (this leader's own newer token, taken just
// before the primary died and not yet replicated), while the lease, older,
// survives on the promoted replica. The leader's renewal, which now waits
// for the promoted replica (a `flashgate controlplane` on Sentinel) instead
// of failing and ending the term, finds its lease and keeps its term: its
// token is then above the counter, and the next token handed out (an admin
// call's, or the next leader's) must still outrank it. Before, the renewal
// kept the token (the counter was not above it), and the next token taken
// was the leader's own: an admin call's writes could not fence off a
// paused leader, nor the next leader's.
func TestLeaderTokenAboveLostCounter(t *testing.T) {
	e := newEnv(t, sqliteDSN(t), func(c *Config) { c.TickEvery, c.LeaderTTL = time.Hour, time.Hour })
	a := e.svc
	if ta, err := a.lead(e.ctx); err != nil || ta == nil {
		t.Fatalf("a leads: %v, %v", ta, err)
	}
	mine := a.termFence()
	// The failover: the promoted replica never saw the counter reach mine.
	if err := e.rdb.Set(e.ctx, lua.FenceKey(), mine-1, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if ta, err := a.lead(e.ctx); err != nil || ta == nil {
		t.Fatalf("a's renewal on the promoted replica: %v, %v", ta, err)
	}
	held := a.termFence()
	next, err := a.takeFence(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if next <= held {
		t.Errorf("the next token after the renewal: got %d, want above the leader's %d (its token before the failover %d)", next, held, mine)
	}
}

// TestTermTokenWhenTimerEndsDuringRenewal: the term's timer (its lease's
// time by the local clock) fires while a renewal is out, after the renewal
// kept the term's token (refreshFence) and before it extends the term
// (holdTerm), as happens when the renewal waited for a promoted replica
// until just before the term's end. The term the renewal starts anew must
// carry the token, not none: before, it carried 0, the timer having
// cleared the Service's token, and its writes were refused, or accepted
// unfenced on a hash no token had written, until the next tick.
func TestTermTokenWhenTimerEndsDuringRenewal(t *testing.T) {
	e := newEnv(t, sqliteDSN(t), func(c *Config) { c.TickEvery, c.LeaderTTL = time.Hour, time.Hour })
	a := e.svc
	if ta, err := a.lead(e.ctx); err != nil || ta == nil {
		t.Fatalf("a leads: %v, %v", ta, err)
	}
	mine := a.termFence()
	sent := time.Now()
	tok, err := a.refreshFence(e.ctx) // the renewal's
	if err != nil || tok != mine {
		t.Fatalf("the renewal's refreshFence: got %d, %v; want %d kept", tok, err, mine)
	}
	a.mu.Lock()
	term := a.term
	a.mu.Unlock()
	a.endTermOf(term, errLeaseRanOut) // the timer fires
	tctx := a.holdTerm(e.ctx, sent, tok)
	if got := fencing.Of(tctx); got != mine {
		t.Errorf("the renewed term's token: got %d, want %d", got, mine)
	}
	if got := a.termFence(); got != mine {
		t.Errorf("termFence after the renewal: got %d, want %d", got, mine)
	}
}
