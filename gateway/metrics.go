package gateway

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/flashgate/flashgate/gateway/limits"
	"github.com/flashgate/flashgate/internal/promreg"
)

// Routes, as the metrics label them.
const (
	routePage = iota
	routeAPISale
	routePurchase
	routeOrder
	routePay
	routeCancel
	routeHealthz
	routeReadyz
	routeStatic
	routeQueue
	routeChallenge
	routeWebhook
	routeEntry
	routeOther
	numRoutes
)

var routeNames = [numRoutes]string{
	"page", "api_sale", "purchase", "order", "pay", "cancel", "healthz", "readyz", "static", "queue", "challenge", "webhook", "entry", "other",
}

// The status codes the gateway answers with; anything else counts as
// "other".
var codes = [...]int{200, 201, 304, 400, 401, 404, 405, 409, 413, 429, 500, 503}

func codeIndex(status int) int {
	for i, c := range codes {
		if c == status {
			return i
		}
	}
	return len(codes)
}

// latencyBounds are flashgate_http_request_seconds' bucket bounds.
var latencyBounds = [...]float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}

// latencyNanos are latencyBounds in nanoseconds.
var latencyNanos = func() (n [len(latencyBounds)]int64) {
	for i, b := range latencyBounds {
		n[i] = int64(math.Round(b * 1e9))
	}
	return n
}()

// Admission decisions, as flashgate_admission_total labels them.
const (
	decAdmitted = iota
	decNotFound
	decNotStarted
	decClosed
	decSoldOut
	decRateLimited
	decUnavailable
	decNotAdmitted
	decShed
	numDecisions
)

var decisionNames = [numDecisions]string{
	"admitted", "not_found", "not_started", "closed", "sold_out", "rate_limited", "unavailable", "not_admitted", "shed",
}

// metrics counts the gateway's requests, latencies and admission
// decisions. A nil *metrics counts nothing.
type metrics struct {
	c        *httpCollector
	fallback prometheus.Counter
}

// metricShards is how many copies of the hot path's counters there are;
// a request counts in its connection's copy, and a scrape adds them up.
// A request costs three atomic additions (Prometheus' counter and
// histogram took five, one of them a compare-and-swap loop on the float
// sum), and requests on different connections seldom write the same
// cache line at the same moment. (A connection is not tied to a core, so
// the lines still move between cores.)
const metricShards = 16

// metricShard is one copy of the counters, on cache lines of its own.
type metricShard struct {
	requests  [numRoutes][len(codes) + 1]atomic.Uint64 // by codeIndex, last = other
	latency   [numRoutes][len(latencyBounds) + 1]atomic.Uint64
	nanos     [numRoutes]atomic.Uint64 // the latencies' sum
	decisions [numDecisions]atomic.Uint64
	_         [64]byte
}

// httpCollector is flashgate_http_requests_total,
// flashgate_http_request_seconds and flashgate_admission_total, counted in
// shards and added up when scraped.
type httpCollector struct {
	requests, latency, decisions *prometheus.Desc
	shards                       [metricShards]metricShard
}

