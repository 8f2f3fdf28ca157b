package gateway

import (
	"hash/maphash"
	"time"
)

// Local verdicts on a purchase, from the cached state.
const (
	verdictAdmit = iota
	verdictUnavailable
	verdictNotFound
	verdictClosed
	verdictNotStarted
	verdictSoldOut
)

// judge answers a purchase from the cached state alone.
func judge(st *saleState, admitted int64) int {
	switch {
	case st == nil:
		return verdictUnavailable
	case !st.found:
		return verdictNotFound
	case st.closed:
		return verdictClosed
	case !st.start && st.resume:
		// An open sale paused while it is rebuilt after a failover: a
		// moment's unavailability, not "not started" (which buyers take
		// as final).
		return verdictUnavailable
	case !st.start:
		return verdictNotStarted
	case st.booked >= st.total:
		return verdictSoldOut
	case st.q == nil && st.access+admitted-st.base >= st.count:
		// A fair queue's frontier is its cap (package queueedge).
		return verdictSoldOut
	}
	return verdictAdmit
}

// admit counts one admission for e unless the cached state turns it away.
// A failed compare-and-swap means another purchase was counted first, so it
// judges again with the new count and retries: it answers sold out only
// when the cap is reached, never for losing races.
func (e *sale) admit() int {
	for {
		n := e.admitted.Load()
		if v := judge(e.state.Load(), n); v != verdictAdmit {
			return v
		}
		if e.lostRace != nil {
			e.lostRace()
		}
		if e.admitted.CompareAndSwap(n, n+1) {
			return verdictAdmit
		}
	}
}

// allowUser spends one of user's tokens.
func (s *Server) allowUser(user string, now time.Time) bool {
	if s.users == nil {
		return true
	}
	return s.users.Allow(maphash.String(s.seed, user), now.UnixNano())
}
