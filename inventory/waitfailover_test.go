package inventory_test

import (
	"context"
	"net"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/inventory"
)

// TestWaitAutoAfterFailoverBehindName: behind one name (as a Sentinel's
// master name) the primary, which had a replica, is killed and its replica
// promoted. The first reserve on the promoted replica, which has no
// replica of its own, is answered without a WAIT: the failed reserves
// before it had its count read again, rather than the old primary's count
// kept for a second and a WAIT falling short for its whole timeout.
func TestWaitAutoAfterFailoverBehindName(t *testing.T) {
	primary := redistest.Start(t, "--repl-diskless-sync-delay", "0")
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port))
	replica.WaitReplica(t)
	waitOnline(t, primary.Client(t), 1)
	var target atomic.Value
	target.Store(primary.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: "behind-a-name", MaxRetries: -1,
		Dialer: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, target.Load().(string))
		}})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	prepSale(t, primary.Client(t), "named", 10, 1, "open")
	replica.WaitReplica(t)
	svc := inventory.New(rdb, inventory.Config{Logger: quiet()})
	if _, err := svc.Reserve(ctx, "named", "u0", "", 1); err != nil {
		t.Fatalf("Reserve with the replica up: %v", err)
	}

	primary.Stop()
	if _, err := svc.Reserve(ctx, "named", "u1", "", 1); err == nil {
		t.Fatal("Reserve with the primary killed: got no error")
	}
	rc := replica.Client(t)
	if err := rc.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatalf("REPLICAOF NO ONE: %v", err)
	}
	target.Store(replica.Addr)
	before := redistest.Commands(t, rc)["wait"].Calls
	if id, err := svc.Reserve(ctx, "named", "u2", "", 1); err != nil || !flashgate.ValidOrderID(id) {
		t.Fatalf("first Reserve on the promoted replica: got %q, %v; want an order id", id, err)
	}
	if got := redistest.Commands(t, rc)["wait"].Calls - before; got != 0 {
		t.Errorf("WAITs of the first reserve on the promoted replica (no replicas): got %d, want 0", got)
	}
}
