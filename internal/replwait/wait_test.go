package replwait

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/testenv/redistest"
)

// TestRewaitBoundedOnSilentPrimary: the second WAIT after a shortfall, on
// a primary that has stopped answering (frozen, cut off), ends after the
// client's read timeout (1 s, as flashgate's request path has), not after
// go-redis's WAIT timeout plus 10 s, and the connection is dropped: the
// pool's next command reads its own reply.
func TestRewaitBoundedOnSilentPrimary(t *testing.T) {
	primary := redistest.Start(t)
	front := redistest.StartProxy(t, primary.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: front.Addr, ReadTimeout: time.Second, MaxRetries: 1, PoolSize: 1})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	conn := rdb.Conn()
	if err := conn.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	front.Pause()
	const bound = 5 * time.Second
	done := make(chan error, 1)
	go func() {
		_, _, err := Rewait(ctx, conn, 1, 0, 2, 300*time.Millisecond)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Rewait on a primary gone silent: got nil, want an error")
		}
	case <-time.After(bound):
		t.Fatalf("Rewait on a primary gone silent: still waiting after %v", bound)
	}
	_ = conn.Close()
	front.Resume()
	if got, err := rdb.Echo(ctx, "mine").Result(); err != nil || got != "mine" {
		t.Errorf("the pool's next command: got %q, %v; want its own reply", got, err)
	}
}
