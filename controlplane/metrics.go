package controlplane

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/internal/salehash"
	"github.com/flashgate/flashgate/internal/promreg"
)

// metrics are the control plane's Prometheus collectors.
type metrics struct {
	resyncs prometheus.Counter
	expired prometheus.Counter
	refunds prometheus.Counter
}

func newMetrics(s *Service, reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		resyncs: prometheus.NewCounter(prometheus.CounterOpts{Name: "flashgate_resync_total", Help: "Re-syncs of a sale's stock from the database."}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{Name: "flashgate_expired_total", Help: "Orders expired unpaid."}),
		refunds: prometheus.NewCounter(prometheus.CounterOpts{Name: "flashgate_refunds_total", Help: "Orders refunded."}),
	}
	var err error
	for _, c := range []*prometheus.Counter{&m.resyncs, &m.expired, &m.refunds} {
		if *c, err = promreg.Register(reg, *c); err != nil {
			return nil, err
		}
	}
	// The figures collector reads this Service's stores, so it is never
	// shared: a second control plane in one registry is an error.
	if err := reg.Register(&figuresCollector{s: s}); err != nil {
		return nil, err
	}
	return m, nil
}

var (
	ordersDesc  = prometheus.NewDesc("flashgate_orders", "Order rows in the database by status, over all sales. Exported by the leading control plane only.", []string{"status"}, nil)
	bookedDesc  = prometheus.NewDesc("flashgate_sale_booked", "Units held by live orders, as Redis counts them. Exported by the leading control plane only.", []string{"sale"}, nil)
	admitDesc   = prometheus.NewDesc("flashgate_sale_admitted", "Requests the gateways admitted to a sale. Exported by the leading control plane only.", []string{"sale"}, nil)
	backlogDesc = prometheus.NewDesc("flashgate_stream_backlog", "Reserved orders not yet in the database. Exported by the leading control plane only.", []string{"sale"}, nil)
)

// figuresCollector reads the database and Redis figures at scrape time,
// only while this control plane leads: the figures are the deployment's,
// not the process's, so exactly one process exports them (a non-leader, and
// a gateway's embedded control plane, exports none and queries nothing),
// and summing or taking the max over any number of replicas reads the truth.
type figuresCollector struct {
	s *Service
}

func (c *figuresCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- ordersDesc
	ch <- bookedDesc
	ch <- admitDesc
	ch <- backlogDesc
}

// Collect costs O(sales), never O(orders): the order counts are the
// database's counters, the Redis figures one pipelined round trip.
func (c *figuresCollector) Collect(ch chan<- prometheus.Metric) {
	if !c.s.Leading() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	sales, err := c.s.store.LiveSales(ctx) // archived sales' figures no longer change
	if err != nil {
		c.s.log.Warn("metrics: listing sales", "err", err)
		return
	}
	ids := make([]string, len(sales))
	for i, sale := range sales {
		ids[i] = sale.ID
	}
	if rfs, err := salehash.Read(ctx, c.s.rdb, ids); err == nil {
		for i, rf := range rfs {
			if _, err := c.s.buckets.Fold(ctx, sales[i], &rf); err != nil {
				continue
			}
			ch <- prometheus.MustNewConstMetric(bookedDesc, prometheus.GaugeValue, float64(rf.Booked), ids[i])
			ch <- prometheus.MustNewConstMetric(admitDesc, prometheus.GaugeValue, float64(rf.Access), ids[i])
			ch <- prometheus.MustNewConstMetric(backlogDesc, prometheus.GaugeValue, float64(rf.Backlog), ids[i])
		}
	}
	sum, err := c.s.store.AllFigures(ctx)
	if err != nil {
		c.s.log.Warn("metrics: order figures", "err", err)
		return
	}
	for _, v := range []struct {
		status flashgate.OrderStatus
		n      int64
	}{
		{flashgate.StatusPendingPayment, sum.PendingPayment},
		{flashgate.StatusPaid, sum.Paid},
		{flashgate.StatusCancelled, sum.Cancelled},
		{flashgate.StatusExpired, sum.Expired},
		{flashgate.StatusRefunded, sum.Refunded},
	} {
		ch <- prometheus.MustNewConstMetric(ordersDesc, prometheus.GaugeValue, float64(v.n), string(v.status))
	}
}
