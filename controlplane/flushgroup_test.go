package controlplane

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flashgate/flashgate/internal/testenv/testwait"
)

// TestFlushGroupShares: callers that ask while a flush runs share the next
// one, and every caller gets the result of a flush that began after it
// asked (a hold needs the journal as it was when its entry was made).
func TestFlushGroupShares(t *testing.T) {
	const callers = 20
	var g flushGroup
	var clock atomic.Int64 // a logical clock: asks and flush starts
	var flushes, waiting atomic.Int64
	release := make(chan struct{})
	flush := func(context.Context) (int, error) {
		began := clock.Add(1)
		if flushes.Add(1) == 1 {
			<-release // the first flush runs while the others ask
		}
		return int(began), nil
	}
	first := make(chan int, 1)
	go func() {
		n, _ := g.do(context.Background(), "s", flush)
		first <- n
	}()
	if _, ok := testwait.For(10*time.Second, func() bool { return flushes.Load() == 1 }); !ok {
		t.Fatal("the first flush did not start")
	}
	var wg sync.WaitGroup
	bad := make(chan string, callers)
	for range callers {
		wg.Go(func() {
			asked := clock.Add(1)
			waiting.Add(1)
			n, err := g.do(context.Background(), "s", flush)
			if err != nil || int64(n) <= asked {
				bad <- "a caller got a flush begun before it asked"
			}
		})
	}
	testwait.For(10*time.Second, func() bool { return waiting.Load() == callers })
	close(release)
	wg.Wait()
	<-first
	close(bad)
	for msg := range bad {
		t.Error(msg)
	}
	if got := flushes.Load(); got > callers/2 {
		t.Errorf("got %d flushes for %d callers asking during one, want them shared (≤ %d)", got, callers+1, callers/2)
	}
}

// TestFlushGroupCancelledNotShared: a flush cut short by its caller's
// context is not the result of those who waited for it: they flush again.
func TestFlushGroupCancelledNotShared(t *testing.T) {
	var g flushGroup
	ctx, cancel := context.WithCancel(context.Background())
	var runs atomic.Int64
	started, release := make(chan struct{}), make(chan struct{})
	flush := func(ctx context.Context) (int, error) {
		if runs.Add(1) == 1 {
			close(started)
			<-release
			return 0, ctx.Err()
		}
		return 7, nil
	}
	done := make(chan struct{})
	go func() { defer close(done); g.do(ctx, "s", flush) }()
	<-started
	got := make(chan int, 1)
	go func() {
		n, err := g.do(context.Background(), "s", flush)
		if err != nil {
			n = -1
		}
		got <- n
	}()
	cancel()
	close(release)
	<-done
	if n := <-got; n != 7 {
		t.Errorf("the waiter got %d, want 7 (its own flush, not the cancelled one's)", n)
	}
}

// TestFlushGroupWaiterLeaves: a caller whose context ends while another's
// flush runs returns its context's error then, running no flush (a hold
// whose request's deadline passed waited out every flush queued before
// it, then ran one its context cut short, while those behind it waited).
func TestFlushGroupWaiterLeaves(t *testing.T) {
	var g flushGroup
	var runs atomic.Int64
	started, release := make(chan struct{}), make(chan struct{})
	flush := func(ctx context.Context) (int, error) {
		if runs.Add(1) == 1 {
			close(started)
			<-release
		}
		return 1, ctx.Err()
	}
	done := make(chan struct{})
	go func() { defer close(done); g.do(context.Background(), "s", flush) }()
	<-started
	ctx, cancel := context.WithCancel(context.Background())
	left := make(chan error, 1)
	go func() {
		_, err := g.do(ctx, "s", flush)
		left <- err
	}()
	cancel()
	var err error
	_, ok := testwait.For(10*time.Second, func() bool {
		select {
		case err = <-left:
			return true
		default:
			return false
		}
	})
	close(release)
	<-done
	if !ok {
		err = <-left
		t.Errorf("a waiter whose context ended: returned only once the flush before it finished (%v), want at once", err)
	} else if !errors.Is(err, context.Canceled) {
		t.Errorf("a waiter whose context ended: got %v, want %v", err, context.Canceled)
	}
	if got := runs.Load(); got != 1 {
		t.Errorf("flushes: got %d, want 1 (the waiter that left runs none)", got)
	}
}
