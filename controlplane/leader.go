package controlplane

import (
	"context"
	"fmt"
	"time"

	"github.com/flashgate/flashgate/lua"
)

// lead reports whether this Service holds the leader lease now: it renews
// the lease it holds (the fencing check before each round of actions) or
// takes a free one.
func (s *Service) lead(ctx context.Context) (bool, error) {
	ttl := s.leaderTTL
	ok, err := lua.Extend.Run(ctx, s.rdb, lua.LeaderKeys(), s.leaseToken, ttl.Milliseconds()).Int()
	if err != nil {
		s.setLeading(false)
		return false, fmt.Errorf("renewing leader lease: %w", err)
	}
	if ok == 1 {
		s.setLeading(true)
		return true, nil
	}
	took, err := s.rdb.SetNX(ctx, lua.LeaderKey(), s.leaseToken, ttl).Result()
	if err != nil {
		s.setLeading(false)
		return false, fmt.Errorf("taking leader lease: %w", err)
	}
	if took {
		// A fresh lease gets a fresh fencing token: every token a
		// stale leader holds is lower (see rebalance.go).
		f, err := s.rdb.Incr(ctx, lua.FenceKey()).Result()
		if err != nil {
			s.log.Warn("taking a fencing token; no bucket moves until the next lease", "err", err)
			f = 0
		}
		s.fence.Store(f)
	}
	s.setLeading(took)
	return took, nil
}

func (s *Service) setLeading(v bool) {
	if !v {
		s.fence.Store(0)
	}
	s.mu.Lock()
	was := s.leading
	s.leading = v
	s.mu.Unlock()
	if v != was {
		if v {
			s.log.Info("control plane leads the loops", "node", s.nodeID)
		} else {
			s.log.Info("control plane no longer leads", "node", s.nodeID)
		}
	}
}

// Leading reports whether this Service held the leader lease at its last
// tick.
func (s *Service) Leading() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leading
}

// resign gives the lease up, if this Service holds it.
func (s *Service) resign() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = lua.Unlock.Run(ctx, s.rdb, lua.LeaderKeys(), s.leaseToken).Err()
	s.setLeading(false)
}
