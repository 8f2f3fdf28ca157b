package main

import (
	"fmt"
	"io"
	"sort"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"
)

// The crowd's report: the progress bar while it runs, the figures after.

// startBar draws a progress bar of n requests on w until stop is called
// (nothing when w is nil).
func startBar(w io.Writer, n int, done *atomic.Int64) (stop func()) {
	if w == nil {
		return func() {}
	}
	bar := progressbar.NewOptions(n,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription("buyers"),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString("req"),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionSetWidth(30),
	)
	// The bar's clock starts now, not at its first frame: a rate shown on
	// the first frame is then taken over the time that really passed.
	bar.StartWithoutRender()
	quit := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-quit:
				_ = bar.Set(int(done.Load()))
				_ = bar.Finish()
				fmt.Fprintln(w)
				return
			case <-t.C:
				_ = bar.Set(int(done.Load()))
			}
		}
	}()
	return func() { close(quit); <-finished }
}

// percentile returns the p-th percentile (0 < p < 1) of sorted latencies.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)) * p)
	if i >= len(sorted) {
		i = len(sorted) - 1
	}
	return sorted[i]
}

// printCrowd writes the answers, throughput and latency of r.
func printCrowd(w io.Writer, r *crowdResult) {
	keys := make([]string, 0, len(r.ByAnswer))
	for k := range r.ByAnswer {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Fprintf(w, "requests      %d in %s\n", r.Requests, r.Elapsed.Round(time.Millisecond))
	for _, k := range keys {
		fmt.Fprintf(w, "  %-22s %d\n", k, r.ByAnswer[k])
	}
	if r.FirstErr != nil {
		fmt.Fprintf(w, "  first transport error: %v\n", r.FirstErr)
	}
	for _, v := range r.Variants {
		fmt.Fprintf(w, "  variant %-14s wanted by %d, 201s %d\n", v, r.Wanted[v], r.ByVariant[v])
	}
	if r.Elapsed > 0 {
		fmt.Fprintf(w, "throughput    %.0f requests/s\n", float64(r.Requests)/r.Elapsed.Seconds())
	}
	l := r.Latencies
	if len(l) > 0 {
		fmt.Fprintf(w, "latency       p50 %s  p99 %s  p999 %s  max %s\n",
			roundDur(percentile(l, 0.50)), roundDur(percentile(l, 0.99)),
			roundDur(percentile(l, 0.999)), roundDur(l[len(l)-1]))
	}
	if c := r.CreatedLat; len(c) > 0 && len(c) < len(l) {
		fmt.Fprintf(w, "  of the 201s p50 %s  p99 %s  p999 %s  max %s\n",
			roundDur(percentile(c, 0.50)), roundDur(percentile(c, 0.99)),
			roundDur(percentile(c, 0.999)), roundDur(c[len(c)-1]))
	}
}

func roundDur(d time.Duration) time.Duration {
	switch {
	case d > 100*time.Millisecond:
		return d.Round(time.Millisecond)
	case d > 100*time.Microsecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}
