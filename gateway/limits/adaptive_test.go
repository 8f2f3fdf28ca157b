package limits

import (
	"sync"
	"testing"
	"time"
)

// fakeLoad drives an Adaptive with a fake clock: each step fills the limit
// (or takes want places, when want > 0), then releases them all, each
// having taken took, and moves the clock on by a tenth of a window.
type fakeLoad struct {
	a   *Adaptive
	now int64
}

func (f *fakeLoad) run(d time.Duration, took time.Duration, want int) {
	end := f.now + int64(d)
	for f.now < end {
		n := 0
		for (want <= 0 || n < want) && f.a.Acquire() {
			n++
		}
		f.now += int64(DefaultAdaptiveWindow / 10)
		for range n {
			f.a.Release(took, f.now)
		}
	}
}

func newFake(c AdaptiveConfig) *fakeLoad {
	return &fakeLoad{a: NewAdaptive(c), now: time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC).UnixNano()}
}

func TestAdaptiveGrowsUnderFastAnswers(t *testing.T) {
	f := newFake(AdaptiveConfig{Min: 4, Max: 256, Initial: 4})
	f.run(5*time.Second, time.Millisecond, 0)
	if got := f.a.Limit(); got != 256 {
		t.Errorf("got limit %d after 5 s of answers at the baseline, want the max 256", got)
	}
	if got := f.a.Baseline(); got != time.Millisecond {
		t.Errorf("got baseline %v, want 1ms", got)
	}
}

func TestAdaptiveHoldsWhenUnused(t *testing.T) {
	f := newFake(AdaptiveConfig{Min: 4, Max: 256, Initial: 64})
	f.run(5*time.Second, time.Millisecond, 10) // 10 in flight, below half the limit
	if got := f.a.Limit(); got != 64 {
		t.Errorf("got limit %d with 10 of 64 in use, want it held at 64", got)
	}
}

func TestAdaptiveShrinksUnderSlowAnswersNeverBelowMin(t *testing.T) {
	f := newFake(AdaptiveConfig{Min: 8, Max: 512, Initial: 512})
	f.run(time.Second, time.Millisecond, 0)
	if got := f.a.Limit(); got != 512 {
		t.Fatalf("got limit %d, want 512 before the slow answers", got)
	}
	// Three times the baseline, above the tolerance of 2: the limit falls,
	// window after window, and stops at the min.
	var last int64 = 512
	for range 20 {
		f.run(DefaultAdaptiveWindow, 3*time.Millisecond, 0)
		got := f.a.Limit()
		if got > last {
			t.Fatalf("got limit %d after %d, want it never growing while answers are slow", got, last)
		}
		if got < 8 {
			t.Fatalf("got limit %d, below the min 8", got)
		}
		last = got
	}
	if last != 8 {
		t.Errorf("got limit %d after 2 s of slow answers, want the min 8", last)
	}
	if got := f.a.Latency(); got != 3*time.Millisecond {
		t.Errorf("got latency %v, want 3ms", got)
	}
	// Within the tolerance it does not shrink.
	f2 := newFake(AdaptiveConfig{Min: 8, Max: 512, Initial: 100})
	f2.run(time.Second, time.Millisecond, 30)
	f2.run(time.Second, 1900*time.Microsecond, 30)
	if got := f2.a.Limit(); got != 100 {
		t.Errorf("got limit %d with answers at 1.9 × the baseline, want 100 kept", got)
	}
}

func TestAdaptiveRecovers(t *testing.T) {
	f := newFake(AdaptiveConfig{Min: 8, Max: 512, Initial: 512})
	f.run(time.Second, time.Millisecond, 0)
	f.run(2*time.Second, 10*time.Millisecond, 0)
	if got := f.a.Limit(); got != 8 {
		t.Fatalf("got limit %d, want the min 8 after slow answers", got)
	}
	f.run(5*time.Second, time.Millisecond, 0)
	if got := f.a.Limit(); got != 512 {
		t.Errorf("got limit %d 5 s after answers were fast again, want 512", got)
	}
}

// TestAdaptiveBaselineAgesOut checks that a lasting rise in latency
// becomes the new baseline once the old minima have aged out, with no
// window that sheds everything to find it.
func TestAdaptiveBaselineAgesOut(t *testing.T) {
	f := newFake(AdaptiveConfig{Min: 8, Max: 512, Initial: 512, BaselineAge: 10 * time.Second})
	f.run(time.Second, time.Millisecond, 0)
	f.run(5*time.Second, 5*time.Millisecond, 0)
	if got := f.a.Limit(); got != 8 {
		t.Fatalf("got limit %d, want the min 8 while the old baseline holds", got)
	}
	f.run(10*time.Second, 5*time.Millisecond, 0)
	if got := f.a.Baseline(); got != 5*time.Millisecond {
		t.Errorf("got baseline %v 15 s on, want 5ms (the 1ms minima aged out)", got)
	}
	if got := f.a.Limit(); got != 512 {
		t.Errorf("got limit %d, want 512 once 5ms is the baseline", got)
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
