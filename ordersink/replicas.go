package ordersink

import (
	"context"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/replwait"
	"github.com/flashgate/flashgate/lua"
)

// onlineReplicas returns how many replicas node (a primary) has online, from
// INFO replication, read at most every replwait.Every per primary. A
// primary that cannot tell (miniredis, INFO renamed) counts as having none,
// noted once; an unreadable count (an error reply, a node that is not
// role:master, a read that failed) is the last count, and at least one.
func (d *Drainer) onlineReplicas(ctx context.Context, node *redis.Client) int {
	addr := node.Options().Addr
	c := d.replicas.Of(addr)
	return c.Want(func(c *replwait.Count) {
		n, a, err := replwait.Read(ctx, node)
		d.noteReplicas(addr, c, n, a, err)
	})
}

// noteReplicas keeps what the primary at addr answered of its online
// replicas (replwait.Count's Note), and logs a change.
func (d *Drainer) noteReplicas(addr string, c *replwait.Count, n int, a replwait.Answer, err error) int {
	was, now := c.Note(n, a)
	switch {
	case a == replwait.Blind && d.replicas.Blind.CompareAndSwap(false, true):
		d.log.Info("redis cannot tell its replicas (INFO replication): the order sink commits without WAIT", "primary", addr, "err", err)
	case a == replwait.Unreadable && was != now:
		d.log.Warn("the primary's replicas cannot be read; the sink waits for at least one", "primary", addr, "was", was, "now", now, "err", err)
	case was != now:
		d.log.Info("the primary's online replicas changed; the sink waits for each", "primary", addr, "was", was, "now", now)
	}
	return now
}

// awaitReplicas returns nil once the replicas it waits for (WaitReplicas)
// hold everything the batches hold, or at once when there are none. On each
// primary concerned it re-claims the batches' entries for this consumer
// (XCLAIM JUSTID: a write, replicated after the entries themselves, which
// sets the connection's replication offset even when the entries were read
// by an earlier connection or process) and then sends WAIT on that same
// connection. Replication is ordered: once a replica acknowledged the
// XCLAIM it holds the entries.
func (d *Drainer) awaitReplicas(ctx context.Context, batches []batch) error {
	if d.cfg.WaitReplicas < 0 {
		return nil
	}
	type nodeBatches struct {
		node *redis.Client
		bs   []batch
	}
	var nodes []*nodeBatches
	for _, b := range batches {
		node, err := d.primaryFor(ctx, lua.OrdersKey(b.sale))
		if err != nil {
			return err
		}
		i := slices.IndexFunc(nodes, func(n *nodeBatches) bool { return n.node == node })
		if i < 0 {
			nodes = append(nodes, &nodeBatches{node: node})
			i = len(nodes) - 1
		}
		nodes[i].bs = append(nodes[i].bs, b)
	}
	for _, n := range nodes {
		if d.cfg.WaitReplicas == WaitAuto {
			// A primary that had no replica a moment ago is not asked
			// again for every batch; one that had is, in waitOn.
			if d.onlineReplicas(ctx, n.node) == 0 {
				continue
			}
		}
		if err := d.waitOn(ctx, n.node, n.bs); err != nil {
			return err
		}
	}
	return nil
}

// waitOn re-claims the batches' entries and sends WAIT on one connection of
// node. With WaitAuto the re-claims' pipeline also reads INFO replication,
// so the WAIT asks for the replicas the primary has online now (none: no
// WAIT; a count it cannot give: the last one, at least one), at no extra
// round trip.
func (d *Drainer) waitOn(ctx context.Context, node *redis.Client, bs []batch) error {
	conn := node.Conn()
	defer conn.Close()
	want := d.cfg.WaitReplicas
	var info *redis.StringCmd
	claims := make([]*redis.StringSliceCmd, 0, len(bs))
	_, _ = conn.Pipelined(ctx, func(p redis.Pipeliner) error {
		if want == WaitAuto {
			info = p.Info(ctx, "replication")
		}
		for _, b := range bs {
			ids := make([]string, len(b.msgs))
			for i, m := range b.msgs {
				ids[i] = m.ID
			}
			claims = append(claims, p.XClaimJustID(ctx, &redis.XClaimArgs{
				Stream: lua.OrdersKey(b.sale), Group: lua.SinkGroup, Consumer: d.cfg.Consumer,
				MinIdle: 0, Messages: ids,
			}))
		}
		return nil
	})
	// An INFO refused (an error reply) is an unreadable count, not a
	// failed batch: only the re-claims must have gone through.
	for _, c := range claims {
		if err := c.Err(); err != nil {
			return fmt.Errorf("ordersink: re-claiming a batch before WAIT: %w", err)
		}
	}
	if info != nil {
		addr := node.Options().Addr
		n, a := replwait.Parse(info.Result())
		if want = d.noteReplicas(addr, d.replicas.Of(addr), n, a, info.Err()); want == 0 {
			return nil
		}
	}
	// A WAIT of its own, after the re-claims' replies, sent as a plain
	// command (replwait.Wait): its reply is awaited for the client's read
	// timeout (WaitTimeout plus replwait.Margin in flashgate), not
	// go-redis's WaitTimeout plus 10 s for a blocking command, so a
	// primary gone silent (killed, frozen, cut off by a failover) costs
	// the sink a second, not ten.
	acked, err := replwait.Wait(ctx, conn, want, d.cfg.WaitTimeout)
	if err != nil {
		return fmt.Errorf("ordersink: WAIT: %w", err)
	}
	if acked < int64(want) {
		return fmt.Errorf("%w: %d of %d replicas within %v; not committing %d streams' batches yet",
			ErrReplicasBehind, acked, want, d.cfg.WaitTimeout, len(bs))
	}
	return nil
}

// primaryFor returns the client of the primary that holds key: the client
// itself, or for a cluster the master of key's slot.
func (d *Drainer) primaryFor(ctx context.Context, key string) (*redis.Client, error) {
	switch c := d.rdb.(type) {
	case *redis.Client:
		return c, nil
	case *redis.ClusterClient:
		n, err := c.MasterForKey(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("ordersink: finding the primary of %s: %w", key, err)
		}
		return n, nil
	}
	return nil, fmt.Errorf("ordersink: WAIT needs a *redis.Client or *redis.ClusterClient, not %T", d.rdb)
}
