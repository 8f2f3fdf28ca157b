package gateway

import (
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

func TestMetrics(t *testing.T) {
	e := newEnv(t, nil)
	e.sale(t, "s1", 3, 4, false)
	do(e.s.Handler(), req{method: "POST", path: "/api/sales/s1/orders", token: token(t, "u1")})
	do(e.s.Handler(), req{method: "GET", path: "/sales/s1"})
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			lbl := ""
			for _, l := range m.GetLabel() {
				lbl += l.GetName() + "=" + l.GetValue() + ","
			}
			if m.GetCounter().GetValue() > 0 || m.GetHistogram().GetSampleCount() > 0 {
				found[mf.GetName()+"{"+lbl+"}"] = true
			}
		}
	}
	for _, want := range []string{
		"flashgate_http_requests_total{code=409,route=purchase,}",
		"flashgate_http_requests_total{code=200,route=page,}",
		"flashgate_admission_total{decision=not_started,}",
		"flashgate_http_request_seconds{route=page,}",
	} {
		if !found[want] {
			t.Errorf("got no %s among %v", want, found)
		}
	}
}

// TestMetricsAddShards checks that the sharded counters add up at a
// scrape: requests over many connections (each its own RequestCtx, so
// spread over the shards) count once each, the latency histogram's buckets
// are cumulative with the right bound, and a second gateway on the same
// registry counts into the same series.
func TestMetricsAddShards(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.UserRate = -1 })
	e.sale(t, "s1", 3, 4, false)
	h := e.s.Handler()
	for i := 0; i < 2*metricShards+3; i++ {
		do(h, req{method: "POST", path: "/api/sales/s1/orders", token: token(t, "u1")})
	}
	m2, err := newMetrics(e.reg)
	if err != nil {
		t.Fatalf("a second gateway's metrics: %v", err)
	}
	if m2.c != e.s.m.c {
		t.Fatal("a second gateway's metrics got a collector of their own, want the first one's")
	}
	var ctx fasthttp.RequestCtx
	m2.request(&ctx, routePurchase, 409, 300*time.Microsecond) // in (0.00025, 0.0005]
	m2.request(&ctx, routePurchase, 409, 2*time.Second)        // +Inf only
	m2.decision(&ctx, decNotStarted)
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	const n = 2*metricShards + 3 + 2
	var sawReq, sawDec, sawLat bool
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			switch mf.GetName() {
			case "flashgate_http_requests_total":
				if labels["route"] == "purchase" && labels["code"] == "409" {
					sawReq = true
					if got := m.GetCounter().GetValue(); got != n {
						t.Errorf("purchase 409s: got %v, want %d", got, n)
					}
				}
			case "flashgate_admission_total":
				if labels["decision"] == "not_started" {
					sawDec = true
					if got := m.GetCounter().GetValue(); got != n-1 {
						t.Errorf("not_started decisions: got %v, want %d", got, n-1)
					}
				}
			case "flashgate_http_request_seconds":
				if labels["route"] != "purchase" {
					continue
				}
				sawLat = true
				hist := m.GetHistogram()
				if got := hist.GetSampleCount(); got != n {
					t.Errorf("purchase latencies: got %d, want %d", got, n)
				}
				if got := hist.GetSampleSum(); got < 2.0003 {
					t.Errorf("purchase latency sum: got %v, want at least 2.0003", got)
				}
				for _, b := range hist.GetBucket() {
					if b.GetUpperBound() == 0.00025 && b.GetCumulativeCount() > n-2 ||
						b.GetUpperBound() == 0.0005 && b.GetCumulativeCount() < 1 ||
						b.GetUpperBound() == 1 && b.GetCumulativeCount() != n-1 {
						t.Errorf("bucket le=%v: got %d of %d", b.GetUpperBound(), b.GetCumulativeCount(), n)
					}
				}
			}
		}
	}
	if !sawReq || !sawDec || !sawLat {
		t.Fatalf("got requests %v, decisions %v, latencies %v among the series, want all", sawReq, sawDec, sawLat)
	}
}
