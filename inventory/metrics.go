package inventory

import (
	"errors"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flashgate/flashgate/internal/promreg"
)

// The outcomes of flashgate_reserve_total.
const (
	outOK = iota
	outNotFound
	outNotStarted
	outClosed
	outSoldOut
	outPurchased
	outBadRequest
	outError
	outPaused
	outPending // a spill of the user's is in flight (bucketed sales)
	outNotAdmitted
	outBadVariant // a variant the sale does not sell, or a malformed one (lua.ReserveBadVariant)
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"ok", "not_found", "not_started", "closed", "sold_out", "already_purchased", "bad_request", "error", "paused", "pending", "not_admitted", "bad_variant"}

// The ops of flashgate_redis_call_seconds.
const (
	opReserve = iota
	opWait
	opRelease
	opPing
	numOps
)

var opNames = [numOps]string{"reserve", "reserve_wait", "release", "ping"}

// metrics holds the children of each vector resolved once, so that counting
// on the hot path neither allocates nor hashes label values. A nil *metrics
// counts nothing.
type metrics struct {
	outcomes [numOutcomes]prometheus.Counter
	calls    [numOps]prometheus.Observer
	batch    prometheus.Observer // reserves covered by one WAIT
}

func newMetrics(reg prometheus.Registerer, log *slog.Logger) *metrics {
	reserves := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flashgate_reserve_total",
		Help: "Reserve calls by outcome: ok, sold_out, already_purchased, not_found, not_started, closed, paused, not_admitted, pending, bad_request, bad_variant (a variant the sale does not sell, or a malformed one) or error.",
	}, []string{"outcome"})
	calls := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "flashgate_redis_call_seconds",
		Help:    "Duration of the inventory tier's Redis calls, by operation.",
		Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
	}, []string{"op"})
	batch := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "flashgate_reserve_wait_batch",
		Help:    "Reserves covered by one WAIT for replicas (group commit).",
		Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128},
	})
	var errs [3]error
	reserves, errs[0] = promreg.Register(reg, reserves)
	calls, errs[1] = promreg.Register(reg, calls)
	batch, errs[2] = promreg.Register(reg, batch)
	if err := errors.Join(errs[:]...); err != nil {
		// The tier reserves on: it counts into its own collectors, which
		// nobody scrapes.
		log.Error("inventory: registering metrics", "err", err)
	}
	m := &metrics{batch: batch}
	for i, name := range outcomeNames {
		m.outcomes[i] = reserves.WithLabelValues(name)
	}
	for i, name := range opNames {
		m.calls[i] = calls.WithLabelValues(name)
	}
	return m
}

func (m *metrics) outcome(o int) {
	if m != nil {
		m.outcomes[o].Inc()
	}
}

func (m *metrics) call(op int, start time.Time) {
	if m != nil {
		m.calls[op].Observe(time.Since(start).Seconds())
	}
}

// waitBatch counts the reserves of a script answer (code, order id pairs)
// that one WAIT covered.
func (m *metrics) waitBatch(res any) {
	if m != nil {
		vals, _ := res.([]any)
		m.batch.Observe(float64(len(vals) / 2))
	}
}
