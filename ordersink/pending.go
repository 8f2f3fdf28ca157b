package ordersink

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/lua"
)

// pendingHere returns the entries of the sale streams delivered to this
// sink's consumer and not yet committed, by one pipeline of XPENDING
// summaries. It is what flashgate_sink_backlog reports: each sink its own
// share, so that summing the gauge over any number of sinks counts every
// entry once (the streams' whole backlog is the leader's
// flashgate_stream_backlog). A stream without the sink group yet holds none.
func (d *Drainer) pendingHere(ctx context.Context, sales []string) (int64, error) {
	if len(sales) == 0 {
		return 0, nil
	}
	cmds := make([]*redis.XPendingCmd, len(sales))
	_, _ = d.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, s := range sales {
			cmds[i] = p.XPending(ctx, lua.OrdersKey(s), lua.SinkGroup)
		}
		return nil
	})
	var n int64
	for _, c := range cmds {
		if err := c.Err(); err != nil {
			// "ERR no such key" (HasErrorPrefix drops the ERR).
			if isNoGroup(err) || redis.HasErrorPrefix(err, "no such key") {
				continue
			}
			return 0, err
		}
		n += c.Val().Consumers[d.cfg.Consumer]
	}
	return n, nil
}
