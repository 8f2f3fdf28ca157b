package inventory_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/flashgate/flashgate/inventory"
	"github.com/flashgate/flashgate/lua"
)

// TestCloseWaitsForBatches: a crowd's reserves of one sale, with one call
// in flight at a time, chain their batches on goroutines of the Service's
// own; after Close (twice) none is left, and the Service still answers.
func TestCloseWaitsForBatches(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) }) // runs last, after the server stops
	_, rdb := newRedis(t)
	svc := inventory.New(rdb, inventory.Config{Logger: quiet(), ReserveCallsInFlight: 1})
	prepSale(t, rdb, "c", 100, 1, "open")
	ctx := context.Background()
	run(400, 64, func(i int) { _, _ = svc.Reserve(ctx, "c", "user-"+strconv.Itoa(i), "", 1) })
	if err := svc.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := svc.Close(); err != nil {
		t.Fatalf("Close again: %v", err)
	}
	run(50, 16, func(i int) { _, _ = svc.Reserve(ctx, "c", "late-"+strconv.Itoa(i), "", 1) })
}

// slowHook holds every Redis call for delay once armed.
type slowHook struct {
	armed   atomic.Bool
	delay   time.Duration
	entered chan struct{} // gets a value as a held call starts
}

func (h *slowHook) hold() {
	if h.armed.Load() {
		select {
		case h.entered <- struct{}{}:
		default:
		}
		time.Sleep(h.delay)
	}
}

func (h *slowHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *slowHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.hold()
		return next(ctx, cmd)
	}
}

func (h *slowHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.hold()
		return next(ctx, cmds)
	}
}

// TestCloseWaitsForAbandonedBatch: a buyer who gives up while their batch
// waits behind another leaves that batch to a goroutine of the Service's
// own (the reserve still runs; a retry finds the order). Close waits for
// it: right after Close the order is in Redis, and goleak (no option but
// the goroutines that were there before) finds nothing left. With a Close
// that does not wait, the order is not there yet (checked).
func TestCloseWaitsForAbandonedBatch(t *testing.T) {
	_, rdb := newRedis(t)
	prepSale(t, rdb, "a", 10, 1, "open")
	hook := &slowHook{delay: 2 * time.Second, entered: make(chan struct{}, 1)}
	rdb.AddHook(hook)
	svc := inventory.New(rdb, inventory.Config{Logger: quiet(), ReserveCallsInFlight: 1})
	// A first reserve reads the sale's layout, which the Service keeps.
	if _, err := svc.Reserve(context.Background(), "a", "warm", "", 1); err != nil {
		t.Fatalf("warming Reserve: %v", err)
	}
	before := goleak.IgnoreCurrent()
	hook.armed.Store(true)
	lead := make(chan error, 1)
	go func() {
		_, err := svc.Reserve(context.Background(), "a", "leader", "", 1)
		lead <- err
	}()
	select {
	case <-hook.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the leader's reserve never reached Redis")
	}
	// The second buyer's batch waits behind the leader's; they give up.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := svc.Reserve(ctx, "a", "gave-up", "", 1); err == nil {
		t.Fatalf("Reserve of a buyer who gave up: got nil error, want unavailable")
	}
	if err := <-lead; err != nil {
		t.Fatalf("leader's Reserve: %v", err)
	}
	// The leader was answered; the abandoned batch is being sent on a
	// goroutine of the Service's own, which Close waits for.
	if err := svc.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	hook.armed.Store(false)
	if got, err := rdb.HGet(context.Background(), lua.BuyersKey("a"), "gave-up").Result(); err != nil || got == "" {
		t.Errorf("abandoned buyer's order right after Close: got %q, %v; want it reserved", got, err)
	}
	// The client's own goroutines (go-redis' auto-pipeliner) end with it.
	_ = rdb.Close()
	if err := goleak.Find(before); err != nil {
		t.Errorf("goroutines left after Close: %v", err)
	}
}

