package gateway

import (
	"sync/atomic"
	"time"
)

// unavailableLogEvery is how often at most the gateway logs purchases it
// answered 503 because the Reserver failed.
const unavailableLogEvery = 5 * time.Second

// unavailableLog counts purchases answered 503 because the Reserver (the
// inventory) was unavailable, for a rate-limited warning.
type unavailableLog struct {
	count atomic.Int64 // since the last warning
	last  atomic.Int64 // unix nanoseconds of the last warning; 0 = none yet
}

// logUnavailable counts one purchase answered 503 for err and logs a
// warning, with the count since the last one, at most once every
// unavailableLogEvery: a dead inventory fails every buyer, and one line per
// buyer would flood the log.
func (s *Server) logUnavailable(err error) {
	u := &s.unavail
	u.count.Add(1)
	now := s.clock.Now().UnixNano()
	last := u.last.Load()
	if last != 0 && now-last < int64(unavailableLogEvery) || !u.last.CompareAndSwap(last, now) {
		return
	}
	s.log.Warn("gateway: purchases answered 503 unavailable: the inventory failed",
		"purchases", u.count.Swap(0), "err", err)
}
