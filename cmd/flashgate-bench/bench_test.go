package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

const wrkOut = `Running 3s test @ http://127.0.0.1:40000/api/sales/c64/orders
  2 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     8.01ms   10.2ms  120.00ms   90.00%
    Req/Sec     4.10k   500.00     5.00k    70.00%
  Latency Distribution
     50%    6.95ms
     75%    9.00ms
     90%   14.00ms
     99%   66.80ms
  24500 requests in 3.00s, 5.50MB read
  Socket errors: connect 0, read 0, write 0, timeout 12
  Non-2xx or 3xx responses: 7
Requests/sec:   8166.52
Transfer/sec:      1.83MB
`

func TestParseWrk(t *testing.T) {
	w, err := parseWrk(wrkOut)
	if err != nil {
		t.Fatal(err)
	}
	want := wrkRun{Rate: 8166.52, Requests: 24500, P50: 6950 * time.Microsecond, P99: 66800 * time.Microsecond,
		Non2xx: 7, SockErrs: "connect 0, read 0, write 0, timeout 12"}
	if w != want {
		t.Errorf("got %+v, want %+v", w, want)
	}
	if _, err := parseWrk("unable to connect to 127.0.0.1:1 Connection refused"); err == nil {
		t.Error("got no error for wrk output without a rate")
	}
}

const crowdOut = `requests      100000 in 3.18s
  201                    100
  409 sold_out           99900
  first transport error: dial tcp: refused
throughput    31448 requests/s
latency       p50 7.29ms  p99 21.54ms  p999 88.1ms  max 144ms
  of the 201s p50 1.2ms  p99 3.4ms  p999 5.6ms  max 7.8ms
cross-check   201s 100, units booked +100, DB rows +100, admitted +150
cross-check   ok
`

func TestParseCrowd(t *testing.T) {
	c, err := parseCrowd(crowdOut)
	if err != nil {
		t.Fatal(err)
	}
	if c.Requests != 100000 || c.Elapsed != 3180*time.Millisecond || c.Rate != 31448 {
		t.Errorf("got %d requests in %v at %v/s, want 100000 in 3.18s at 31448/s", c.Requests, c.Elapsed, c.Rate)
	}
	if got, want := c.answers(), "409 sold_out: 99900, 201: 100"; got != want {
		t.Errorf("got answers %q, want %q", got, want)
	}
	if c.P50 != 7290*time.Microsecond || c.P99 != 21540*time.Microsecond || c.P999 != 88100*time.Microsecond || c.Mx != 144*time.Millisecond {
		t.Errorf("got latencies %v %v %v %v", c.P50, c.P99, c.P999, c.Mx)
	}
	if c.Check != "ok" {
		t.Errorf("got cross-check %q, want ok", c.Check)
	}
	if got, want := c.createdP99(), 3400*time.Microsecond; got != want {
		t.Errorf("got the 201s' p99 %v, want %v", got, want)
	}
	all := crowdRun{Requests: 10, Answers: map[string]int{"201": 10}, P99: time.Second}
	if got, want := all.createdP99(), time.Second; got != want {
		t.Errorf("every answer a 201: got the 201s' p99 %v, want %v (the p99 of all)", got, want)
	}
}

func TestDescribeSlow(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"hget", "k", "f"}, "HGET with 2 arguments"},
		{[]string{"ping"}, "PING"},
		{append(append([]string{"evalsha"}, make([]string, 30)...), "... (5986 more arguments)"), "EVALSHA with 6016 arguments"},
	}
	for _, tt := range tests {
		if got := describeSlow(tt.args); got != tt.want {
			t.Errorf("describeSlow(%d args): got %q, want %q", len(tt.args), got, tt.want)
		}
	}
}

func TestStatOf(t *testing.T) {
	tests := []struct {
		in   []float64
		want stat
	}{
		{nil, stat{}},
		{[]float64{3, 1, 2}, stat{2, 1, 3}},
		{[]float64{4, 1, 2, 3}, stat{2.5, 1, 4}},
	}
	for _, tt := range tests {
		if got := statOf(tt.in); got != tt.want {
			t.Errorf("statOf(%v): got %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestNum(t *testing.T) {
	for in, want := range map[float64]string{0: "0", 999: "999", 1000: "1,000", 1234567.4: "1,234,567", -2500: "-2,500"} {
		if got := num(in); got != want {
			t.Errorf("num(%v): got %q, want %q", in, got, want)
		}
	}
}

func TestBenchPackages(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{
		"a/x_test.go":       "package a\n\nfunc BenchmarkX(b *testing.B) {}\n",
		"a/y_test.go":       "package a\n\nfunc BenchmarkY(b *testing.B) {}\n",
		"b/y_test.go":       "package b\n\nfunc TestY(t *testing.T) {}\n",
		"c/d/z_test.go":     "package d\n\nfunc BenchmarkZ(b *testing.B) {}\n",
		".hidden/z_test.go": "package z\n\nfunc BenchmarkZ(b *testing.B) {}\n",
		"e/bench.go":        "package e\n\nfunc BenchmarkNotATest() {}\n",
	}
	for name, src := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := benchPackages(root)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"./a", "./c/d"}; !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}
