package gateway

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// readiness caches the result of the last Redis pings.
type readiness struct {
	at   atomic.Int64 // unix nanoseconds of the last check
	ok   atomic.Bool
	busy sync.Mutex
}

// isReady reports whether the replica and the primary answer, re-checking
// at most once per ReadyCache; while one request checks, others get the
// previous answer.
func (s *Server) isReady() bool {
	if s.draining.Load() {
		return false
	}
	now := time.Now().UnixNano()
	if now-s.ready.at.Load() < int64(s.cfg.ReadyCache) {
		return s.ready.ok.Load()
	}
	if !s.ready.busy.TryLock() {
		return s.ready.ok.Load()
	}
	defer s.ready.busy.Unlock()
	ctx, cancel := context.WithTimeout(s.base, s.cfg.RedisTimeout)
	defer cancel()
	ok := s.cfg.Replica.Ping(ctx).Err() == nil && s.cfg.Primary.Ping(ctx).Err() == nil
	s.ready.ok.Store(ok)
	s.ready.at.Store(time.Now().UnixNano())
	if !ok {
		s.log.Warn("gateway: not ready: redis did not answer a ping")
	}
	return ok
}