// TestWaitingBatchSentByItsCaller: a batch that waits behind its sale's
// call is sent, once that call returns, by a caller of its own still
// waiting, even after another of its callers gave up: both orders are
// reserved, the one who stayed is answered with theirs, and nothing is
// left running (goleak, with no Close first).
func TestWaitingBatchSentByItsCaller(t *testing.T) {
	_, rdb := newRedis(t)
	prepSale(t, rdb, "h", 10, 1, "open")
	hook := &slowHook{delay: time.Second, entered: make(chan struct{}, 1)}
	rdb.AddHook(hook)
	svc := inventory.New(rdb, inventory.Config{Logger: quiet(), ReserveCallsInFlight: 1})
	if _, err := svc.Reserve(context.Background(), "h", "warm", "", 1); err != nil {
		t.Fatalf("warming Reserve: %v", err)
	}
	before := goleak.IgnoreCurrent()
	hook.armed.Store(true)
	lead := make(chan error, 1)
	go func() {
		_, err := svc.Reserve(context.Background(), "h", "leader", "", 1)
		lead <- err
	}()
	select {
	case <-hook.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the leader's reserve never reached Redis")
	}
	stayed := make(chan error, 1)
	go func() {
		_, err := svc.Reserve(context.Background(), "h", "stayed", "", 1)
		stayed <- err
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := svc.Reserve(ctx, "h", "gave-up", "", 1); err == nil {
		t.Fatalf("Reserve of a buyer who gave up: got nil error, want unavailable")
	}
	hook.armed.Store(false)
	if err := <-lead; err != nil {
		t.Fatalf("leader's Reserve: %v", err)
	}
	if err := <-stayed; err != nil {
		t.Fatalf("Reserve of the buyer who stayed: %v", err)
	}
	for _, u := range []string{"leader", "stayed", "gave-up"} {
		if got, err := rdb.HGet(context.Background(), lua.BuyersKey("h"), u).Result(); err != nil || got == "" {
			t.Errorf("order of %s: got %q, %v; want it reserved", u, got, err)
		}
	}
	_ = rdb.Close()
	if err := goleak.Find(before); err != nil {
		t.Errorf("goroutines left: %v", err)
	}
}

// scriptHook counts the reserve scripts (EVALSHA, EVAL) sent as a command
// of their own and inside a pipeline (which the auto-pipeliner sends).
type scriptHook struct{ alone, piped atomic.Int64 }

func isScript(cmd redis.Cmder) bool {
	n := cmd.Name()
	return n == "evalsha" || n == "eval"
}

func (h *scriptHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isScript(cmd) {
			h.alone.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *scriptHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if isScript(c) {
				h.piped.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

// TestBatchedReservesBypassPipeliner: with batching on (the default) and
// no WAIT, a crowd's script calls go as commands of their own from the
// goroutine that sends each batch, none through the auto-pipeliner; with
// MaxReserveBatch 1 they keep it.
func TestBatchedReservesBypassPipeliner(t *testing.T) {
	for _, tc := range []struct {
		name      string
		batch     int
		wantPiped bool
	}{
		{"batched", 0, false},
		{"one-a-call", 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, rdb := newRedis(t)
			prepSale(t, rdb, "p", 1000, 1, "open")
			hook := &scriptHook{}
			rdb.AddHook(hook)
			svc := inventory.New(rdb, inventory.Config{Logger: quiet(), MaxReserveBatch: tc.batch})
			ctx := context.Background()
			run(300, 32, func(i int) {
				if _, err := svc.Reserve(ctx, "p", "user-"+strconv.Itoa(i), "", 1); err != nil {
					t.Errorf("Reserve: %v", err)
				}
			})
			alone, piped := hook.alone.Load(), hook.piped.Load()
			if got := piped > 0; got != tc.wantPiped || alone+piped == 0 {
				t.Errorf("script calls: %d alone, %d pipelined; want pipelined %v", alone, piped, tc.wantPiped)
			}
		})
	}
}
