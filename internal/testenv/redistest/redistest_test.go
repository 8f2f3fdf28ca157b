package redistest_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/testenv/redistest"
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

func TestCommandStats(t *testing.T) {
	info := "# Commandstats\r\ncmdstat_evalsha:calls=12,usec=340,usec_per_call=28.33,rejected_calls=0,failed_calls=1\r\n" +
		"cmdstat_client|list:calls=1,usec=9,usec_per_call=9.00,rejected_calls=0,failed_calls=0\r\n"
	got := redistest.CommandStats(info)
	want := map[string]redistest.CommandStat{"evalsha": {12, 340}, "client|list": {1, 9}}
	if len(got) != len(want) || got["evalsha"] != want["evalsha"] || got["client|list"] != want["client|list"] {
		t.Errorf("CommandStats: got %v, want %v", got, want)
	}
	if got := redistest.CPUSeconds("# CPU\r\nused_cpu_sys:1.25\r\nused_cpu_user:2.5\r\nused_cpu_sys_children:9\r\n"); got != 3.75 {
		t.Errorf("CPUSeconds: got %v, want 3.75", got)
	}
}
