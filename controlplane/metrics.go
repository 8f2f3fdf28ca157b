package controlplane

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flashgate/flashgate"
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
	for _, c := range []prometheus.Collector{m.resyncs, m.expired, m.refunds, &figuresCollector{s: s}} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

var (
	ordersDesc  = prometheus.NewDesc("flashgate_orders", "Order rows in the database by status, over all sales.", []string{"status"}, nil)
	bookedDesc  = prometheus.NewDesc("flashgate_sale_booked", "Units held by live orders, as Redis counts them.", []string{"sale"}, nil)
	admitDesc   = prometheus.NewDesc("flashgate_sale_admitted", "Requests the gateways admitted to a sale.", []string{"sale"}, nil)
	backlogDesc = prometheus.NewDesc("flashgate_stream_backlog", "Reserved orders not yet in the database.", []string{"sale"}, nil)
)

// figuresCollector reads the database and Redis figures at scrape time.
type figuresCollector struct {
	s *Service
}

func (c *figuresCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- ordersDesc
	ch <- bookedDesc
	ch <- admitDesc
	ch <- backlogDesc
}

func (c *figuresCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	sales, err := c.s.store.Sales(ctx)
	if err != nil {
		c.s.log.Warn("metrics: listing sales", "err", err)
		return
	}
	var sum flashgate.SaleFigures
	for _, sale := range sales {
		if fig, err := c.s.store.Figures(ctx, sale.ID); err == nil {
			sum.PendingPayment += fig.PendingPayment
			sum.Paid += fig.Paid
			sum.Cancelled += fig.Cancelled
			sum.Expired += fig.Expired
			sum.Refunded += fig.Refunded
		}
		if rf, err := c.s.redisFigures(ctx, sale.ID); err == nil {
			ch <- prometheus.MustNewConstMetric(bookedDesc, prometheus.GaugeValue, float64(rf.booked), sale.ID)
			ch <- prometheus.MustNewConstMetric(admitDesc, prometheus.GaugeValue, float64(rf.access), sale.ID)
			ch <- prometheus.MustNewConstMetric(backlogDesc, prometheus.GaugeValue, float64(rf.backlog), sale.ID)
		}
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
