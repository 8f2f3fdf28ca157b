package opsmetrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

var pausedDesc = prometheus.NewDesc("flashgate_sale_paused_seconds",
	"Seconds an open sale has been paused (start = 0 while it is rebuilt from the database after a failover, a fence or a re-sync; buyers are answered 503), for each sale paused now, as the failover watch saw it at its last tick; a sale that stays paused is an alert. Exported by the leading control plane only.",
	[]string{"sale"}, nil)

// pausedCollector reports the paused sales at scrape time from the
// failover watch's notes, which cost no Redis or database read.
type pausedCollector struct {
	src Source
	now func() time.Time
}

func (c *pausedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- pausedDesc }

func (c *pausedCollector) Collect(ch chan<- prometheus.Metric) {
	if !c.src.Leading() {
		return
	}
	now := c.now()
	for id, since := range c.src.PausedSince() {
		ch <- prometheus.MustNewConstMetric(pausedDesc, prometheus.GaugeValue, max(now.Sub(since).Seconds(), 0), id)
	}
}
