package limits

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// AdaptiveConfig configures an Adaptive limit. The zero value works.
type AdaptiveConfig struct {
	// Min is the lowest the limit goes. Zero means DefaultAdaptiveMin.
	Min int
	// Max is the highest the limit goes. Zero means DefaultAdaptiveMax.
	Max int
	// Initial is the limit at the start. Zero means Max/8, at least Min.
	Initial int
	// Tolerance is how many times the baseline a window's mean latency
	// may reach before the limit shrinks. Zero means
	// DefaultAdaptiveTolerance; below 1 means 1.
	Tolerance float64
	// Window is how long latencies are averaged before the limit moves.
	// Zero means DefaultAdaptiveWindow.
	Window time.Duration
	// MinSamples is how many answers a window needs before it moves the
	// limit; a window with fewer stays open (up to ten Windows, then it
	// is dropped). Zero means DefaultAdaptiveMinSamples.
	MinSamples int
	// BaselineAge is how long a window's mean latency can stay the
	// baseline: the baseline is the lowest window mean of the last
	// BaselineAge, kept in ten buckets, the oldest dropped as time moves
	// on. Zero means DefaultAdaptiveBaselineAge.
	BaselineAge time.Duration
}

// The defaults of AdaptiveConfig's fields.
const (
	DefaultAdaptiveMin         = 8
	DefaultAdaptiveMax         = 1024
	DefaultAdaptiveTolerance   = 2.0
	DefaultAdaptiveWindow      = 100 * time.Millisecond
	DefaultAdaptiveMinSamples  = 20
	DefaultAdaptiveBaselineAge = 30 * time.Second
)

// baseBuckets is how many buckets the baseline's window minima are kept in.
const baseBuckets = 10

// Adaptive is a concurrency limit that follows the latency it measures, a
// gradient limit in the manner of Netflix's concurrency-limits: answers
// are averaged over windows of about Window; a window whose mean is within
// Tolerance × the baseline grows the limit by its square root (when at
// least half of it was in use), one above it shrinks the limit by the
// ratio (Tolerance × baseline / mean, at most halving it). The baseline is
// the lowest window mean of the last BaselineAge: it follows a lasting
// change in latency once the old minima age out, and no window is ever
// spent shedding everything to measure it afresh (Envoy's minRTT probe).
// When futileShrinks windows in a row shrink it and the latency stays
// above four fifths of their highest, that latency becomes the baseline:
// it is not the places taken that make it.
//
// Acquire and Release are a few atomic operations and allocate nothing;
// the Release that closes a window takes a mutex with TryLock, so no
// caller ever waits on it. It knows no clock: Release is passed the time.
type Adaptive struct {
	inflight atomic.Int64
	limit    atomic.Int64
	_        [48]byte // keeps the counters Acquire writes off the window's line

	count atomic.Int64 // answers in the current window
	sum   atomic.Int64 // their latencies' sum, nanoseconds
	peak  atomic.Int64 // the most in flight an Acquire saw in the window
	start atomic.Int64 // unix nanoseconds the window opened; 0 = none yet

	mean atomic.Int64 // the last closed window's mean latency, nanoseconds
	base atomic.Int64 // the baseline after it, nanoseconds

	mu          sync.Mutex // taken (TryLock) by the Release closing a window
	mins        [baseBuckets]int64
	bucket      int   // mins' current bucket; guarded by mu
	bucketStart int64 // unix nanoseconds it opened; guarded by mu
	// shrinks counts the windows in a row that shrank the limit, and
	// before is the highest mean latency among them; guarded by mu.
	shrinks int
	before  int64

	min, max   int64
	tolerance  float64
	window     int64
	minSamples int64
	bucketSpan int64
}

// NewAdaptive returns a limit configured by c.
func NewAdaptive(c AdaptiveConfig) *Adaptive {
	if c.Min <= 0 {
		c.Min = DefaultAdaptiveMin
	}
	if c.Max <= 0 {
		c.Max = DefaultAdaptiveMax
	}
	c.Max = max(c.Max, c.Min)
	if c.Initial <= 0 {
		c.Initial = c.Max / 8
	}
	c.Initial = min(max(c.Initial, c.Min), c.Max)
	if c.Tolerance == 0 {
		c.Tolerance = DefaultAdaptiveTolerance
	}
	c.Tolerance = max(c.Tolerance, 1)
	if c.Window <= 0 {
		c.Window = DefaultAdaptiveWindow
	}
	if c.MinSamples <= 0 {
		c.MinSamples = DefaultAdaptiveMinSamples
	}
	if c.BaselineAge <= 0 {
		c.BaselineAge = DefaultAdaptiveBaselineAge
	}
	a := &Adaptive{
		min:        int64(c.Min),
		max:        int64(c.Max),
		tolerance:  c.Tolerance,
		window:     int64(c.Window),
		minSamples: int64(c.MinSamples),
		bucketSpan: max(int64(c.BaselineAge)/baseBuckets, 1),
	}
	a.limit.Store(int64(c.Initial))
	return a
}

