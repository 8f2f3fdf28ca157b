package failover

// Standalone tells the watch that the store has no replication by design
// (the demo's embedded store): that it cannot tell its replication state
// is then said once at info, not as a warning, since no replica exists to
// be promoted. A real deployment never calls it: there the same finding
// means failovers would go unnoticed.
func (s *Watcher) Standalone() { s.standalone.Store(true) }
