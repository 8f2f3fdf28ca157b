package opsmetrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

var drawDesc = prometheus.NewDesc("flashgate_draw",
	"A draw sale's entries and its close's progress, by step: made (entries ever made), pending, entered, withdrawn, won, lost, captured, released (the entries now in each state), winners (the draw's) and promoted (entrants charged in place of a winner whose capture failed), as Redis counts them. Exported by the leading control plane only.",
	[]string{"sale", "step"}, nil)

// drawCollector reports each live draw sale's figures at scrape time: one
// Redis round trip per draw sale.
type drawCollector struct {
	src Source
}

func (c *drawCollector) Describe(ch chan<- *prometheus.Desc) { ch <- drawDesc }

func (c *drawCollector) Collect(ch chan<- prometheus.Metric) {
	if !c.src.Leading() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	sales, err := c.src.LiveSales(ctx)
	if err != nil {
		return // the figures collector logs it
	}
	for _, sale := range sales {
		if !sale.Draw() {
			continue
		}
		steps, err := c.src.DrawSteps(ctx, sale)
		if err != nil {
			continue
		}
		for step, n := range steps {
			ch <- prometheus.MustNewConstMetric(drawDesc, prometheus.GaugeValue, float64(n), sale.ID, step)
		}
	}
}
