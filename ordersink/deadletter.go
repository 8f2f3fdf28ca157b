package ordersink

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/lua"
)

// deadEntry is an entry the drainer cannot store, and why.
type deadEntry struct {
	msg    redis.XMessage
	reason string
}

// maxReason bounds the reason stored with a dead letter.
const maxReason = 500

// deadLetter moves entries of sale's order stream to its dead-letter stream
// (lua.DeadKey): in one MULTI, each is added there with its fields and
// DeadSource, DeadReason and DeadTime, then acknowledged and deleted.
func (d *Drainer) deadLetter(ctx context.Context, sale string, dead []deadEntry) error {
	if len(dead) == 0 {
		return nil
	}
	key, dkey := lua.OrdersKey(sale), lua.DeadKey(sale)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	now := d.cfg.Clock.Now().UnixMilli()
	ids := make([]string, len(dead))
	_, err := d.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for i, e := range dead {
			ids[i] = e.msg.ID
			vals := make([]any, 0, 2*len(e.msg.Values)+6)
			for _, k := range slices.Sorted(maps.Keys(e.msg.Values)) {
				vals = append(vals, k, e.msg.Values[k])
			}
			reason := e.reason
			if len(reason) > maxReason {
				reason = reason[:maxReason]
			}
			vals = append(vals, lua.DeadSource, e.msg.ID, lua.DeadReason, reason, lua.DeadTime, now)
			p.XAdd(ctx, &redis.XAddArgs{Stream: dkey, Values: vals})
		}
		p.XAck(ctx, key, lua.SinkGroup, ids...)
		p.XDel(ctx, key, ids...)
		return nil
	})
	if err != nil {
		return fmt.Errorf("ordersink: dead-lettering %d entries of %s: %w", len(dead), key, err)
	}
	for _, e := range dead {
		d.log.Error("order entry moved to the dead-letter stream", "stream", key, "dead", dkey, "id", e.msg.ID, "reason", e.reason)
	}
	d.m.dead(sale, len(dead))
	return nil
}
