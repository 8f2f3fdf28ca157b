package controlplane

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/testenv/testclock"
	"github.com/flashgate/flashgate/lua"
)

// lockedBuffer is a log sink safe for concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) lines(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), substr)
}

// TestFailoverWatchBlindNotedOnce runs the leader's ticks on the demo's
// embedded store (miniredis), which cannot answer INFO replication: the
// failover watch says so once, not once per sale and tick, and the sales
// sell as usual (no fence can trip without a marker).
func TestFailoverWatchBlindNotedOnce(t *testing.T) {
	ctx := context.Background()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	logs := &lockedBuffer{}
	e := &env{t: t, ctx: ctx, rdb: rdb, db: openDB(t, sqliteDSN(t)), clock: testclock.New(t0)}
	e.rel = &luaReleaser{RDB: rdb}
	svc, err := New(Config{Redis: rdb, Store: e.db, Releaser: e.rel, AdminToken: testToken, Clock: e.clock,
		Logger: slog.New(slog.NewTextHandler(logs, nil)), PersistWait: -1, NodeID: "test"})
	if err != nil {
		t.Fatal(err)
	}
	e.svc = svc
	e.openSale("b1", 5, 1)
	e.openSale("b2", 5, 1)
	lastResync := time.Now()
	for range 10 {
		svc.tick(ctx, &lastResync)
	}
	if got := logs.lines("failover watch"); got != 1 {
		t.Errorf("failover watch lines after 10 ticks over 2 sales: got %d, want 1\n%s", got, logs.b.String())
	}
	if got := logs.lines("level=WARN"); got != 1 {
		t.Errorf("warnings after 10 ticks: got %d, want 1\n%s", got, logs.b.String())
	}
	if n := e.reserveMany("b1", "u", 7); n != 5 {
		t.Errorf("reserves on the embedded store: got %d, want 5", n)
	}
	if n, _ := rdb.Exists(ctx, lua.PrimaryKey("b1")).Result(); n != 0 {
		t.Errorf("primary marker on a store that cannot tell its id: got one, want none")
	}
}
