package payments_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/payments"
)

// paceAll captures the first half of ids and cancels the rest through
// pc, from a few goroutines at once, and returns the errors.
func paceAll(pc *payments.Pacer, ids []string, captures int) []error {
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	next := make(chan int)
	for range 6 {
		wg.Go(func() {
			for i := range next {
				var in flashgate.Intent
				var err error
				want := flashgate.IntentCanceled
				if i < captures {
					in, err = pc.Capture(context.Background(), ids[i], "flashgate-capture-"+ids[i])
					want = flashgate.IntentSucceeded
				} else {
					in, err = pc.Cancel(context.Background(), ids[i])
				}
				if err == nil && in.Status != want {
					err = fmt.Errorf("%s: status %s, want %s", ids[i], in.Status, want)
				}
				errs[i] = err
			}
		})
	}
	for i := range ids {
		next <- i
	}
	close(next)
	wg.Wait()
	return errs
}

// holds makes n confirmed holds at the stand-in and returns their ids.
func holds(t *testing.T, n int) (*payments.Stripe, []string, func(overall, perEndpoint int), func() int) {
	t.Helper()
	p, stand := newStripe(t)
	ids := make([]string, n)
	for i := range ids {
		h, err := p.Hold(context.Background(), holdOf(fmt.Sprint("e", i)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stand.Confirm(h.ID, "4242424242424242"); err != nil {
			t.Fatal(err)
		}
		ids[i] = h.ID
	}
	return p, ids, stand.Limits, stand.Limited
}

// TestPacerPaces: captures and cancels paced at the provider's limits
// (here 10/s per endpoint, 16/s overall) all succeed, none answered 429,
// and they cannot have gone faster than the rate.
func TestPacerPaces(t *testing.T) {
	const n, captures = 32, 16
	p, ids, limits, limited := holds(t, n)
	limits(16, 10)
	pc := payments.NewPacer(p, payments.PacerConfig{PerEndpoint: 10, Overall: 16})
	start := time.Now()
	for i, err := range paceAll(pc, ids, captures) {
		if err != nil {
			t.Errorf("call %d: %v", i, err)
		}
	}
	elapsed := time.Since(start)
	if got := limited(); got != 0 {
		t.Errorf("the provider answered %d requests 429, want 0 from a paced caller", got)
	}
	if st := pc.Stats(); st.Calls != n || st.Retries != 0 || st.Failed != 0 {
		t.Errorf("stats: got %+v, want %d calls, no retry, no failure", st, n)
	}
	// A lower bound, which no slow machine breaks: n calls at 16/s
	// overall (bursts of one) take at least (n-1)/16 s.
	if least := time.Duration(n-1) * time.Second / 16; elapsed < least {
		t.Errorf("%d calls in %v: faster than the pacing allows (%v)", n, elapsed, least)
	}
}

// TestPacerRetries: a pacer set faster than the provider takes (40/s
// against 5/s per endpoint) meets 429s, waits their Retry-After and tries
// again: every call succeeds, none surfaced as a 429.
func TestPacerRetries(t *testing.T) {
	const n = 15
	p, ids, limits, limited := holds(t, n)
	limits(0, 5)
	pc := payments.NewPacer(p, payments.PacerConfig{PerEndpoint: 40, Overall: 40, MaxBackoff: 2 * time.Second, MaxTime: time.Minute})
	for i, err := range paceAll(pc, ids, n) {
		if err != nil {
			t.Errorf("call %d: %v", i, err)
		}
	}
	if limited() == 0 {
		t.Error("the provider answered no 429: the test tried nothing")
	}
	if st := pc.Stats(); st.Failed != 0 {
		t.Errorf("stats: got %+v, want no failure", st)
	}
}

// TestPacerGivesUp: a provider that keeps failing is tried again with
// backoff for MaxTime, then the call fails as ErrUnavailable; a refusal
// for good (not capturable) is not tried again.
func TestPacerGivesUp(t *testing.T) {
	p, stand := newStripe(t)
	h, err := p.Hold(context.Background(), holdOf("e1"))
	if err != nil {
		t.Fatal(err)
	}
	pc := payments.NewPacer(p, payments.PacerConfig{MaxBackoff: 100 * time.Millisecond, MaxTime: time.Second})
	if _, err := pc.Capture(context.Background(), h.ID, "k1"); !errors.Is(err, flashgate.ErrNotCapturable) {
		t.Fatalf("capture of an unconfirmed hold: got %v, want ErrNotCapturable", err)
	}
	if st := pc.Stats(); st.Calls != 1 {
		t.Errorf("a refusal for good was tried %d times, want 1", st.Calls)
	}
	if _, err := stand.Confirm(h.ID, "4242424242424242"); err != nil {
		t.Fatal(err)
	}
	stand.FailNext(1_000_000)
	if _, err := pc.Capture(context.Background(), h.ID, "k1"); !errors.Is(err, flashgate.ErrUnavailable) {
		t.Fatalf("capture at a failing provider: got %v, want ErrUnavailable", err)
	}
	if st := pc.Stats(); st.Retries == 0 || st.Failed != 2 {
		t.Errorf("stats: got %+v, want retries and 2 failed calls", st)
	}
	stand.FailNext(0)
	if in, err := pc.Capture(context.Background(), h.ID, "k1"); err != nil || in.Status != flashgate.IntentSucceeded {
		t.Errorf("capture after the provider recovered: got %+v, %v", in, err)
	}
}
