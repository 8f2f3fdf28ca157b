package inventory

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/flashgate/flashgate"
)

// replyError is a Redis error reply as go-redis hands it over.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

func TestRedisErrorClassifies(t *testing.T) {
	tests := []struct {
		err         error
		unavailable bool
	}{
		{replyError("LOADING Redis is loading the dataset in memory"), true},
		{replyError("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."), true},
		{replyError("READONLY You can't write against a read only replica."), true},
		{replyError("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."), true},
		{replyError("CLUSTERDOWN The cluster is down"), true},
		{replyError("TRYAGAIN Multiple keys request during rehashing of slot"), true},
		{replyError("OOM command not allowed when used memory > 'maxmemory'."), true},
		{replyError("NOREPLICAS Not enough good replicas to write."), true},
		{replyError("MOVED 3999 127.0.0.1:6381"), true},
		{replyError("ASK 3999 127.0.0.1:6381"), true},
		{replyError("ERR max number of clients reached"), true},
		{fmt.Errorf("pipeline: %w", replyError("READONLY You can't write against a read only replica.")), true},
		{context.DeadlineExceeded, true},
		{io.EOF, true},
		{replyError("ERR user_script:1: Script attempted to access nonexistent global variable 'x'"), false},
		{replyError("WRONGTYPE Operation against a key holding the wrong kind of value"), false},
		{replyError("NOSCRIPT No matching script. Please use EVAL."), false},
	}
	s := &Service{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, tt := range tests {
		err := s.redisError("reserving", tt.err)
		if got := errors.Is(err, flashgate.ErrUnavailable); got != tt.unavailable {
			t.Errorf("redisError(%q) unavailable = %v, want %v", tt.err, got, tt.unavailable)
		}
		if !errors.Is(err, tt.err) {
			t.Errorf("redisError(%q) = %v, does not wrap the Redis error", tt.err, err)
		}
	}
}
