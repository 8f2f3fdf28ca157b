package queueedge

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/replwait"
	"github.com/flashgate/flashgate/lua"
)

// Values of Entrant.WaitReplicas besides a count.
const (
	// WaitAuto waits for the replicas the sale's primary has online (per
	// shard on a cluster); a primary without any is not waited on.
	WaitAuto = 0
	// WaitOff never waits for replicas.
	WaitOff = -1
)

// Entrant runs queue entries on the primary and waits for its replicas to
// hold them. Set its fields before the first Run; the zero counts are
// ready.
type Entrant struct {
	// Primary runs the entry script.
	Primary redis.UniversalClient
	// WaitReplicas is gateway.Config.WaitReplicas: WaitAuto, WaitOff or a
	// count.
	WaitReplicas int
	// WaitTimeout bounds each WAIT.
	WaitTimeout time.Duration
	// Log receives the WAIT's failures.
	Log *slog.Logger
	// counts are each primary's online replicas (WaitAuto).
	counts replwait.Counts
}

// ErrShort says the replicas to wait for did not acknowledge an entry
// within WaitTimeout: it stands on the primary, unconfirmed.
var ErrShort = errors.New("queue entry: replicas did not acknowledge it in time")

// Run runs lua.QueueEnter on keys and, when the sale's primary has
// replicas to wait for (WaitReplicas), WAIT for them on the same
// connection. A WAIT mark is written between the two, so the WAIT covers
// an entry found there (an entry whose first answer fell short) as well
// as a new one: WAIT counts the writes of its own connection. An answer
// the replicas did not acknowledge is ErrShort.
func (en *Entrant) Run(ctx context.Context, sale string, keys []string, args ...any) ([]any, error) {
	node, want := en.entryReplicas(ctx, keys[0])
	if want == 0 {
		return lua.QueueEnter.Run(ctx, en.Primary, keys, args...).Slice()
	}
	conn := node.Conn()
	defer conn.Close()
	for attempt := 0; ; attempt++ {
		var cmd, wait *redis.Cmd
		// Awaited no longer than the WAIT's own timeout plus
		// replwait.Margin on a client with ContextTimeoutEnabled.
		wctx, cancel := context.WithTimeout(ctx, en.WaitTimeout+replwait.Margin)
		_, _ = conn.Pipelined(wctx, func(p redis.Pipeliner) error {
			if attempt == 0 {
				cmd = lua.QueueEnter.EvalSha(ctx, p, keys, args...)
			} else {
				cmd = lua.QueueEnter.Eval(ctx, p, keys, args...)
			}
			p.Set(ctx, lua.WaitMarkKey(sale), 1, 10*time.Second)
			wait = p.Do(ctx, "WAIT", want, en.WaitTimeout.Milliseconds())
			return nil
		})
		cancel()
		v, err := cmd.Slice()
		if attempt == 0 && redis.HasErrorPrefix(err, "NOSCRIPT") {
			continue
		}
		if err != nil {
			return nil, err
		}
		n, werr := wait.Int64()
		if werr != nil {
			en.Log.WarnContext(ctx, "gateway: WAIT after a queue entry failed", "err", werr)
			n = 0
		}
		if n < int64(want) && en.WaitReplicas == WaitAuto {
			n, want = en.rewait(ctx, node, conn, n, want)
		}
		if n < int64(want) {
			return v, ErrShort
		}
		return v, nil
	}
}

// entryReplicas returns the primary that holds key (nil for a client no
// WAIT can follow, such as a ring) and how many replicas an entry on it
// must reach: WaitReplicas, or with WaitAuto the count it last
// reported online, read again (INFO replication) by the first entry that
// finds it older than replwait.Every; the entries finding it old meanwhile
// wait for that read.
func (en *Entrant) entryReplicas(ctx context.Context, key string) (*redis.Client, int) {
	if en.WaitReplicas < 0 {
		return nil, 0
	}
	var node *redis.Client
	switch r := en.Primary.(type) {
	case *redis.Client:
		node = r
	case *redis.ClusterClient:
		n, err := r.MasterForKey(ctx, key)
		if err != nil {
			return nil, 0 // the script's own call meets the same fault
		}
		node = n
	default:
		return nil, 0
	}
	if en.WaitReplicas > 0 {
		return node, en.WaitReplicas
	}
	c := en.counts.Of(node.Options().Addr)
	return node, c.Want(func(c *replwait.Count) { en.readReplicas(ctx, node, node.Options().Addr, c) })
}

// readReplicas reads the online replicas of src (the primary at addr, or
// the connection a write and its WAIT went on) into c. A primary that cannot
// tell (miniredis, INFO renamed) counts as having none, noted once; an
// unreadable count (an error reply, a node that is not role:master, a read
// that failed) keeps the last count, and at least one replica.
func (en *Entrant) readReplicas(ctx context.Context, src replwait.Infoer, addr string, c *replwait.Count) {
	was, n, a, err := c.Refresh(ctx, src)
	switch {
	case a == replwait.Blind && en.counts.Blind.CompareAndSwap(false, true):
		en.Log.Info("gateway: redis cannot tell its replicas (INFO replication): queue entries are answered without WAIT", "primary", addr, "err", err)
	case a == replwait.Unreadable && was != n:
		en.Log.Warn("gateway: the primary's replicas cannot be read; each queue entry waits for at least one", "primary", addr, "err", err)
	}
}

// rewait is WaitAuto's answer to a WAIT that fell short (acked of want):
// the count of online replicas is read again at once, on the entry's own
// connection, and replwait.Rewait waits for those still online.
func (en *Entrant) rewait(ctx context.Context, node *redis.Client, conn *redis.Conn, acked int64, want int) (int64, int) {
	online := en.counts.Of(node.Options().Addr).Reread(func(c *replwait.Count) { en.readReplicas(ctx, conn, node.Options().Addr, c) })
	n, want, err := replwait.Rewait(ctx, conn, online, acked, want, en.WaitTimeout)
	if err != nil {
		en.Log.WarnContext(ctx, "gateway: WAIT after a queue entry failed", "err", err)
	}
	return n, want
}
