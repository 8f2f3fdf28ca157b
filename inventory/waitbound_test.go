package inventory_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/inventory"
)

// TestWaitAutoUnreadableCount: with WaitAuto, a count of replicas the
// sale's primary cannot give (INFO refused with an error reply, as BUSY or
// max clients are; a node that says role:slave) is not a count of none:
// the reserve waits for at least one replica, and with none there is
// answered ErrUnavailable (503), never 201 without WAIT.
func TestWaitAutoUnreadableCount(t *testing.T) {
	for _, c := range []struct {
		name  string
		start func(t *testing.T) (admin, rdb *redis.Client)
	}{
		{"INFO refused", func(t *testing.T) (*redis.Client, *redis.Client) {
			rs := redistest.Start(t)
			admin := rs.Client(t)
			if err := admin.Do(context.Background(), "ACL", "SETUSER", "noinfo", "on", "nopass", "~*", "&*", "+@all", "-info").Err(); err != nil {
				t.Fatal(err)
			}
			c := redis.NewClient(&redis.Options{Addr: rs.Addr, Username: "noinfo", Password: "any"})
			t.Cleanup(func() { _ = c.Close() })
			return admin, c
		}},
		{"a node that says role:slave", func(t *testing.T) (*redis.Client, *redis.Client) {
			primary := redistest.Start(t, "--repl-diskless-sync-delay", "0")
			rs := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port), "--replica-read-only", "no")
			rs.WaitReplica(t)
			c := rs.Client(t)
			return c, c
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			admin, rdb := c.start(t)
			prepSale(t, admin, "blind", 10, 1, "open")
			svc := inventory.New(rdb, inventory.Config{Logger: quiet(), WaitTimeout: 100 * time.Millisecond})
			for i := range 3 {
				id, err := svc.Reserve(context.Background(), "blind", "u"+strconv.Itoa(i), "", 1)
				if id != "" || !errors.Is(err, flashgate.ErrUnavailable) {
					t.Fatalf("Reserve %d: got %q, %v; want \"\", ErrUnavailable", i, id, err)
				}
			}
		})
	}
}

// TestWaitBoundedOnSilentPrimary: a primary that stops answering in the
// middle of a reserve's WAIT (a partition, a freeze) holds the reserve for
// the WAIT's timeout plus a margin on a client that honours context
// deadlines, not for the client's read timeout (here 10 s, go-redis's
// margin for a blocking command) and the reserve is answered
// ErrUnavailable; the connection is dropped, not reused mid-reply.
func TestWaitBoundedOnSilentPrimary(t *testing.T) {
	primary := redistest.Start(t, "--repl-diskless-sync-delay", "0")
	direct := primary.Client(t)
	link := redistest.StartProxy(t, primary.Addr)
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(link.Port))
	replica.WaitReplica(t)
	waitOnline(t, direct, 1)
	prepSale(t, direct, "silent", 10, 1, "open")
	link.Pause() // the replica lags: each WAIT blocks for its whole timeout
	front := redistest.StartProxy(t, primary.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: front.Addr, ReadTimeout: 10 * time.Second, MaxRetries: 1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	svc := inventory.New(rdb, inventory.Config{Logger: quiet(), WaitTimeout: 500 * time.Millisecond})
	ctx := context.Background()
	type answer struct {
		id  string
		err error
	}
	done := make(chan answer, 1)
	go func() { id, err := svc.Reserve(ctx, "silent", "u1", "", 1); done <- answer{id, err} }()
	testwait.Eventually(t, 10*time.Second, func() bool {
		return !strings.Contains(direct.Info(ctx, "clients").Val(), "blocked_clients:0")
	}, "the reserve's WAIT")
	front.Pause()
	t.Cleanup(front.Resume)
	const bound = 5 * time.Second
	start := time.Now()
	select {
	case a := <-done:
		if a.id != "" || !errors.Is(a.err, flashgate.ErrUnavailable) {
			t.Fatalf("Reserve on a primary gone silent: got %q, %v; want \"\", ErrUnavailable", a.id, a.err)
		}
	case <-time.After(bound):
		t.Fatalf("Reserve on a primary gone silent: still waiting after %v", bound)
	}
	t.Logf("Reserve answered %v after the primary went silent", time.Since(start).Round(time.Millisecond))
	front.Resume()
	link.Resume()
	// The timed-out connection was dropped: the next reserve reads its
	// own replies (a connection reused mid-reply would read the WAIT's).
	var pe *flashgate.PurchasedError
	testwait.Eventually(t, 10*time.Second, func() bool {
		_, err := svc.Reserve(ctx, "silent", "u1", "", 1)
		return errors.As(err, &pe)
	}, "the retry to find u1's order")
}
