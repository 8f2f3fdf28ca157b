package inventory

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/replwait"
	"github.com/flashgate/flashgate/lua"
)

// Values of Config.WaitReplicas besides a count.
const (
	// WaitAuto waits for the replicas the sale's primary has online (per
	// shard on a cluster); a primary without any is not waited on.
	WaitAuto = 0
	// WaitOff never waits for replicas.
	WaitOff = -1
)

// wantReplicas returns how many replicas a reserve on node must reach:
// Config.WaitReplicas, or with WaitAuto the count node last reported online,
// read again (INFO replication, one round trip) by the first reserve that
// finds it older than replwait.Every. The reserves that find it old
// meanwhile wait for that read: a count of none that is out of date would
// answer them without WAIT.
func (s *Service) wantReplicas(ctx context.Context, node *redis.Client, c *replwait.Count) int {
	switch {
	case s.waitReplicas > 0:
		return s.waitReplicas
	case s.waitReplicas < 0:
		return 0
	}
	return c.Want(func(c *replwait.Count) { s.readReplicas(ctx, node, node.Options().Addr, c) })
}

// readReplicas reads the online replicas of src (the primary at addr, or
// the connection a write and its WAIT went on) into c (replwait.Count's
// Refresh). A primary that cannot tell (miniredis, INFO renamed) counts as
// having none, noted once; an unreadable count (an error reply, a node
// that is not role:master, a read that failed) keeps the last count, and
// at least one replica: never none.
func (s *Service) readReplicas(ctx context.Context, src replwait.Infoer, addr string, c *replwait.Count) {
	was, n, a, err := c.Refresh(ctx, src)
	if a == replwait.Blind && s.replicas.Blind.CompareAndSwap(false, true) {
		s.log.Info("redis cannot tell its replicas (INFO replication): reserves are answered without WAIT", "primary", addr, "err", err)
	}
	switch {
	case a == replwait.Unreadable && was != n:
		s.log.Warn("the primary's replicas cannot be read; each reserve waits for at least one", "primary", addr, "was", was, "now", n, "err", err)
	case was != n:
		s.log.Info("the primary's online replicas changed; each reserve waits for them", "primary", addr, "was", was, "now", n)
	}
}

// primaryOf returns the client of the primary that holds key and its
// replica count: the client itself, or on a cluster the master of key's
// slot. node is nil for another kind of client (a ring), which no WAIT can
// follow: its reserves are sent without one.
func (s *Service) primaryOf(ctx context.Context, key string) (node *redis.Client, c *replwait.Count, err error) {
	switch r := s.rdb.(type) {
	case *redis.Client:
		return r, s.single, nil
	case *redis.ClusterClient:
		node, err := r.MasterForKey(ctx, key)
		if err != nil {
			return nil, nil, err
		}
		return node, s.replicas.Of(node.Options().Addr), nil
	}
	return nil, nil, nil
}

