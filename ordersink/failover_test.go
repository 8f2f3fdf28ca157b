package ordersink_test

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/lua"
	"github.com/flashgate/flashgate/ordersink"
)

// silentBound is how long a test lets the sink's calls to a primary gone
// silent take: the WAIT's own timeout plus the margin, and the client's
// read timeout (1 s, as flashgate gives the sink), with room for a busy
// machine; go-redis's margin for a blocking command alone is 10 s.
const silentBound = 5 * time.Second

// laggingPrimary starts a primary whose one replica is online but held
// back (its link paused), so that the sink's WAIT blocks for its whole
// timeout, and a proxy in front of the primary for the sink's client (read
// timeout 1 s, as flashgate's). It returns the env on the primary (its
// client direct), the front proxy and the sink's client.
func laggingPrimary(t *testing.T) (*env, *redistest.Proxy, *redis.Client) {
	t.Helper()
	primary := redistest.Start(t, "--repl-diskless-sync-delay", "0")
	link := redistest.StartProxy(t, primary.Addr)
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(link.Port), "--repl-timeout", "60")
	replica.WaitReplica(t)
	e := &env{rs: primary, rdb: primary.Client(t)}
	e.db = openDB(t, "sqlite://"+filepath.Join(t.TempDir(), "fg.db"))
	e.prepare(t, 100)
	testwait.Eventually(t, 10*time.Second, func() bool {
		return strings.Contains(e.rdb.Info(context.Background(), "replication").Val(), "state=online")
	}, "the primary to count its replica online")
	link.Pause()
	front := redistest.StartProxy(t, primary.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: front.Addr, ReadTimeout: time.Second, MaxRetries: 1})
	t.Cleanup(func() { _ = rdb.Close() })
	return e, front, rdb
}

// waitingClients reports whether a client of rdb's server is blocked (in
// WAIT).
func waitingClients(rdb *redis.Client) bool {
	return !strings.Contains(rdb.Info(context.Background(), "clients").Val(), "blocked_clients:0")
}

// TestSinkWaitBoundedOnSilentPrimary: a primary that stops answering in
// the middle of the sink's WAIT (a partition, a freeze) holds the pass for
// the WAIT's timeout plus a margin, not go-redis's 10 s for a blocking
// command.
func TestSinkWaitBoundedOnSilentPrimary(t *testing.T) {
	e, front, rdb := laggingPrimary(t)
	e.reserve(t, "u", 3)
	d := ordersink.New(rdb, e.db, ordersink.Config{Consumer: "c1", Logger: quiet, WaitTimeout: 500 * time.Millisecond})
	done := make(chan error, 1)
	go func() { _, err := d.DrainOnce(context.Background()); done <- err }()
	testwait.Eventually(t, 10*time.Second, func() bool { return waitingClients(e.rdb) }, "the sink's WAIT")
	front.Pause()
	t.Cleanup(front.Resume)
	start := time.Now()
	select {
	case err := <-done:
		if err == nil || errors.Is(err, ordersink.ErrReplicasBehind) {
			t.Fatalf("DrainOnce on a primary gone silent: got %v, want a read error", err)
		}
	case <-time.After(silentBound):
		t.Fatalf("DrainOnce on a primary gone silent: still waiting after %v", silentBound)
	}
	t.Logf("DrainOnce returned %v after the primary went silent", time.Since(start).Round(time.Millisecond))
	if f, _ := e.db.Figures(context.Background(), sale); f.Persisted != 0 {
		t.Errorf("rows: got %d, want 0 (no replica acknowledged them)", f.Persisted)
	}
}

