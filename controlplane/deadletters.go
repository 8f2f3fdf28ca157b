package controlplane

import (
	"context"

	"github.com/flashgate/flashgate/controlplane/deadletter"
)

// DeadLetter and DeadLetters are controlplane/deadletter's.
type (
	DeadLetter  = deadletter.DeadLetter
	DeadLetters = deadletter.DeadLetters
)

// DeadLetters returns up to limit (1…1000; default 100) of the oldest
// entries of sale id's dead-letter stream, and its length
// (deadletter.Service.DeadLetters).
func (s *Service) DeadLetters(ctx context.Context, id string, limit int) (DeadLetters, error) {
	return s.dead.DeadLetters(ctx, id, limit)
}

// ReplayDeadLetters puts up to limit of the oldest dead letters of sale id
// back on its order stream (deadletter.Service.ReplayDeadLetters).
func (s *Service) ReplayDeadLetters(ctx context.Context, id string, limit int) (replayed int, left int64, err error) {
	return s.dead.ReplayDeadLetters(ctx, id, limit)
}
