package gateway

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

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
	routeOther
	numRoutes
)

var routeNames = [numRoutes]string{
	"page", "api_sale", "purchase", "order", "pay", "cancel", "healthz", "readyz", "static", "other",
}

// The status codes the gateway answers with; anything else counts as
// "other".
var codes = []int{200, 201, 304, 400, 401, 404, 405, 409, 413, 429, 500, 503}

func codeIndex(status int) int {
	for i, c := range codes {
		if c == status {
			return i
		}
	}
	return len(codes)
}

// Admission decisions, as flashgate_admission_total labels them.
const (
	decAdmitted = iota
	decNotFound
	decNotStarted
	decClosed
	decSoldOut
	decRateLimited
	decUnavailable
	numDecisions
)

var decisionNames = [numDecisions]string{
	"admitted", "not_found", "not_started", "closed", "sold_out", "rate_limited", "unavailable",
}

// metrics holds every counter pre-resolved, so the hot path neither looks
// up labels nor allocates. A nil *metrics counts nothing.
type metrics struct {
	requests  [numRoutes][]prometheus.Counter // by codeIndex, last = other
	latency   [numRoutes]prometheus.Observer
	decisions [numDecisions]prometheus.Counter
	fallback  prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	if reg == nil {
		return nil, nil
	}
	req := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flashgate_http_requests_total",
		Help: "HTTP requests the gateway answered, by route and status code.",
	}, []string{"route", "code"})
	lat := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "flashgate_http_request_seconds",
		Help:    "Time the gateway spent answering a request, by route.",
		Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
	}, []string{"route"})
	dec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flashgate_admission_total",
		Help: "Purchase attempts judged by the gateway's admission filter, by decision.",
	}, []string{"decision"})
	fb := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "flashgate_gateway_replica_fallback_total",
		Help: "Sale state reads that went to the primary because the replica failed.",
	})
	var errs [4]error
	req, errs[0] = promreg.Register(reg, req)
	lat, errs[1] = promreg.Register(reg, lat)
	dec, errs[2] = promreg.Register(reg, dec)
	fb, errs[3] = promreg.Register(reg, fb)
	if err := errors.Join(errs[:]...); err != nil {
		return nil, fmt.Errorf("gateway: registering metrics: %w", err)
	}
	m := &metrics{fallback: fb}
	for r := range numRoutes {
		m.requests[r] = make([]prometheus.Counter, len(codes)+1)
		for i, c := range codes {
			m.requests[r][i] = req.WithLabelValues(routeNames[r], strconv.Itoa(c))
		}
		m.requests[r][len(codes)] = req.WithLabelValues(routeNames[r], "other")
		m.latency[r] = lat.WithLabelValues(routeNames[r])
	}
	for d := range numDecisions {
		m.decisions[d] = dec.WithLabelValues(decisionNames[d])
	}
	return m, nil
}

func (m *metrics) request(route, status int, seconds float64) {
	if m == nil {
		return
	}
	m.requests[route][codeIndex(status)].Inc()
	m.latency[route].Observe(seconds)
}

func (m *metrics) decision(d int) {
	if m == nil {
		return
	}
	m.decisions[d].Inc()
}

func (m *metrics) replicaFallback() {
	if m == nil {
		return
	}
	m.fallback.Inc()
}
