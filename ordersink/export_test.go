package ordersink

import "time"

// Polls returns how many polls for new entries d has made so far, so that
// tests wait for polls rather than for time.
func (d *Drainer) Polls() int64 { return d.pollsSeen.Load() }

// RetryWait returns the wait of sale's last backoff (zero: none pending).
func (d *Drainer) RetryWait(sale string) time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.retry[sale].wait
}
