package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSpliceDraw: a run of the draw phase alone puts its section into the
// report there, before the Go benchmarks, and replaces it the next time,
// leaving every other section as it was.
func TestSpliceDraw(t *testing.T) {
	out := filepath.Join(t.TempDir(), "BENCHMARKS.md")
	doc := "# Benchmarks\n\n## Drop: a fair queue\n\ndrop figures\n\n## Go benchmarks\n\ngo figures\n\n## Commands\n\ncommands\n"
	if err := os.WriteFile(out, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	b := &bench{cfg: settings{Phases: "draw", Out: out}, rep: &report{}}
	for run, entries := range []int{1000, 2000} {
		b.rep.draw = &drawResult{Entries: entries, Units: 30, ReleaseWindow: time.Minute, ReleaseRate: 25}
		if err := b.writeReport(); err != nil {
			t.Fatal(err)
		}
		raw, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		got := string(raw)
		if n := strings.Count(got, drawHeading); n != 1 {
			t.Errorf("run %d: got %d draw sections, want 1", run, n)
		}
		for _, want := range []string{"drop figures", "go figures", "commands", "DRAW_ENTRIES=" + strconv.Itoa(entries)} {
			if !strings.Contains(got, want) {
				t.Errorf("run %d: got a report without %q:\n%s", run, want, got)
			}
		}
		if i, j := strings.Index(got, drawHeading), strings.Index(got, "## Go benchmarks"); i < 0 || i > j {
			t.Errorf("run %d: got the draw section at %d, the Go benchmarks at %d; want it before them", run, i, j)
		}
	}
}

// TestSpliceOverload: a run of the overload phase alone replaces its own
// section, and leaves the draw's where it was.
func TestSpliceOverload(t *testing.T) {
	out := filepath.Join(t.TempDir(), "BENCHMARKS.md")
	doc := "# Benchmarks\n\n## Draw: a draw\n\ndraw figures\n\n## Go benchmarks\n\ngo figures\n\n## Commands\n\ncommands\n"
	if err := os.WriteFile(out, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	b := &bench{cfg: settings{Phases: "overload", Out: out}, rep: &report{}}
	for run, secs := range []int{3, 7} {
		capacity := crowdRun{Requests: 100, Elapsed: time.Second, Answers: map[string]int{"201": 100}}
		b.rep.overload = &overloadResult{Seconds: secs, Conc: 512, Timeout: "30s", Capacity: capacity,
			Levels: []overloadLevel{{K: 2, Rate: 200, Gate: capacity, Bare: capacity}}}
		if err := b.writeReport(); err != nil {
			t.Fatal(err)
		}
		raw, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		got := string(raw)
		if n := strings.Count(got, overloadHeading); n != 1 {
			t.Errorf("run %d: got %d overload sections, want 1", run, n)
		}
		for _, want := range []string{"draw figures", "go figures", "commands", "OVERLOAD_SECONDS=" + strconv.Itoa(secs), "| 2× (200/s) | 100/s (100%), –, –; 201: 100 |"} {
			if !strings.Contains(got, want) {
				t.Errorf("run %d: got a report without %q:\n%s", run, want, got)
			}
		}
		if i, j := strings.Index(got, overloadHeading), strings.Index(got, "## Go benchmarks"); i < 0 || i > j {
			t.Errorf("run %d: got the overload section at %d, the Go benchmarks at %d; want it before them", run, i, j)
		}
	}
}
