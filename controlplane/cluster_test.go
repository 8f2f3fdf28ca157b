package controlplane

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/lua"
)

// testCluster is the Redis Cluster the package's cluster variants share,
// started by the first test that asks for it and stopped by TestMain.
var testCluster redistest.SharedCluster

// redisBackends are the Redis set-ups the table tests run on.
var redisBackends = []string{"single", "cluster"}

// TestMain stops the shared cluster after the tests, then fails the run on
// a goroutine the tests left behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(stopAfter{m}) }

// stopAfter runs the tests, then stops the shared cluster.
type stopAfter struct{ m *testing.M }

func (s stopAfter) Run() int {
	code := s.m.Run()
	testCluster.Stop()
	return code
}

// flushAll empties Redis: FLUSHALL on the server, or on every primary of a
// cluster.
func (e *env) flushAll() {
	e.t.Helper()
	var err error
	if cc, ok := e.rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(e.ctx, func(ctx context.Context, n *redis.Client) error {
			return n.FlushAll(ctx).Err()
		})
	} else {
		err = e.rdb.FlushAll(e.ctx).Err()
	}
	if err != nil {
		e.t.Fatalf("FLUSHALL: %v", err)
	}
}

// primaries returns how many distinct primaries hold the sales' keys; on a
// single server, 1.
func (e *env) primaries(sales ...string) int {
	e.t.Helper()
	cc, ok := e.rdb.(*redis.ClusterClient)
	if !ok {
		return 1
	}
	seen := map[string]bool{}
	for _, s := range sales {
		n, err := cc.MasterForKey(e.ctx, lua.SaleKey(s))
		if err != nil {
			e.t.Fatalf("the primary of %s: %v", s, err)
		}
		seen[n.Options().Addr] = true
	}
	return len(seen)
}
