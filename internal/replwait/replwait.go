// Package replwait keeps what each Redis primary last said of its online
// replicas, for the tiers that WAIT for them after a write they answer
// (--wait-replicas auto: the inventory after a reserve, the gateway after
// a fair queue's entry).
package replwait

import (
	"context"
	"errors"
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

// Read asks src for its online replicas (INFO replication, one round
// trip). known is false for a server that cannot tell (miniredis, INFO
// renamed: it counts as having none); err is a read that failed (keep the
// last count).
func Read(ctx context.Context, src Infoer) (n int, known bool, err error) {
	info, err := src.Info(ctx, "replication").Result()
	var refused redis.Error
	switch {
	case errors.As(err, &refused) || (err == nil && !flashgate.KnowsReplicas(info)):
		return 0, false, err
	case err != nil:
		return 0, true, err
	}
	return flashgate.OnlineReplicas(info), true, nil
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
	n, err := conn.Wait(ctx, online, timeout).Result()
	if err != nil {
		return 0, online, err
	}
	return n, online, nil
}