// Acquire takes a place under the limit, reporting false (and taking
// none) when the limit is reached. Each true must be followed by one
// Release.
func (a *Adaptive) Acquire() bool {
	n := a.inflight.Add(1)
	if n > a.limit.Load() {
		a.inflight.Add(-1)
		return false
	}
	if n > a.peak.Load() {
		a.peak.Store(n) // a racing store may keep a lower peak: it is a hint
	}
	return true
}

// Release gives back a place Acquire took, the work under it having taken
// took, and now (unix nanoseconds) being the time it ended. It moves the
// limit when it closes a window.
func (a *Adaptive) Release(took time.Duration, now int64) {
	a.inflight.Add(-1)
	a.sum.Add(max(int64(took), 0))
	n := a.count.Add(1)
	st := a.start.Load()
	if st == 0 {
		a.start.CompareAndSwap(0, now)
		return
	}
	if now-st < a.window || n < a.minSamples && now-st < 10*a.window {
		return
	}
	if !a.mu.TryLock() {
		return
	}
	if a.start.Load() == st { // nobody closed it meanwhile
		a.close(now)
	}
	a.mu.Unlock()
}

// close ends the current window at now and moves the limit. Its caller
// holds mu.
func (a *Adaptive) close(now int64) {
	n := a.count.Swap(0)
	sum := a.sum.Swap(0)
	peak := a.peak.Swap(a.inflight.Load())
	a.start.Store(now)
	if n < a.minSamples {
		return // a quiet window (ten Windows long): no sign either way
	}
	mean := max(sum/n, 1)
	base := a.baseline(mean, now)
	a.base.Store(base)
	limit := a.limit.Load()
	next := limit
	switch bound := a.tolerance * float64(base); {
	case float64(mean) > bound && a.shrinks >= futileShrinks && 5*mean > 4*a.before:
		// The limit fell futileShrinks windows in a row and the latency
		// stayed above four fifths of the highest among them: it is not the reserves in flight that
		// make it (a process short of CPU answers everything late). This
		// latency is the best there is for now: it becomes the baseline,
		// and the limit holds instead of falling to its min while the
		// answers stay as slow.
		a.mins = [baseBuckets]int64{}
		a.mins[a.bucket] = mean
		a.base.Store(mean)
		a.shrinks = 0
	case float64(mean) > bound:
		if a.shrinks == 0 {
			a.before = 0
		}
		a.before = max(a.before, mean)
		a.shrinks++
		g := max(bound/float64(mean), 0.5)
		next = min(int64(float64(limit)*g), limit-1)
	default:
		a.shrinks = 0
		if 2*peak >= limit {
			next = limit + max(int64(math.Sqrt(float64(limit))), 1)
		}
	}
	a.mean.Store(mean)
	a.limit.Store(min(max(next, a.min), a.max))
}

// futileShrinks is how many windows in a row may shrink the limit without
// the latency falling before the latency is taken as the baseline.
const futileShrinks = 3

// baseline records a window's mean at now and returns the lowest of the
// last BaselineAge. Its caller holds mu.
func (a *Adaptive) baseline(mean, now int64) int64 {
	if a.bucketStart == 0 {
		a.bucketStart = now
	}
	// Move on to now's bucket, emptying those passed over (at most all).
	for i := 0; now-a.bucketStart >= a.bucketSpan && i < baseBuckets; i++ {
		a.bucket = (a.bucket + 1) % baseBuckets
		a.mins[a.bucket] = 0
		a.bucketStart += a.bucketSpan
	}
	if now-a.bucketStart >= a.bucketSpan {
		a.bucketStart = now // a long quiet spell: start again from now
	}
	if m := a.mins[a.bucket]; m == 0 || mean < m {
		a.mins[a.bucket] = mean
	}
	base := int64(math.MaxInt64)
	for _, m := range a.mins {
		if m != 0 {
			base = min(base, m)
		}
	}
	return base
}

// Limit is the current limit.
func (a *Adaptive) Limit() int64 { return a.limit.Load() }

// Inflight is how many places are taken.
func (a *Adaptive) Inflight() int64 { return a.inflight.Load() }

// Latency is the last closed window's mean latency (zero before one).
func (a *Adaptive) Latency() time.Duration { return time.Duration(a.mean.Load()) }

// Baseline is the baseline latency after the last closed window (zero
// before one).
func (a *Adaptive) Baseline() time.Duration { return time.Duration(a.base.Load()) }
