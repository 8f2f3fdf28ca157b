package main

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestReloadOnFailureAtMostEvery200ms sends the hook calls that failed
// unanswered, many at one instant and then 100 ms apart, as a crowd of
// buyers does while the primary and every Sentinel are out of reach, and
// counts the reloads it asks for: one per reloadEvery. Before, each failed
// call asked for one, and go-redis's LazyReload waits 200 ms only after a
// reload that succeeded: with no Sentinel answering, the reloads (each a
// question to every Sentinel, retried, and a line in go-redis's log) came
// as fast as go-redis's retries of the question let them: measured against
// one Sentinel that closed each connection at the question, about 25
// questions a second from a few dozen failing callers, about 12 with the
// hook's bound (5 reloads, each question sent twice).
func TestReloadOnFailureAtMostEvery200ms(t *testing.T) {
	clock := time.Unix(1_000_000, 0)
	reloads := 0
	h := &reloadOnFailure{reload: func(context.Context) { reloads++ }, now: func() time.Time { return clock }}
	refused := syscall.ECONNREFUSED
	ctx := context.Background()
	ended, cancel := context.WithCancel(ctx)
	cancel()
	steps := []struct {
		name    string
		advance time.Duration
		ctx     context.Context
		err     error
		calls   int
		want    int // reloads in all after the step
	}{
		{"a crowd's failed calls at one instant", 0, ctx, refused, 1000, 1},
		{"100 ms later", 100 * time.Millisecond, ctx, refused, 1000, 1},
		{"200 ms after the first", 100 * time.Millisecond, ctx, refused, 1000, 2},
		{"an error reply", time.Second, ctx, redis.Nil, 10, 2},
		{"a call whose own context ended", 0, ended, context.Canceled, 10, 2},
		{"answered calls", 0, ctx, nil, 10, 2},
		{"a call failed by go-redis's dial breaker", 0, ctx, errors.New("dial tcp: connection refused"), 1, 3},
		{"a second later, a read that timed out", time.Second, ctx, os.ErrDeadlineExceeded, 3, 4},
	}
	for _, s := range steps {
		clock = clock.Add(s.advance)
		for range s.calls {
			h.check(s.ctx, s.err)
		}
		if reloads != s.want {
			t.Errorf("%s: got %d reloads in all, want %d", s.name, reloads, s.want)
		}
	}
}
