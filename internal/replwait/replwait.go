// Package replwait keeps what each Redis primary last said of its online
// replicas, for the tiers that WAIT for them after a write they answer
// (--wait-replicas auto: the inventory after a reserve, the gateway after
// a fair queue's entry).
package replwait

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
)

// Every is how long a primary's count of online replicas is kept before a
// write reads it again.
const Every = time.Second

// Count is what one primary last said of its online replicas: read by
// every write without a lock, refreshed by at most one at a time.
type Count struct {
	online atomic.Int64
	next   atomic.Int64 // unix nanoseconds: when to read it again
	mu     sync.Mutex   // held by the write reading it again
}

// Online is the count last read.
func (c *Count) Online() int { return int(c.online.Load()) }

// Want returns the count, read again with read by the first write that
// finds it older than Every; the writes finding it old meanwhile wait for
// that read: a count of none that is out of date would answer them
// without WAIT.
func (c *Count) Want(read func(*Count)) int {
	if time.Now().UnixNano() >= c.next.Load() {
		c.mu.Lock()
		if time.Now().UnixNano() >= c.next.Load() {
			read(c)
		}
		c.mu.Unlock()
	}
	return c.Online()
}

// Reread reads the count again at once (a WAIT fell short) with read.
func (c *Count) Reread(read func(*Count)) int {
	c.mu.Lock()
	read(c)
	c.mu.Unlock()
	return c.Online()
}

// Expire makes the next write read the count again (Want) whatever its
// age: the primary failed to answer a write, and the server that answers
// the next one may be another behind the same name (the replica a
// Sentinel promoted, which has replicas of its own, often none), whose
// count a WAIT falling short would otherwise learn only after its timeout.
func (c *Count) Expire() { c.next.Store(0) }

// Store keeps n, good for Every, and returns the count it replaces.
func (c *Count) Store(n int) (was int) {
	was = int(c.online.Swap(int64(n)))
	c.next.Store(time.Now().Add(Every).UnixNano())
	return was
}

// Counts holds a Count per primary, by address.
type Counts struct {
	mu     sync.Mutex
	byAddr map[string]*Count
	// Blind is set once a primary could not tell its replicas, so that
	// it is logged once.
	Blind atomic.Bool
}

// Of returns the Count of the primary at addr.
func (cs *Counts) Of(addr string) *Count {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	c := cs.byAddr[addr]
	if c == nil {
		if cs.byAddr == nil {
			cs.byAddr = map[string]*Count{}
		}
		c = &Count{}
		cs.byAddr[addr] = c
	}
	return c
}

// Infoer is what Read asks: a client, or the connection a write and its
// WAIT went on (a *redis.Conn), which alone is sure to reach the server
// that took the write: a new connection of the pool may reach another one
// behind the same address (a failover behind a proxy or a Sentinel's
// name), and that server's count says nothing of the write.
type Infoer interface {
	Info(ctx context.Context, section ...string) *redis.StringCmd
}

// Answer is the kind of answer a server gave to INFO replication.
type Answer int

// The kinds of Answer.
const (
	// Counted is a primary (role:master) telling its online replicas.
	Counted Answer = iota
	// Blind is a server that cannot tell, ever: INFO unknown (renamed) or
	// without a replication section (miniredis). It counts as having
	// none.
	Blind
	// Unreadable is any other answer: an error reply (BUSY, LOADING, max
	// clients, NOPERM), a node that is not a primary (role:slave: a
	// demoted primary, a replica behind the primary's address), or a read
	// that failed. Its count is not to be trusted, least of all a count of
	// none: a write waits for the last count read, and for at least one
	// replica.
	Unreadable
)

// String names a.
func (a Answer) String() string {
	switch a {
	case Counted:
		return "counted"
	case Blind:
		return "blind"
	}
	return "unreadable"
}

