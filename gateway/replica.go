package gateway

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// errReplicaStale says the replica is reachable but not in sync with its
// primary.
var errReplicaStale = errors.New("replica not in sync with its primary")

// replicaUsable reports whether sale-state reads may go to the replica. A
// replica that answers is not enough: one restarted from an old snapshot,
// or cut off from its primary, answers with stale state (an open sale
// unknown, a sold-out one open). So its replication health is checked
// before reads go back to it, and every ReplicaCheck while they use it;
// meanwhile reads go to the primary.
func (s *Server) replicaUsable(parent context.Context) bool {
	now := time.Now().UnixNano()
	failed := s.replicaFailed.Load()
	if failed && now < s.replicaRetry.Load() {
		return false
	}
	if !failed && now-s.replicaChecked.Load() < int64(s.cfg.ReplicaCheck) {
		return true
	}
	if !s.replicaCheck.TryLock() {
		// Another reader is checking; keep to the last verdict.
		return !failed
	}
	defer s.replicaCheck.Unlock()
	ctx, cancel := context.WithTimeout(parent, s.cfg.RedisTimeout)
	defer cancel()
	if err := s.checkReplica(ctx); err != nil {
		s.replicaDown(err)
		return false
	}
	s.replicaChecked.Store(now)
	return true
}

// replicaDown sends reads to the primary until the replica is tried again.
func (s *Server) replicaDown(err error) {
	s.replicaRetry.Store(time.Now().Add(s.cfg.ReplicaCheck).UnixNano())
	if !s.replicaFailed.Swap(true) {
		s.log.Warn("gateway: replica unusable, reading from the primary", "err", err)
	}
}

// checkReplica reads the replica's INFO: a replica must be linked to its
// primary (master_link_status:up), with no full sync in progress, and not
// loading a dataset. A server that is itself a primary (a promoted
// replica, or the primary given as a replica) is its own truth.
func (s *Server) checkReplica(ctx context.Context) error {
	info, err := s.cfg.Replica.Info(ctx, "replication", "persistence").Result()
	if err != nil {
		return fmt.Errorf("checking the replica: %w", err)
	}
	return replicaHealth(info)
}

// replicaHealth judges an INFO replication/persistence text.
func replicaHealth(info string) error {
	fields := map[string]string{}
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok {
			fields[k] = v
		}
	}
	if fields["loading"] == "1" || fields["async_loading"] == "1" {
		return fmt.Errorf("%w: loading a dataset", errReplicaStale)
	}
	switch fields["role"] {
	case "master":
		return nil
	case "slave":
	default:
		return fmt.Errorf("%w: no role in INFO", errReplicaStale)
	}
	if st := fields["master_link_status"]; st != "up" {
		return fmt.Errorf("%w: master_link_status:%s", errReplicaStale, st)
	}
	if fields["master_sync_in_progress"] != "0" {
		return fmt.Errorf("%w: a sync is in progress", errReplicaStale)
	}
	return nil
}
