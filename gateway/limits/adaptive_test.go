package limits

import (
	"sync"
	"testing"
	"time"
)

// fakeLoad drives an Adaptive with a fake clock: each step fills the limit
// (or takes want places, when want > 0), then releases them all, each
// having taken took(n) with n taken, and moves the clock on by a tenth of
// a window.
type fakeLoad struct {
	a   *Adaptive
	now int64
}

func (f *fakeLoad) run(d time.Duration, took func(n int) time.Duration, want int) {
	end := f.now + int64(d)
	for f.now < end {
		n := 0
		for (want <= 0 || n < want) && f.a.Acquire() {
			n++
		}
		f.now += int64(DefaultAdaptiveWindow / 10)
		for range n {
			f.a.Release(took(n), f.now)
		}
	}
}

// fixed is a latency that does not depend on the places taken.
func fixed(d time.Duration) func(int) time.Duration { return func(int) time.Duration { return d } }

// queued is the latency of a server that answers c at once in base:
// beyond c, the rest wait their turn.
func queued(base time.Duration, c int) func(int) time.Duration {
	return func(n int) time.Duration { return base * time.Duration(max(n, c)) / time.Duration(c) }
}

func newFake(c AdaptiveConfig) *fakeLoad {
	return &fakeLoad{a: NewAdaptive(c), now: time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC).UnixNano()}
}

func TestAdaptiveGrowsUnderFastAnswers(t *testing.T) {
	f := newFake(AdaptiveConfig{Min: 4, Max: 256, Initial: 4})
	f.run(5*time.Second, fixed(time.Millisecond), 0)
	if got := f.a.Limit(); got != 256 {
		t.Errorf("got limit %d after 5 s of answers at the baseline, want the max 256", got)
	}
	if got := f.a.Baseline(); got != time.Millisecond {
		t.Errorf("got baseline %v, want 1ms", got)
	}
}

func TestAdaptiveHoldsWhenUnused(t *testing.T) {
	f := newFake(AdaptiveConfig{Min: 4, Max: 256, Initial: 64})
	f.run(5*time.Second, fixed(time.Millisecond), 10) // 10 in flight, below half the limit
	if got := f.a.Limit(); got != 64 {
		t.Errorf("got limit %d with 10 of 64 in use, want it held at 64", got)
	}
}

// TestAdaptiveShrinksUnderSlowAnswers: answers that slow down with the
// places taken (a server that answers 32 at once) shrink the limit to
// where the latency is back within the tolerance.
func TestAdaptiveShrinksUnderSlowAnswers(t *testing.T) {
	f := newFake(AdaptiveConfig{Min: 8, Max: 512, Initial: 512})
	f.run(time.Second, fixed(time.Millisecond), 20)
	if got := f.a.Baseline(); got != time.Millisecond {
		t.Fatalf("got baseline %v, want 1ms", got)
	}
	f.run(3*time.Second, queued(time.Millisecond, 32), 0)
	if got := f.a.Limit(); got < 32 || got > 64+8 {
		t.Errorf("got limit %d, want about 32–64 (32 answered at once, a tolerance of 2)", got)
	}
	if got := f.a.Baseline(); got != time.Millisecond {
		t.Errorf("got baseline %v, want 1ms kept", got)
	}
	// Within the tolerance it does not shrink.
	f2 := newFake(AdaptiveConfig{Min: 8, Max: 512, Initial: 100})
	f2.run(time.Second, fixed(time.Millisecond), 30)
	f2.run(time.Second, fixed(1900*time.Microsecond), 30)
	if got := f2.a.Limit(); got != 100 {
		t.Errorf("got limit %d with answers at 1.9 × the baseline, want 100 kept", got)
	}
}

// TestAdaptiveNeverBelowMin: answers slow even one at a time push the
// limit to its min and no further.
func TestAdaptiveNeverBelowMin(t *testing.T) {
	f := newFake(AdaptiveConfig{Min: 8, Max: 512, Initial: 512})
	f.run(time.Second, fixed(time.Millisecond), 20)
	low := f.a.Limit()
	for range 30 {
		f.run(DefaultAdaptiveWindow, queued(time.Millisecond, 1), 0) // n ms for n at once
		low = min(low, f.a.Limit())
	}
	if low != 8 {
		t.Errorf("got a lowest limit of %d, want the min 8", low)
	}
}

// TestAdaptiveFutileShrinks: when the latency stays as high whatever the
// limit (a process short of CPU), the limit stops falling after a few
// windows and that latency becomes the baseline, instead of the limit
// sinking to its min with the answers no faster.
func TestAdaptiveFutileShrinks(t *testing.T) {
	f := newFake(AdaptiveConfig{Min: 8, Max: 512, Initial: 512})
	f.run(time.Second, fixed(time.Millisecond), 0)
	f.run(3*time.Second, fixed(10*time.Millisecond), 0)
	if got := f.a.Limit(); got < 512/8 {
		t.Errorf("got limit %d, want at least %d (three halvings at most)", got, 512/8)
	}
	if got := f.a.Baseline(); got != 10*time.Millisecond {
		t.Errorf("got baseline %v, want 10ms taken as the baseline", got)
	}
}

