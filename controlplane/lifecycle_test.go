package controlplane

import (
	"bytes"
	"context"
	"runtime/debug"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/internal/fencing"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/lua"
)

// slowRedis is the Redis a stuck network gives: while on, calls for which
// match reports true take slowFor to answer whatever their context says,
// as go-redis keeps reading until its read timeout after a context ends.
// held is closed at the first such call.
type slowRedis struct {
	on      atomic.Bool
	match   func(ctx context.Context, cmd redis.Cmder) bool
	held    chan struct{}
	holding atomic.Bool
	inside  atomic.Int64 // matching calls not yet answered
}

// slowFor is well beyond the time goleak.VerifyNone retries for (about half
// a second), so that a goroutine still in such a call when it checks is
// found.
const slowFor = 2 * time.Second

func newSlowRedis(match func(ctx context.Context, cmd redis.Cmder) bool) *slowRedis {
	return &slowRedis{match: match, held: make(chan struct{})}
}

func (h *slowRedis) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *slowRedis) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.on.Load() && h.match(ctx, cmd) {
			if h.holding.CompareAndSwap(false, true) {
				close(h.held)
			}
			h.inside.Add(1)
			defer h.inside.Add(-1)
			time.Sleep(slowFor) // bounded: the call then goes on
		}
		return next(ctx, cmd)
	}
}
func (h *slowRedis) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// blockingStore holds the tick's listing of the sales while on, until its
// context ends: the tick sends no renewal meanwhile, so the term's keeper
// does.
type blockingStore struct {
	Store
	on atomic.Bool
}

func (b *blockingStore) LiveSales(ctx context.Context) ([]flashgate.Sale, error) {
	if b.on.Load() {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return b.Store.LiveSales(ctx)
}

// TestCloseWaitsForTermKeeper: Close returns only once every goroutine the
// Service started has ended, the keeper of its leadership term included,
// even while that keeper waits on a slow Redis; Close twice and Run after
// Close are safe. With a Close that does not wait, it returns while the
// keeper (controlplane.(*Service).keepTerm) is still in its renewal.
func TestCloseWaitsForTermKeeper(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) }) // runs last, after the servers stop
	e := newEnv(t, sqliteDSN(t), nil)
	rdb := e.srv.Client(t)
	// Only the keeper's renewals are held: the tick renews under the
	// term's context too, and a tick held in its renewal would keep Run
	// from returning until the keeper's had ended as well.
	slow := newSlowRedis(func(ctx context.Context, cmd redis.Cmder) bool {
		a := cmd.Args()
		return len(a) > 1 && (cmd.Name() == "evalsha" && a[1] == lua.Extend.Hash()) && fencing.TermOf(ctx) != nil &&
			bytes.Contains(debug.Stack(), []byte("controlplane.(*Service).keepTerm"))
	})
	rdb.AddHook(slow)
	store := &blockingStore{Store: e.db}
	svc, err := New(Config{
		Redis: rdb, Store: store, Releaser: e.rel, AdminToken: testToken, Clock: e.clock,
		Logger: quietLogger(), TickEvery: 10 * time.Millisecond, NodeID: "closing",
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- svc.Run(ctx) }()
	testwait.Eventually(t, 10*time.Second, svc.Leading, "the Service never led")

	store.on.Store(true)
	slow.on.Store(true)
	select {
	case <-slow.held:
	case <-time.After(10 * time.Second):
		t.Fatal("the term's keeper never renewed the lease")
	}
	cancel()
	if err := <-ran; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if err := svc.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if n := slow.inside.Load(); n != 0 {
		t.Errorf("Close returned with %d renewal(s) of the term's keeper still in flight, want 0", n)
	}
	if err := svc.Close(); err != nil { // a second Close is safe
		t.Fatalf("Close again: %v", err)
	}
	if err := svc.Run(context.Background()); err != nil { // and Run after it returns at once
		t.Fatalf("Run after Close: %v", err)
	}
	if svc.Leading() {
		t.Error("Leading after Close: got true, want false")
	}
	// The cleanup's goleak.VerifyNone finds nothing the Service started.
}
