package controlplane

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/promreg"
)

// opsMetrics are the collectors deploy/prometheus's alerts need beyond the
// figures of metrics.go: who leads, failed re-syncs, and the settlement of
// closed sales. A nil *opsMetrics counts nothing.
type opsMetrics struct {
	resyncErrors prometheus.Counter
}

var settlementDesc = prometheus.NewDesc("flashgate_settlement_difference",
	"Redis booked minus live units in the database minus the stream backlog, for each closed sale whose stream has drained; 0 when they agree. Exported by the leading control plane only.",
	[]string{"sale"}, nil)

func newOpsMetrics(s *Service, reg prometheus.Registerer) (*opsMetrics, error) {
	m := &opsMetrics{
		resyncErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "flashgate_resync_errors_total",
			Help: "Re-syncs of a sale's stock that failed for a reason other than a bad request (Redis or the database).",
		}),
	}
	leader := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "flashgate_controlplane_leader",
		Help: "1 while this control plane holds the leader lease and runs the loops, else 0.",
	}, func() float64 {
		if s.Leading() {
			return 1
		}
		return 0
	})
	var err error
	if m.resyncErrors, err = promreg.Register(reg, m.resyncErrors); err != nil {
		return nil, err
	}
	// The leader gauge and the settlement collector read this Service, so
	// they are never shared.
	for _, c := range []prometheus.Collector{leader, &settlementCollector{s: s}} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// resyncFailed counts a failed re-sync; client errors (an unknown sale) are
// not failures of the system.
func (m *opsMetrics) resyncFailed(err error) {
	if m == nil || err == nil {
		return
	}
	if status, _ := flashgate.ErrorStatus(err); status >= 500 {
		m.resyncErrors.Inc()
	}
}

// settlementCollector reports the settlement of closed sales at scrape time,
// so the gauge returns to 0 once a re-sync has corrected Redis. It reads
// each closed sale's status (two database reads and one Redis round trip)
// per scrape: cheap for the tens of closed sales a deployment keeps, to be
// batched like the figures collector if that grows. Like the figures, only
// the leader exports it, so an alert on it fires once.
type settlementCollector struct {
	s *Service
}

func (c *settlementCollector) Describe(ch chan<- *prometheus.Desc) { ch <- settlementDesc }

func (c *settlementCollector) Collect(ch chan<- prometheus.Metric) {
	if !c.s.Leading() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	sales, err := c.s.store.LiveSales(ctx) // an archived sale settled with no difference
	if err != nil {
		return // metrics.go's collector logs it
	}
	for _, sale := range sales {
		if sale.State != flashgate.StateClosed {
			continue
		}
		st, err := c.s.SaleStatus(ctx, sale.ID)
		if err != nil || st.Settlement == nil || !st.Settlement.Settled {
			continue
		}
		ch <- prometheus.MustNewConstMetric(settlementDesc, prometheus.GaugeValue, float64(st.Settlement.Difference), sale.ID)
	}
}
