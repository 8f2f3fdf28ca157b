package controlplane

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/lua"
)

//go:embed leader.lua
var extendSrc string

// extendScript renews the leader lease for its holder only (compare and
// extend); see leader.lua.
var extendScript = redis.NewScript(extendSrc)

// unlockScript deletes the leader lock only for its holder.
var unlockScript = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

// lead reports whether this Service holds the leader lease now: it renews
// the lease it holds (the fencing check before each round of actions) or
// takes a free one.
func (s *Service) lead(ctx context.Context) (bool, error) {
	ttl := s.leaderTTL
	ok, err := extendScript.Run(ctx, s.rdb, []string{lua.LeaderKey()}, s.leaseToken, ttl.Milliseconds()).Int()
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
	s.setLeading(took)
	return took, nil
}

func (s *Service) setLeading(v bool) {
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
	_ = unlockScript.Run(ctx, s.rdb, []string{lua.LeaderKey()}, s.leaseToken).Err()
	s.setLeading(false)
}
