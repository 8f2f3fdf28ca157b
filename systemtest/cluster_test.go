package systemtest

import (
	"context"
	"os"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/redistest"
)

// The package's cluster variants share one Redis Cluster, started by the
// first test that asks for it and stopped by TestMain.
var (
	clusterOnce sync.Once
	cluster     *redistest.Cluster
)

func TestMain(m *testing.M) {
	code := m.Run()
	if cluster != nil {
		cluster.Stop()
	}
	os.Exit(code)
}

// sharedCluster returns the package's cluster, emptied and healthy.
func sharedCluster(t *testing.T) *redistest.Cluster {
	t.Helper()
	clusterOnce.Do(func() {
		bin := redistest.Binary()
		if bin == "" {
			return
		}
		dir, err := os.MkdirTemp("", "fg-cluster-")
		if err != nil {
			t.Fatal(err)
		}
		c, err := redistest.StartClusterServers(bin, dir)
		if err != nil {
			t.Fatalf("starting the cluster: %v", err)
		}
		cluster = c
	})
	if cluster == nil {
		redistest.StartCluster(t) // skips, or fails when required
	}
	cluster.WaitOK(t)
	cluster.Flush(t)
	return cluster
}

// shardReplica returns the address of the replica serving key's slot, as
// CLUSTER SLOTS lists it.
func shardReplica(t *testing.T, rdb redis.UniversalClient, key string) string {
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
			return r.Nodes[1].Addr
		}
	}
	t.Fatalf("no node serves slot %d", slot)
	return ""
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
