package inventory

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
)

// Ping reports whether the Redis primary answers.
func (s *Service) Ping(ctx context.Context) error {
	start := time.Now()
	err := s.rdb.Ping(ctx).Err()
	s.m.call(opPing, start)
	if err != nil {
		return fmt.Errorf("pinging redis: %w (%w)", flashgate.ErrUnavailable, err)
	}
	return nil
}

// redisError classifies a failed Redis call. Connection failures, timeouts,
// cancellations and the server's "cannot serve now" answers are
// ErrUnavailable; other server errors (a script bug, a wrong key type) are
// internal and keep no sentinel. Either way the Redis text stays in the
// error for logs; clients only ever see flashgate.ErrorStatus's code.
func (s *Service) redisError(op string, err error) error {
	var rerr redis.Error
	if errors.As(err, &rerr) && !unavailableReply(err) {
		s.log.Error("redis error", "op", op, "err", err)
		return fmt.Errorf("%s: %w", op, err)
	}
	return fmt.Errorf("%s: %w (%w)", op, flashgate.ErrUnavailable, err)
}

// unavailableReply reports whether a Redis error reply means the server
// cannot serve writes right now rather than that the call is wrong.
func unavailableReply(err error) bool {
	// redis.HasErrorPrefix drops a leading "ERR ", as in "ERR max number
	// of clients reached".
	for _, p := range [...]string{"LOADING", "BUSY", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "OOM", "NOREPLICAS", "MOVED", "ASK", "max number of clients"} {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}
