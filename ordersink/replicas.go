package ordersink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/lua"
)

// replicaCount is what a primary last said of its replicas (WaitAuto).
type replicaCount struct {
	online int
	at     time.Time
}

// replicasEvery is how long a primary's count of online replicas is kept
// before it is read again.
const replicasEvery = time.Second

// onlineReplicas returns how many replicas node (a primary) has online, from
// INFO replication, read at most every replicasEvery per primary. A primary
// that cannot tell (miniredis, INFO renamed) counts as having none, noted
// once; a read that fails is an error (the batch waits).
func (d *Drainer) onlineReplicas(ctx context.Context, node *redis.Client) (int, error) {
	addr := node.Options().Addr
	last, ok := d.replicas[addr]
	if ok && time.Since(last.at) < replicasEvery {
		return last.online, nil
	}
	info, err := node.Info(ctx, "replication").Result()
	var refused redis.Error
	switch {
	case errors.As(err, &refused) || (err == nil && !flashgate.KnowsReplicas(info)):
		if !d.blind {
			d.blind = true
			d.log.Info("redis cannot tell its replicas (INFO replication): the order sink commits without WAIT", "primary", addr, "err", err)
		}
		d.noteReplicas(addr, 0)
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("ordersink: counting the replicas of %s: %w", addr, err)
	}
	n := flashgate.OnlineReplicas(info)
	d.noteReplicas(addr, n)
	return n, nil
}

// noteReplicas keeps what the primary at addr said of its online replicas,
// and logs a change.
func (d *Drainer) noteReplicas(addr string, n int) {
	if d.replicas == nil {
		d.replicas = map[string]replicaCount{}
	}
	if last, ok := d.replicas[addr]; ok && n != last.online {
		d.log.Info("the primary's online replicas changed; the sink waits for each", "primary", addr, "was", last.online, "now", n)
	}
	d.replicas[addr] = replicaCount{online: n, at: time.Now()}
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
			had, err := d.onlineReplicas(ctx, n.node)
			if err != nil {
				return err
			}
			if had == 0 {
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
// WAIT), at no extra round trip.
func (d *Drainer) waitOn(ctx context.Context, node *redis.Client, bs []batch) error {
	conn := node.Conn()
	defer conn.Close()
	want := d.cfg.WaitReplicas
	var info *redis.StringCmd
	_, err := conn.Pipelined(ctx, func(p redis.Pipeliner) error {
		if want == WaitAuto {
			info = p.Info(ctx, "replication")
		}
		for _, b := range bs {
			ids := make([]string, len(b.msgs))
			for i, m := range b.msgs {
				ids[i] = m.ID
			}
			p.XClaimJustID(ctx, &redis.XClaimArgs{
				Stream: lua.OrdersKey(b.sale), Group: lua.SinkGroup, Consumer: d.cfg.Consumer,
				MinIdle: 0, Messages: ids,
			})
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("ordersink: re-claiming a batch before WAIT: %w", err)
	}
	if info != nil {
		want = flashgate.OnlineReplicas(info.Val())
		d.noteReplicas(node.Options().Addr, want)
		if want == 0 {
			return nil
		}
	}
	// A WAIT of its own, not in the pipeline: go-redis gives it a read
	// deadline of WaitTimeout plus a margin, whatever the client's.
	acked, err := conn.Wait(ctx, want, d.cfg.WaitTimeout).Result()
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
