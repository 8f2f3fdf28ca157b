package systemtest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/flashgate/flashgate/internal/testenv/redistest"
)

// testCluster is the Redis Cluster the package's cluster variants share,
// started by the first test that asks for it and stopped by TestMain.
var testCluster redistest.SharedCluster

// TestMain stops the shared cluster after the tests, then fails them if
// any goroutine outlives them (see leakOptions).
func TestMain(m *testing.M) {
	code := m.Run()
	testCluster.Stop()
	if code == 0 {
		if err := goleak.Find(leakOptions...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// shardNodes returns the addresses of the primary and the replica serving
// key's slot, as CLUSTER SLOTS lists them.
func shardNodes(t *testing.T, rdb redis.UniversalClient, key string) (primary, replica string) {
	t.Helper()
	ctx := context.Background()
	slot, err := rdb.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		t.Fatalf("CLUSTER KEYSLOT %s: %v", key, err)
	}
	ranges, err := rdb.ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatalf("CLUSTER SLOTS: %v", err)
	}
	for _, r := range ranges {
		if int64(r.Start) <= slot && slot <= int64(r.End) {
			if len(r.Nodes) < 2 {
				t.Fatalf("slot %d has no replica: %+v", slot, r.Nodes)
			}
			return r.Nodes[0].Addr, r.Nodes[1].Addr
		}
	}
	t.Fatalf("no node serves slot %d", slot)
	return "", ""
}

// gatewayReadName names the gateways' ReadOnly cluster connections, so
// that CLIENT LIST on a node shows which of them read sale state there.
const gatewayReadName = "fg-gateway-read"

// readOnlyClient is the gateways' ReadOnly cluster client, its connections
// named gatewayReadName.
func readOnlyClient(t *testing.T, c *redistest.Cluster) *redis.ClusterClient {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, ReadOnly: true, ClientName: gatewayReadName,
		PoolSize: 64, ReadTimeout: 3 * time.Second})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// stateReadsOn reports whether a gateway connection's last command on the
// node at addr was a sale-state read (HMGET): go-redis's ReadOnly cluster
// client sends a shard's reads to its primary itself while the shard's
// replica is failing, so the gateway's own fallback counter need not move.
func stateReadsOn(tb testing.TB, addr string) bool {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	list, err := c.ClientList(context.Background()).Result()
	if err != nil {
		tb.Errorf("CLIENT LIST on %s: %v", addr, err)
		return false
	}
	for _, line := range strings.Split(list, "\n") {
		if strings.Contains(line, " name="+gatewayReadName+" ") && strings.Contains(line, " cmd=hmget ") {
			return true
		}
	}
	return false
}

// flushAll empties Redis: every primary of a cluster.
func flushAll(ctx context.Context, rdb redis.UniversalClient) error {
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			return n.FlushAll(ctx).Err()
		})
	}
	return rdb.FlushAll(ctx).Err()
}