// TestSinkFailoverToNewPrimary: while the sink waits on a primary whose
// replica lags, the primary is cut off and a new one, holding the sale's
// stream without the sink's group (a promoted replica that lacked it),
// takes its address. The sink gives up the silent WAIT within its bound,
// creates the group again at the first NOGROUP and commits what the new
// primary holds.
func TestSinkFailoverToNewPrimary(t *testing.T) {
	e, front, rdb := laggingPrimary(t)
	e.reserve(t, "lost", 3) // only the old primary holds them: never committed
	d := ordersink.New(rdb, e.db, ordersink.Config{Consumer: "c1", Logger: quiet, WaitTimeout: 500 * time.Millisecond,
		Block: 10 * time.Millisecond, RefreshSales: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	stop := sync.OnceFunc(func() { cancel(); <-done })
	t.Cleanup(stop)
	testwait.Eventually(t, 10*time.Second, func() bool { return waitingClients(e.rdb) }, "the sink's WAIT")

	promoted := redistest.Start(t)
	pe := &env{rs: promoted, rdb: promoted.Client(t), db: e.db}
	pe.prepare(t, 100)
	ids := pe.reserve(t, "kept", 5)
	front.Switch(promoted.Addr)
	start := time.Now()
	if took, ok := testwait.For(silentBound, func() bool {
		f, _ := e.db.Figures(context.Background(), sale)
		return f.Persisted == int64(len(ids))
	}); !ok {
		t.Fatalf("rows of the new primary: none within %v of the failover", took)
	}
	t.Logf("the new primary's orders were rows %v after the failover", time.Since(start).Round(time.Millisecond))
	stop()
	pe.check(t, ids)
}

// TestSinkWaitUnreadableCount: with WaitAuto, a count of replicas the
// stream's primary cannot give (INFO refused with an error reply, a node
// that says role:slave) is not a count of none: the sink waits for at
// least one replica, and with none there commits nothing.
func TestSinkWaitUnreadableCount(t *testing.T) {
	for _, c := range []struct {
		name  string
		start func(t *testing.T) (*redistest.Server, *redis.Client)
	}{
		{"INFO refused", func(t *testing.T) (*redistest.Server, *redis.Client) {
			rs := redistest.Start(t)
			return rs, noInfoClient(t, rs)
		}},
		{"a node that says role:slave", func(t *testing.T) (*redistest.Server, *redis.Client) {
			rs := writableReplica(t)
			return rs, rs.Client(t)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			rs, rdb := c.start(t)
			e := &env{rs: rs, rdb: rs.Client(t)}
			e.db = openDB(t, "sqlite://"+filepath.Join(t.TempDir(), "fg.db"))
			e.prepare(t, 100)
			e.reserve(t, "u", 3)
			d := ordersink.New(rdb, e.db, ordersink.Config{Consumer: "c1", Logger: quiet, WaitTimeout: 100 * time.Millisecond})
			if _, err := d.DrainOnce(context.Background()); err == nil {
				t.Errorf("DrainOnce: got nil, want an error (no replica acknowledged the batch)")
			}
			if f, _ := e.db.Figures(context.Background(), sale); f.Persisted != 0 {
				t.Errorf("rows: got %d, want 0 (committed without WAIT)", f.Persisted)
			}
		})
	}
}

// noInfoClient returns a client of rs as a user that may run every command
// but INFO (NOPERM: an error reply, as BUSY or max clients are).
func noInfoClient(t *testing.T, rs *redistest.Server) *redis.Client {
	t.Helper()
	if err := rs.Client(t).Do(context.Background(), "ACL", "SETUSER", "noinfo", "on", "nopass", "~*", "&*", "+@all", "-info").Err(); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: rs.Addr, Username: "noinfo", Password: "any"})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// writableReplica starts a replica that takes writes of its own
// (replica-read-only no), in sync with a primary of its own.
func writableReplica(t *testing.T) *redistest.Server {
	t.Helper()
	primary := redistest.Start(t, "--repl-diskless-sync-delay", "0")
	rs := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port), "--replica-read-only", "no")
	rs.WaitReplica(t)
	return rs
}

// TestRunRecreatesGroupAtOnce: a stream whose group is gone (a failover
// to a replica that lacked it) is drained again at once: Run creates the
// group at the first NOGROUP and reads, without the backoff of a failing
// Redis (an hour here).
func TestRunRecreatesGroupAtOnce(t *testing.T) {
	e := newEnv(t, "sqlite://"+filepath.Join(t.TempDir(), "fg.db"))
	ctx, cancel := context.WithCancel(context.Background())
	d := drainer(e, nil, ordersink.Config{Block: 10 * time.Millisecond, RefreshSales: 10 * time.Millisecond,
		BackoffMin: time.Hour, BackoffMax: time.Hour})
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	stop := sync.OnceFunc(func() { cancel(); <-done })
	t.Cleanup(stop)
	ids := e.reserve(t, "u", 3)
	rows := func(n int) func() bool {
		return func() bool {
			f, _ := e.db.Figures(context.Background(), sale)
			return f.Persisted == int64(n)
		}
	}
	testwait.Eventually(t, 10*time.Second, rows(3), "the first rows")
	if err := e.rdb.Del(context.Background(), lua.OrdersKey(sale)).Err(); err != nil {
		t.Fatal(err)
	}
	ids = append(ids, e.reserve(t, "v", 4)...)
	testwait.Eventually(t, 10*time.Second, rows(7), "the rows of the stream without its group")
	stop()
	e.check(t, ids)
}
