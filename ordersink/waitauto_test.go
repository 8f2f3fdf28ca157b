package ordersink_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/ordersink"
)

// TestWaitReplicasAuto runs a drainer with the default configuration
// (WaitAuto) against a real primary whose replica reaches it through a
// proxy that can hold the link back: with the replica in step batches are
// committed; with the link held back (the replica lags, the primary still
// counts it online) nothing is committed; once it catches up everything
// is; once the replica is gone the primary has none and the drainer
// commits without waiting.
func TestWaitReplicasAuto(t *testing.T) {
	primary := redistest.Start(t, "--repl-diskless-sync-delay", "0")
	link := redistest.StartProxy(t, primary.Addr)
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(link.Port), "--repl-timeout", "60")
	replica.WaitReplica(t)
	e := &env{rs: primary, rdb: primary.Client(t)}
	e.db = openDB(t, "sqlite://"+filepath.Join(t.TempDir(), "fg.db"))
	e.prepare(t, 100)
	ctx := context.Background()
	testwait.Eventually(t, 10*time.Second, func() bool {
		return strings.Contains(e.rdb.Info(ctx, "replication").Val(), "state=online")
	}, "the primary to count its replica online")
	d := drainer(e, nil, ordersink.Config{WaitTimeout: 200 * time.Millisecond})
	drained := func(want int64) func() bool {
		return func() bool {
			_, _ = d.DrainOnce(ctx)
			f, _ := e.db.Figures(ctx, sale)
			return f.Persisted == want
		}
	}

	ids := e.reserve(t, "u", 5)
	testwait.Eventually(t, 10*time.Second, drained(5), "the first batch committed with the replica in step")

	link.Pause()
	held := e.reserve(t, "v", 5)
	for range 2 {
		if _, err := d.DrainOnce(ctx); !errors.Is(err, ordersink.ErrReplicasBehind) {
			t.Fatalf("DrainOnce with the replica held back: got %v, want ErrReplicasBehind", err)
		}
	}
	if f, _ := e.db.Figures(ctx, sale); f.Persisted != 5 {
		t.Fatalf("rows while the replica lags: got %d, want 5 (a batch the replica lacks was committed)", f.Persisted)
	}

	link.Resume()
	testwait.Eventually(t, 10*time.Second, drained(10), "the held batch committed once the replica caught up")

	replica.Stop()
	testwait.Eventually(t, 10*time.Second, func() bool {
		return strings.Contains(e.rdb.Info(ctx, "replication").Val(), "connected_slaves:0")
	}, "the primary to see its replica gone")
	alone := e.reserve(t, "w", 5)
	testwait.Eventually(t, 10*time.Second, drained(15), "a batch committed on a primary left without replicas")
	e.check(t, append(append(ids, held...), alone...))
}

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestWaitAutoBlindStore: on a store that cannot tell its replicas (the
// demo's miniredis) the default drainer commits without WAIT and says so
// once.
func TestWaitAutoBlindStore(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	e := &env{rdb: rdb, db: openDB(t, "sqlite://"+filepath.Join(t.TempDir(), "fg.db"))}
	e.prepare(t, 100)
	logs := &syncBuffer{}
	d := ordersink.New(rdb, e.db, ordersink.Config{Consumer: "c1", Logger: slog.New(slog.NewTextHandler(logs, nil))})
	ctx := context.Background()
	var all []string
	for round := range 3 {
		ids := e.reserve(t, "u"+strconv.Itoa(round)+"-", 4)
		all = append(all, ids...)
		if n, err := d.DrainOnce(ctx); err != nil || n != 4 {
			t.Fatalf("DrainOnce %d: got %d, %v; want 4, nil", round, n, err)
		}
	}
	e.check(t, all)
	if got := strings.Count(logs.String(), "cannot tell its replicas"); got != 1 {
		t.Errorf("notes that the store cannot tell its replicas: got %d, want 1\n%s", got, logs.String())
	}
}
