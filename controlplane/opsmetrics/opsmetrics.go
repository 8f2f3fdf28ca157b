// Package opsmetrics holds the control plane's Prometheus collectors: its
// counters (re-syncs, expiries, refunds, failed re-syncs), who leads, and
// the deployment's figures and settlements, which only the leading control
// plane exports (figures.go).
package opsmetrics

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/internal/salehash"
	"github.com/flashgate/flashgate/internal/promreg"
)

// Source is what the collectors read at scrape time; the control plane's
// Service provides it.
type Source interface {
	// Leading reports whether this control plane holds the leader lease.
	Leading() bool
	// LiveSales lists the sales not archived.
	LiveSales(ctx context.Context) ([]flashgate.Sale, error)
	// AllFigures sums the order rows by status over all sales.
	AllFigures(ctx context.Context) (flashgate.SaleFigures, error)
	// RedisFigures reads the sales' Redis figures in one round trip, folded
	// over a bucketed sale's buckets; a nil entry is a sale whose figures
	// could not be read.
	RedisFigures(ctx context.Context, sales []flashgate.Sale) ([]*salehash.Figures, error)
	// VariantBooked reads the booked units of each of a sale's variants,
	// in the sale's order, in one round trip.
	VariantBooked(ctx context.Context, sale flashgate.Sale) ([]int64, error)
	// PausedSince is, for each live sale paused now, since when (the
	// failover watch's notes).
	PausedSince() map[string]time.Time
	// Settlement is a closed sale's settlement difference (booked − live
	// units − backlog) and whether it has settled (its stream drained).
	Settlement(ctx context.Context, id string) (difference int64, settled bool, err error)
	// DrawSteps is a draw sale's figures by step (flashgate_draw).
	DrawSteps(ctx context.Context, sale flashgate.Sale) (map[string]int64, error)
}

// Metrics are the control plane's counters. A nil *Metrics counts nothing.
type Metrics struct {
	// Resyncs counts re-syncs of a sale's stock from the database.
	Resyncs prometheus.Counter
	// Expired counts orders expired unpaid.
	Expired prometheus.Counter
	// Refunds counts orders refunded.
	Refunds prometheus.Counter
	// ResyncErrors counts re-syncs failed for a reason other than a bad
	// request (ResyncFailed).
	ResyncErrors prometheus.Counter
}

// New registers the control plane's collectors on reg. The collectors that
// read src are never shared: a second control plane in one registry is an
// error.
func New(src Source, reg prometheus.Registerer, log *slog.Logger) (*Metrics, error) {
	m := &Metrics{
		Resyncs: prometheus.NewCounter(prometheus.CounterOpts{Name: "flashgate_resync_total", Help: "Re-syncs of a sale's stock from the database."}),
		Expired: prometheus.NewCounter(prometheus.CounterOpts{Name: "flashgate_expired_total", Help: "Orders expired unpaid."}),
		Refunds: prometheus.NewCounter(prometheus.CounterOpts{Name: "flashgate_refunds_total", Help: "Orders refunded."}),
		ResyncErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "flashgate_resync_errors_total",
			Help: "Re-syncs of a sale's stock that failed for a reason other than a bad request (Redis or the database).",
		}),
	}
	var err error
	for _, c := range []*prometheus.Counter{&m.Resyncs, &m.Expired, &m.Refunds, &m.ResyncErrors} {
		if *c, err = promreg.Register(reg, *c); err != nil {
			return nil, err
		}
	}
	leader := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "flashgate_controlplane_leader",
		Help: "1 while this control plane holds the leader lease and runs the loops, else 0.",
	}, func() float64 {
		if src.Leading() {
			return 1
		}
		return 0
	})
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	for _, c := range []prometheus.Collector{leader, &figuresCollector{src: src, log: log}, &settlementCollector{src: src}, &drawCollector{src: src}, &pausedCollector{src: src, now: time.Now}} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// ResyncFailed counts a failed re-sync; client errors (an unknown sale) are
// not failures of the system.
func (m *Metrics) ResyncFailed(err error) {
	if m == nil || err == nil {
		return
	}
	if status, _ := flashgate.ErrorStatus(err); status >= 500 {
		m.ResyncErrors.Inc()
	}
}

var settlementDesc = prometheus.NewDesc("flashgate_settlement_difference",
	"Redis booked minus live units in the database minus the stream backlog, for each closed sale whose stream has drained; 0 when they agree. Exported by the leading control plane only.",
	[]string{"sale"}, nil)

// settlementCollector reports the settlement of closed sales at scrape time,
// so the gauge returns to 0 once a re-sync has corrected Redis. It reads
// each closed sale's status (two database reads and one Redis round trip)
// per scrape: cheap for the tens of closed sales a deployment keeps, to be
// batched like the figures collector if that grows. Like the figures, only
// the leader exports it, so an alert on it fires once.
type settlementCollector struct {
	src Source
}

func (c *settlementCollector) Describe(ch chan<- *prometheus.Desc) { ch <- settlementDesc }

func (c *settlementCollector) Collect(ch chan<- prometheus.Metric) {
	if !c.src.Leading() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	sales, err := c.src.LiveSales(ctx) // an archived sale settled with no difference
	if err != nil {
		return // the figures collector logs it
	}
	for _, sale := range sales {
		if sale.State != flashgate.StateClosed {
			continue
		}
		diff, settled, err := c.src.Settlement(ctx, sale.ID)
		if err != nil || !settled {
			continue
		}
		ch <- prometheus.MustNewConstMetric(settlementDesc, prometheus.GaugeValue, float64(diff), sale.ID)
	}
}
