// Package testwait is the one way tests wait: for a state, never for a
// fixed time. Every package's tests (and the fault and bench harnesses)
// use it instead of sleeping.
package testwait

import (
	"testing"
	"time"
)

// The pause between two checks of a condition: the first is minPause,
// each later one doubles up to maxPause.
const (
	minPause = time.Millisecond
	maxPause = 20 * time.Millisecond
)

// For calls cond until it returns true or timeout has passed, and returns
// how long that took and whether cond held. cond runs on the caller's
// goroutine; it is called at least once, and once more after the timeout
// if the last call was before it.
func For(timeout time.Duration, cond func() bool) (time.Duration, bool) {
	start := time.Now()
	deadline := start.Add(timeout)
	pause := minPause
	for {
		if cond() {
			return time.Since(start), true
		}
		left := time.Until(deadline)
		if left <= 0 {
			return time.Since(start), false
		}
		time.Sleep(min(pause, left))
		pause = min(2*pause, maxPause)
	}
}

// Eventually waits up to timeout for cond and fails the test with the
// given message if it never held.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	if _, ok := For(timeout, cond); !ok {
		t.Fatalf("waited %v for "+format, append([]any{timeout}, args...)...)
	}
}

// Until returns once the wall clock reaches at (at once when it has): a
// schedule point for actors a test times against a deadline the server
// keeps on the same clock, such as a draw's entries_close_at ("a second
// before the close", "the loss 150 ms after it"), or a seeded schedule
// of their steps, where no state marks the moment. A test that needs a
// state a poll can see waits for it with For or Eventually instead.
func Until(at time.Time) {
	if d := time.Until(at); d > 0 {
		time.Sleep(d)
	}
}
