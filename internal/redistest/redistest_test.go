package redistest_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/redistest"
)

// TestClusterAndSentinel checks that the harness's cluster has three
// primaries with a replica each and that its Sentinel names the primary.
func TestClusterAndSentinel(t *testing.T) {
	ctx := context.Background()
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		c := redistest.StartCluster(t)
		cc := c.Client(t, false)
		var masters, replicas atomic.Int64
		_ = cc.ForEachMaster(ctx, func(context.Context, *redis.Client) error { masters.Add(1); return nil })
		_ = cc.ForEachSlave(ctx, func(context.Context, *redis.Client) error { replicas.Add(1); return nil })
		if masters.Load() != 3 || replicas.Load() != 3 {
			t.Errorf("got %d primaries and %d replicas, want 3 and 3", masters.Load(), replicas.Load())
		}
	})
	t.Run("sentinel", func(t *testing.T) {
		t.Parallel()
		s := redistest.StartSentinel(t)
		fc := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.Name, SentinelAddrs: []string{s.Addr}})
		defer fc.Close()
		if err := fc.Set(ctx, "k", "v", 0).Err(); err != nil {
			t.Fatalf("SET through Sentinel: %v", err)
		}
		if got, _ := s.Primary.Client(t).Get(ctx, "k").Result(); got != "v" {
			t.Errorf("GET on the primary: got %q, want %q", got, "v")
		}
	})
}
