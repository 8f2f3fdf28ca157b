package opsmetrics

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flashgate/flashgate"
)

var (
	ordersDesc  = prometheus.NewDesc("flashgate_orders", "Order rows in the database by status, over all sales. Exported by the leading control plane only.", []string{"status"}, nil)
	bookedDesc  = prometheus.NewDesc("flashgate_sale_booked", "Units held by live orders, as Redis counts them. Exported by the leading control plane only.", []string{"sale"}, nil)
	admitDesc   = prometheus.NewDesc("flashgate_sale_admitted", "Requests the gateways admitted to a sale. Exported by the leading control plane only.", []string{"sale"}, nil)
	backlogDesc = prometheus.NewDesc("flashgate_stream_backlog", "Reserved orders not yet in the database. Exported by the leading control plane only.", []string{"sale"}, nil)
	// The variant series are bounded: at most flashgate.MaxVariants per
	// live sale sold in variants.
	variantBookedDesc = prometheus.NewDesc("flashgate_variant_booked", "Units of a variant held by live orders, as Redis counts them, for each sale sold in variants. Exported by the leading control plane only.", []string{"sale", "variant"}, nil)
	variantTotalDesc  = prometheus.NewDesc("flashgate_variant_total", "Units of a variant on sale, for each sale sold in variants. Exported by the leading control plane only.", []string{"sale", "variant"}, nil)
)

// figuresCollector reads the database and Redis figures at scrape time,
// only while this control plane leads: the figures are the deployment's,
// not the process's, so exactly one process exports them (a non-leader, and
// a gateway's embedded control plane, exports none and queries nothing),
// and summing or taking the max over any number of replicas reads the truth.
type figuresCollector struct {
	src Source
	log *slog.Logger
}

func (c *figuresCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- ordersDesc
	ch <- bookedDesc
	ch <- admitDesc
	ch <- backlogDesc
	ch <- variantBookedDesc
	ch <- variantTotalDesc
}

// Collect costs O(sales), never O(orders): the order counts are the
// database's counters, the Redis figures one pipelined round trip.
func (c *figuresCollector) Collect(ch chan<- prometheus.Metric) {
	if !c.src.Leading() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	sales, err := c.src.LiveSales(ctx) // archived sales' figures no longer change
	if err != nil {
		c.log.Warn("metrics: listing sales", "err", err)
		return
	}
	if rfs, err := c.src.RedisFigures(ctx, sales); err == nil {
		for i, rf := range rfs {
			if rf == nil {
				continue
			}
			id := sales[i].ID
			ch <- prometheus.MustNewConstMetric(bookedDesc, prometheus.GaugeValue, float64(rf.Booked), id)
			ch <- prometheus.MustNewConstMetric(admitDesc, prometheus.GaugeValue, float64(rf.Access), id)
			ch <- prometheus.MustNewConstMetric(backlogDesc, prometheus.GaugeValue, float64(rf.Backlog), id)
		}
	}
	for _, sale := range sales {
		if !sale.HasVariants() {
			continue
		}
		booked, err := c.src.VariantBooked(ctx, sale)
		if err != nil {
			c.log.Warn("metrics: variant figures", "sale", sale.ID, "err", err)
			continue
		}
		for i, v := range sale.Variants {
			ch <- prometheus.MustNewConstMetric(variantBookedDesc, prometheus.GaugeValue, float64(booked[i]), sale.ID, v.ID)
			ch <- prometheus.MustNewConstMetric(variantTotalDesc, prometheus.GaugeValue, float64(v.Total), sale.ID, v.ID)
		}
	}
	sum, err := c.src.AllFigures(ctx)
	if err != nil {
		c.log.Warn("metrics: order figures", "err", err)
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