func newHTTPCollector() *httpCollector {
	return &httpCollector{
		requests: prometheus.NewDesc("flashgate_http_requests_total",
			"HTTP requests the gateway answered, by route and status code.", []string{"route", "code"}, nil),
		latency: prometheus.NewDesc("flashgate_http_request_seconds",
			"Time the gateway spent answering a request, by route.", []string{"route"}, nil),
		decisions: prometheus.NewDesc("flashgate_admission_total",
			"Purchase attempts judged by the gateway's admission filter, by decision.", []string{"decision"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *httpCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.requests
	ch <- c.latency
	ch <- c.decisions
}

// Collect implements prometheus.Collector: every series, zero or not.
func (c *httpCollector) Collect(ch chan<- prometheus.Metric) {
	var codeNames [len(codes) + 1]string
	for i, code := range codes {
		codeNames[i] = strconv.Itoa(code)
	}
	codeNames[len(codes)] = "other"
	for r := range numRoutes {
		for i := range codeNames {
			var n uint64
			for k := range c.shards {
				n += c.shards[k].requests[r][i].Load()
			}
			ch <- prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(n), routeNames[r], codeNames[i])
		}
		var counts [len(latencyBounds) + 1]uint64
		var nanos uint64
		for k := range c.shards {
			sh := &c.shards[k]
			for i := range counts {
				counts[i] += sh.latency[r][i].Load()
			}
			nanos += sh.nanos[r].Load()
		}
		buckets := make(map[float64]uint64, len(latencyBounds))
		var total uint64
		for i, b := range latencyBounds {
			total += counts[i]
			buckets[b] = total
		}
		total += counts[len(latencyBounds)]
		ch <- prometheus.MustNewConstHistogram(c.latency, total, float64(nanos)/1e9, buckets, routeNames[r])
	}
	for d := range numDecisions {
		var n uint64
		for k := range c.shards {
			n += c.shards[k].decisions[d].Load()
		}
		ch <- prometheus.MustNewConstMetric(c.decisions, prometheus.CounterValue, float64(n), decisionNames[d])
	}
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	if reg == nil {
		return nil, nil
	}
	fb := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "flashgate_gateway_replica_fallback_total",
		Help: "Sale state reads that went to the primary because the replica failed.",
	})
	c, err1 := promreg.Register(reg, newHTTPCollector())
	fb, err2 := promreg.Register(reg, fb)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("gateway: registering metrics: %w", err)
	}
	return &metrics{c: c, fallback: fb}, nil
}

// shard returns the counters of the request's connection.
func (m *metrics) shard(ctx *fasthttp.RequestCtx) *metricShard {
	return &m.c.shards[ctx.ConnID()%metricShards]
}

// request counts an answer and how long it took.
func (m *metrics) request(ctx *fasthttp.RequestCtx, route, status int, took time.Duration) {
	if m == nil {
		return
	}
	sh := m.shard(ctx)
	sh.requests[route][codeIndex(status)].Add(1)
	ns := max(int64(took), 0)
	i := 0
	for i < len(latencyNanos) && ns > latencyNanos[i] {
		i++
	}
	sh.latency[route][i].Add(1)
	sh.nanos[route].Add(uint64(ns))
}

// decision counts an admission decision.
func (m *metrics) decision(ctx *fasthttp.RequestCtx, d int) {
	if m == nil {
		return
	}
	m.shard(ctx).decisions[d].Add(1)
}

// registerReserveGauges registers the adaptive reserve limit's gauges
// with reg: nothing without a registry or a limit.
func registerReserveGauges(reg prometheus.Registerer, a *limits.Adaptive) error {
	if reg == nil || a == nil {
		return nil
	}
	gauges := []prometheus.GaugeFunc{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "flashgate_reserve_limit",
			Help: "The adaptive limit on reserves this gateway has in flight at once; purchases over it are answered 503 (admission decision \"shed\").",
		}, func() float64 { return float64(a.Limit()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "flashgate_reserve_inflight",
			Help: "Reserves this gateway has in flight under the adaptive limit.",
		}, func() float64 { return float64(a.Inflight()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "flashgate_reserve_latency_seconds",
			Help: "Mean latency of reserves in the adaptive limit's last window (about 100 ms).",
		}, func() float64 { return a.Latency().Seconds() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "flashgate_reserve_baseline_seconds",
			Help: "The adaptive limit's baseline: the lowest window mean latency of reserves in the last 30 s.",
		}, func() float64 { return a.Baseline().Seconds() }),
	}
	for _, g := range gauges {
		if _, err := promreg.Register(reg, prometheus.Collector(g)); err != nil {
			return fmt.Errorf("gateway: registering metrics: %w", err)
		}
	}
	return nil
}

func (m *metrics) replicaFallback() {
	if m == nil {
		return
	}
	m.fallback.Inc()
}