func TestAdaptiveRecovers(t *testing.T) {
	f := newFake(AdaptiveConfig{Min: 8, Max: 512, Initial: 512})
	f.run(time.Second, fixed(time.Millisecond), 20)
	f.run(2*time.Second, queued(time.Millisecond, 8), 0)
	if got := f.a.Limit(); got > 16+4 {
		t.Fatalf("got limit %d, want at most about 16 while 8 are answered at once", got)
	}
	f.run(5*time.Second, fixed(time.Millisecond), 0)
	if got := f.a.Limit(); got != 512 {
		t.Errorf("got limit %d 5 s after answers were fast again, want 512", got)
	}
}

// TestAdaptiveBaselineAgesOut checks that a lasting rise in latency
// within the tolerance becomes the new baseline once the old minima have
// aged out, with no window that sheds everything to find it.
func TestAdaptiveBaselineAgesOut(t *testing.T) {
	f := newFake(AdaptiveConfig{Min: 8, Max: 512, Initial: 512, BaselineAge: 10 * time.Second})
	f.run(time.Second, fixed(time.Millisecond), 0)
	f.run(5*time.Second, fixed(1500*time.Microsecond), 0)
	if got := f.a.Baseline(); got != time.Millisecond {
		t.Fatalf("got baseline %v 5 s on, want 1ms still", got)
	}
	f.run(10*time.Second, fixed(1500*time.Microsecond), 0)
	if got := f.a.Baseline(); got != 1500*time.Microsecond {
		t.Errorf("got baseline %v 15 s on, want 1.5ms (the 1ms minima aged out)", got)
	}
	if got := f.a.Limit(); got != 512 {
		t.Errorf("got limit %d, want 512 kept", got)
	}
}

func TestAdaptiveQuietWindowMovesNothing(t *testing.T) {
	f := newFake(AdaptiveConfig{Min: 4, Max: 256, Initial: 16})
	// One answer a second: never MinSamples in a window.
	for range 30 {
		if !f.a.Acquire() {
			t.Fatal("Acquire refused with nothing in flight")
		}
		f.now += int64(time.Second)
		f.a.Release(time.Second, f.now)
	}
	if got := f.a.Limit(); got != 16 {
		t.Errorf("got limit %d after quiet windows, want 16 kept", got)
	}
}

func TestAdaptiveAcquireRefusesAtLimit(t *testing.T) {
	a := NewAdaptive(AdaptiveConfig{Min: 3, Max: 3})
	for i := range 3 {
		if !a.Acquire() {
			t.Fatalf("Acquire %d refused under the limit of 3", i)
		}
	}
	if a.Acquire() {
		t.Fatal("Acquire granted a 4th place under a limit of 3")
	}
	if got := a.Inflight(); got != 3 {
		t.Errorf("got %d in flight, want 3 (a refused Acquire takes none)", got)
	}
	a.Release(time.Millisecond, 1)
	if !a.Acquire() {
		t.Error("Acquire refused after a Release")
	}
}

func TestAdaptiveConcurrent(t *testing.T) {
	a := NewAdaptive(AdaptiveConfig{Min: 4, Max: 16, Window: time.Microsecond, MinSamples: 1})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 20000 {
				if a.Acquire() {
					if n := a.Inflight(); n > 16 {
						t.Errorf("got %d in flight, above the max 16", n)
					}
					a.Release(time.Millisecond, time.Now().UnixNano())
				}
			}
		})
	}
	wg.Wait()
	if got := a.Inflight(); got != 0 {
		t.Errorf("got %d in flight after every Release, want 0", got)
	}
	if l := a.Limit(); l < 4 || l > 16 {
		t.Errorf("got limit %d, want within 4–16", l)
	}
}

func TestAdaptiveAllocs(t *testing.T) {
	a := NewAdaptive(AdaptiveConfig{Window: time.Nanosecond, MinSamples: 1})
	now := int64(1)
	got := testing.AllocsPerRun(1000, func() {
		if a.Acquire() {
			now += 1000
			a.Release(time.Microsecond, now)
		}
	})
	if got != 0 {
		t.Errorf("got %v allocations per Acquire and Release, want 0", got)
	}
}

func BenchmarkAdaptive(b *testing.B) {
	a := NewAdaptive(AdaptiveConfig{Max: 1 << 20, Initial: 1 << 20})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if a.Acquire() {
				a.Release(time.Microsecond, time.Now().UnixNano())
			}
		}
	})
}
