package ordersink

// Polls returns how many polls for new entries d has made so far, so that
// tests wait for polls rather than for time.
func (d *Drainer) Polls() int64 { return d.pollsSeen.Load() }
