package controlplane

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/testenv/testclock"
)

// TestFailoverWatchStandalone runs the leader's ticks on a store that
// cannot answer INFO replication, told (Config.Standalone, the demo) or
// not that it has no replication by design: the watch says it is off
// once either way, a warning only when nobody said so, since there it
// means a promoted replica would go unnoticed.
func TestFailoverWatchStandalone(t *testing.T) {
	cases := []struct {
		standalone bool
		wantWarn   int
	}{
		{standalone: false, wantWarn: 1},
		{standalone: true, wantWarn: 0},
	}
	for _, c := range cases {
		ctx := context.Background()
		m := miniredis.RunT(t)
		rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		logs := &lockedBuffer{}
		e := &env{t: t, ctx: ctx, rdb: rdb, db: openDB(t, sqliteDSN(t)), clock: testclock.New(t0)}
		e.rel = &luaReleaser{RDB: rdb}
		svc, err := New(Config{Redis: rdb, Store: e.db, Releaser: e.rel, AdminToken: testToken, Clock: e.clock,
			Logger: slog.New(slog.NewTextHandler(logs, nil)), PersistWait: -1, NodeID: "test", Standalone: c.standalone})
		if err != nil {
			t.Fatal(err)
		}
		e.svc = svc
		e.openSale("s1", 5, 1)
		lastResync := time.Now()
		for range 3 {
			svc.tick(ctx, &lastResync)
		}
		if got := logs.lines("failover watch off"); got != 1 {
			t.Errorf("standalone %v: 'failover watch off' lines: got %d, want 1\n%s", c.standalone, got, logs.b.String())
		}
		if got := logs.lines("level=WARN"); got != c.wantWarn {
			t.Errorf("standalone %v: warnings: got %d, want %d\n%s", c.standalone, got, c.wantWarn, logs.b.String())
		}
	}
}
