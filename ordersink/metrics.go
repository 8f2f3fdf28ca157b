package ordersink

import (
	"errors"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/promreg"
)

// metrics are the sink's Prometheus collectors; a nil *metrics records
// nothing.
type metrics struct {
	orders      prometheus.Counter
	batches     *prometheus.CounterVec
	lag         prometheus.Histogram
	backlog     prometheus.Gauge
	deadLetters *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, log *slog.Logger) *metrics {
	if reg == nil {
		return nil
	}
	m := &metrics{
		orders: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "flashgate_sink_orders_total",
			Help: "Order rows the sink inserted into the database.",
		}),
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flashgate_sink_batches_total",
			Help: "Batches the sink tried to store, by result (ok, error, replicas_behind).",
		}, []string{"result"}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "flashgate_sink_lag_seconds",
			Help:    "Time from an order's reservation to its commit in the database.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}),
		backlog: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "flashgate_sink_backlog",
			Help: "Order entries delivered to this sink and not yet committed (its pending entries over all sale streams); the sum over the sinks counts each once. The streams' whole backlog, per sale: flashgate_stream_backlog.",
		}),
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flashgate_sink_dead_letters_total",
			Help: "Order entries the sink moved to a sale's dead-letter stream (malformed, or refused by the database), by sale.",
		}, []string{"sale"}),
	}
	var errs [5]error
	m.orders, errs[0] = promreg.Register(reg, m.orders)
	m.batches, errs[1] = promreg.Register(reg, m.batches)
	m.lag, errs[2] = promreg.Register(reg, m.lag)
	m.backlog, errs[3] = promreg.Register(reg, m.backlog)
	m.deadLetters, errs[4] = promreg.Register(reg, m.deadLetters)
	if err := errors.Join(errs[:]...); err != nil {
		// The sink drains on: it counts into its own collectors, which
		// nobody scrapes.
		log.Error("ordersink: registering metrics", "err", err)
	}
	return m
}

func (m *metrics) batch(result string) {
	if m != nil {
		m.batches.WithLabelValues(result).Inc()
	}
}

func (m *metrics) stored(inserted int, orders []flashgate.Order, now time.Time) {
	if m == nil {
		return
	}
	m.orders.Add(float64(inserted))
	for _, o := range orders {
		m.lag.Observe(max(0, now.Sub(o.CreatedAt).Seconds()))
	}
}

func (m *metrics) dead(sale string, n int) {
	if m != nil {
		m.deadLetters.WithLabelValues(sale).Add(float64(n))
	}
}

func (m *metrics) setBacklog(n int64) {
	if m != nil {
		m.backlog.Set(float64(n))
	}
}