// runReserve runs script (lua.Reserve or lua.ReserveMany, on tag's keys)
// through via (s.scripter, or s.rdb for a batch: see send) and, when the sale's primary has replicas to wait for (wantReplicas),
// WAIT on the same connection: one WAIT covers every reserve of the batch
// (group commit). acked is the number of replicas WAIT counted (0 when WAIT
// failed) and want the number it asked for; acked < 0 means no WAIT was
// sent. An answer naming an order the script did not write (already
// purchased) with no order of the call's own written is covered by a write
// of the WAIT mark on the same connection before a second WAIT: the order
// was written earlier, and replication is in order.
func (s *Service) runReserve(ctx context.Context, via redis.Scripter, script *redis.Script, tag string, keys []string, args ...any) (res any, acked int64, want int, err error) {
	var node *redis.Client
	var c *replwait.Count
	if s.waitReplicas >= 0 {
		if node, c, err = s.primaryOf(ctx, keys[0]); err != nil {
			return nil, 0, 0, err
		}
		if node != nil {
			want = s.wantReplicas(ctx, node, c)
		}
	}
	if want == 0 {
		res, err = script.Run(ctx, via, keys, args...).Result()
		expireOnFailure(c, err)
		return res, -1, 0, err
	}
	// A pinned connection: WAIT counts the writes of its own connection.
	conn := node.Conn()
	defer conn.Close()
	for attempt := 0; ; attempt++ {
		var cmd *redis.Cmd
		var wait *redis.Cmd
		start := time.Now()
		// The pipeline's replies are awaited for the client's read
		// timeout, and no longer than the WAIT's own plus
		// replwait.Margin on a client with ContextTimeoutEnabled.
		wctx, cancel := context.WithTimeout(ctx, s.waitTimeout+replwait.Margin)
		_, _ = conn.Pipelined(wctx, func(pipe redis.Pipeliner) error {
			if attempt == 0 {
				cmd = script.EvalSha(ctx, pipe, keys, args...)
			} else {
				cmd = script.Eval(ctx, pipe, keys, args...)
			}
			wait = pipe.Do(ctx, "WAIT", want, s.waitTimeout.Milliseconds())
			return nil
		})
		cancel()
		res, err := cmd.Result()
		if attempt == 0 && redis.HasErrorPrefix(err, "NOSCRIPT") {
			continue
		}
		if err != nil {
			expireOnFailure(c, err)
			s.m.call(opWait, start)
			return nil, 0, want, err
		}
		if foundOnly(res) {
			wctx, cancel := context.WithTimeout(ctx, s.waitTimeout+replwait.Margin)
			_, _ = conn.Pipelined(wctx, func(pipe redis.Pipeliner) error {
				pipe.Set(ctx, lua.WaitMarkKey(tag), 1, 10*time.Second)
				wait = pipe.Do(ctx, "WAIT", want, s.waitTimeout.Milliseconds())
				return nil
			})
			cancel()
		}
		n, werr := wait.Int64()
		if werr != nil {
			s.log.WarnContext(ctx, "WAIT after a reserve failed", "err", werr)
			n = 0
		}
		if n < int64(want) && s.waitReplicas == WaitAuto {
			n, want = s.rewait(ctx, node, conn, n, want)
		}
		s.m.call(opWait, start)
		s.m.waitBatch(res)
		return res, n, want, nil
	}
}

// rewait is WaitAuto's answer to a WAIT that fell short (acked of want):
// the primary's count of online replicas is read again at once, on the
// reserves' own connection (a new one may reach a promoted replica behind
// the same address), and when a replica has gone since (killed, cut off:
// no longer online), the reserves wait for those still online, on the
// same connection, rather than answer 503 for a second until the count
// would be read anyway (replwait.Rewait). A replica still online but
// behind keeps the shortfall.
func (s *Service) rewait(ctx context.Context, node *redis.Client, conn *redis.Conn, acked int64, want int) (int64, int) {
	c := s.single
	if _, ok := s.rdb.(*redis.ClusterClient); ok {
		c = s.replicas.Of(node.Options().Addr)
	}
	online := c.Reread(func(c *replwait.Count) { s.readReplicas(ctx, conn, node.Options().Addr, c) })
	n, want, err := replwait.Rewait(ctx, conn, online, acked, want, s.waitTimeout)
	if err != nil {
		s.log.WarnContext(ctx, "WAIT after a reserve failed", "err", err)
	}
	return n, want
}

// expireOnFailure has c read again by the next reserve (replwait.Count's
// Expire) when err says the primary did not take the write (no answer, or
// a reply such as READONLY or LOADING): after a failover behind the same
// name (a Sentinel's) the first reserve on the promoted replica then
// waits for the replicas it has, not for its old primary's count.
func expireOnFailure(c *replwait.Count, err error) {
	var reply redis.Error
	if c != nil && err != nil && (!errors.As(err, &reply) || unavailableReply(err)) {
		c.Expire()
	}
}

// foundOnly reports whether a Reserve or ReserveMany answer (code, order id
// pairs) names an order found already purchased and reserves none itself.
func foundOnly(res any) bool {
	vals, _ := res.([]any)
	found := false
	for i := 0; i+1 < len(vals); i += 2 {
		switch code, _ := vals[i].(int64); code {
		case lua.ReserveOK:
			return false
		case lua.ReservePurchased:
			found = true
		}
	}
	return found
}
