package gateway

import (
	"hash/maphash"
	"time"
)

// allowOrder spends one of user's order-route tokens (OrderRate,
// OrderBurst): a bucket of its own, so that polling an order never spends
// a purchase attempt, and one user's flood of lookups, each of which may
// cost the database and Redis, is turned away before either.
func (s *Server) allowOrder(user string, now time.Time) bool {
	if s.orderUsers == nil {
		return true
	}
	return s.orderUsers.Allow(maphash.String(s.seed, user), now.UnixNano())
}

// logOrderLate counts one order request answered 503 because its work
// outlasted OrderTimeout (a stalled database or Redis), and logs a warning
// with the count at most once every unavailableLogEvery.
func (s *Server) logOrderLate(err error) {
	u := &s.orderLate
	u.count.Add(1)
	now := s.clock.Now().UnixNano()
	last := u.last.Load()
	if last != 0 && now-last < int64(unavailableLogEvery) || !u.last.CompareAndSwap(last, now) {
		return
	}
	s.log.Warn("gateway: order requests answered 503 unavailable: past the order timeout",
		"requests", u.count.Swap(0), "err", err)
}
