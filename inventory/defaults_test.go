package inventory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/inventory"
	"github.com/flashgate/flashgate/lua"
)

// cmdReadTimeout is the read timeout cmd/flashgate gives the request
// path's Redis client (tiers.go, redisTune).
const cmdReadTimeout = time.Second

// TestDefaultWaitTimeout: with the default WaitTimeout, a WAIT that falls
// short is answered by Redis before a client with cmd/flashgate's read
// timeout gives up, so the reserve answers the shortfall (ErrUnavailable,
// the reservation standing) rather than an i/o timeout after the client's
// retries. A WaitTimeout equal to the read timeout (1s, the default
// before) lost that race.
func TestDefaultWaitTimeout(t *testing.T) {
	if inventory.DefaultWaitTimeout >= cmdReadTimeout {
		t.Fatalf("DefaultWaitTimeout %v: want below the read timeout %v", inventory.DefaultWaitTimeout, cmdReadTimeout)
	}
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: cmdReadTimeout, WriteTimeout: time.Second,
		MaxRetries: 1, DialerRetries: 1})
	t.Cleanup(func() { _ = rdb.Close() })
	prepSale(t, rdb, "waitdef", 10, 1, "open")
	// No replica exists: every WAIT for one falls short.
	svc := inventory.New(rdb, inventory.Config{Logger: quiet(), WaitReplicas: 1})
	ctx := context.Background()
	id, err := svc.Reserve(ctx, "waitdef", "u1", "", 1)
	if id != "" || !errors.Is(err, flashgate.ErrUnavailable) {
		t.Fatalf("Reserve: got %q, %v; want \"\", ErrUnavailable", id, err)
	}
	var nerr interface{ Timeout() bool }
	if errors.As(err, &nerr) && nerr.Timeout() {
		t.Fatalf("Reserve: got %v; want the WAIT's shortfall, not a client timeout", err)
	}
	if stored, err := rdb.HGet(ctx, lua.BuyersKey("waitdef"), "u1").Result(); err != nil || !flashgate.ValidOrderID(stored) {
		t.Fatalf("buyer entry after the short WAIT: got %q, %v; want an order id", stored, err)
	}
}