// Parse reads the answer to an INFO replication (info, err): the online
// replicas of a primary that says role:master, and what kind of answer it
// was (Unreadable counts none here; Count.Note makes it at least one).
func Parse(info string, err error) (n int, a Answer) {
	var reply redis.Error
	switch {
	case errors.As(err, &reply):
		msg := strings.ToLower(reply.Error())
		if strings.Contains(msg, "unknown command") || strings.Contains(msg, "not supported") {
			return 0, Blind
		}
		return 0, Unreadable
	case err != nil:
		return 0, Unreadable
	case !flashgate.KnowsReplicas(info):
		return 0, Blind
	case !isMaster(info):
		return 0, Unreadable
	}
	return flashgate.OnlineReplicas(info), Counted
}

// isMaster reports whether info (INFO replication) says role:master.
func isMaster(info string) bool {
	for line := range strings.SplitSeq(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && k == "role" {
			return v == "master"
		}
	}
	return false
}

// Read asks src for its online replicas (INFO replication, one round
// trip), as Parse reads them; err is the read's error, for the log.
func Read(ctx context.Context, src Infoer) (n int, a Answer, err error) {
	info, err := src.Info(ctx, "replication").Result()
	n, a = Parse(info, err)
	return n, a, err
}

// Note keeps what a primary answered (n of kind a, as Parse reads them),
// good for Every: a count of a primary that says role:master as it is,
// none for a Blind server, and for an Unreadable answer the last count but
// at least one, so that no write goes without WAIT on a count nobody
// read. It returns the count it replaces and the one it keeps.
func (c *Count) Note(n int, a Answer) (was, now int) {
	if a == Unreadable {
		n = max(c.Online(), 1)
	}
	return c.Store(n), n
}

// Refresh reads the count of src (Read) and keeps it (Note).
func (c *Count) Refresh(ctx context.Context, src Infoer) (was, now int, a Answer, err error) {
	n, a, err := Read(ctx, src)
	was, now = c.Note(n, a)
	return was, now, a, err
}

// Margin is how much longer than its own timeout a WAIT's reply is
// awaited: a primary silent past it is taken for gone (killed, frozen,
// cut off), and its connection is dropped.
const Margin = 500 * time.Millisecond

// Doer sends a command as it is: a client, a connection or a pipeline.
type Doer interface {
	Do(ctx context.Context, args ...any) *redis.Cmd
}

// Wait sends `WAIT n timeout` on conn and returns how many replicas
// acknowledged. It goes as a plain command, not as go-redis's Wait, which
// awaits a blocking command's reply for its timeout plus 10 s: the reply is
// awaited for the client's read timeout (keep it at timeout+Margin or
// more), and no longer than timeout+Margin on a client with
// ContextTimeoutEnabled. A reply that does not come in time ends in an
// error and the connection is dropped (go-redis removes a connection
// whose read timed out), never reused mid-reply. timeout is at least 1 ms:
// WAIT 0 blocks forever.
func Wait(ctx context.Context, conn Doer, n int, timeout time.Duration) (int64, error) {
	timeout = max(timeout, time.Millisecond)
	ctx, cancel := context.WithTimeout(ctx, timeout+Margin)
	defer cancel()
	return conn.Do(ctx, "WAIT", n, timeout.Milliseconds()).Int64()
}

// Rewait is the answer to a WAIT on conn that fell short (acked of want)
// once the count was read again (online): when a replica has gone since
// (killed, cut off: no longer online), the write waits for those still
// online, on the same connection, rather than answer 503 until the count
// would be read anyway; a replica still online but behind keeps the
// shortfall. It returns the replicas that acknowledged and how many were
// wanted; err is a WAIT that failed (none acknowledged).
func Rewait(ctx context.Context, conn *redis.Conn, online int, acked int64, want int, timeout time.Duration) (int64, int, error) {
	switch {
	case online >= want:
		return acked, want, nil
	case online == 0:
		return 0, 0, nil
	}
	n, err := Wait(ctx, conn, online, timeout)
	if err != nil {
		return 0, online, err
	}
	return n, online, nil
}
