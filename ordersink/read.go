package ordersink

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/lua"
)

// batch is entries read from one sale's stream.
type batch struct {
	sale string
	msgs []redis.XMessage
}

// drainPending re-reads the entries delivered to this consumer and never
// acknowledged, and stores them.
func (d *Drainer) drainPending(ctx context.Context, sale string) (int, error) {
	key := lua.OrdersKey(sale)
	total := 0
	// Each round acknowledges what it read, so the pending list shrinks;
	// the bound only guards against a list that never does.
	for round := 0; round < 1000; round++ {
		res, err := d.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group: lua.SinkGroup, Consumer: d.cfg.Consumer,
			Streams: []string{key, "0"}, Count: int64(d.cfg.Batch), Block: -1,
		}).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return total, fmt.Errorf("ordersink: reading pending entries of %s: %w", key, err)
		}
		if len(res) == 0 || len(res[0].Messages) == 0 {
			delete(d.failed, sale)
			delete(d.suspect, sale)
			delete(d.retry, sale)
			return total, nil
		}
		n, err := d.commit(ctx, []batch{{sale, res[0].Messages}})
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// PausedClaimIdle is how long an entry must have sat unacknowledged in
// another consumer before it is claimed while its sale is paused for a
// rebuild (start = 0 with resume set, lua.Pause): the rebuild waits for the
// stream to drain, so a sink frozen or cut off with entries in its pending
// list would hold the paused sale for ClaimIdle. A live sink holds an entry
// for its WAIT's bound and a commit; one claimed from a live sink is stored
// twice at worst, which the inserts make harmless.
const PausedClaimIdle = 3 * time.Second

// claim takes over entries idle for longer than ClaimIdle in other
// consumers (dead ones, presumably), or PausedClaimIdle while the sale is
// paused for a rebuild, and stores them.
func (d *Drainer) claim(ctx context.Context, sale string) (int, error) {
	key := lua.OrdersKey(sale)
	idle := d.cfg.ClaimIdle
	if idle > PausedClaimIdle {
		st, err := d.rdb.HMGet(ctx, lua.SaleKey(sale), lua.FieldStart, lua.FieldResume).Result()
		if err != nil {
			return 0, fmt.Errorf("ordersink: reading the state of %s: %w", sale, err)
		}
		if len(st) == 2 && lua.PauseOf(st[0], st[1]) > 0 {
			idle = PausedClaimIdle
		}
	}
	total, start := 0, "0-0"
	for round := 0; round < 1000; round++ {
		msgs, next, err := d.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{
			Stream: key, Group: lua.SinkGroup, Consumer: d.cfg.Consumer,
			MinIdle: idle, Start: start, Count: int64(d.cfg.Batch),
		}).Result()
		if err != nil {
			return total, fmt.Errorf("ordersink: claiming entries of %s: %w", key, err)
		}
		if len(msgs) > 0 {
			d.log.Info("claimed idle entries", "stream", key, "entries", len(msgs))
			n, err := d.commit(ctx, []batch{{sale, msgs}})
			total += n
			if err != nil {
				return total, err
			}
		}
		if next == "0-0" || next == "" {
			return total, nil
		}
		start = next
	}
	return total, nil
}

// A stream whose last quietAfter polls found nothing is polled only every
// quietEvery-th poll (about once a second at the default Block), so that
// the sales of the past, which stay in the set of sales, cost Redis little;
// a busy stream is polled every time.
const (
	quietAfter = 20
	quietEvery = 20
)

// readNew reads up to Batch entries never delivered to any consumer from
// each sale's stream (all, or only those not quiet, see quietAfter, and not
// in skip), each
// stream by its own XREADGROUP (a cluster refuses one read over keys of
// several slots), all in one pipeline: one round trip per node. It stores
// what it read and reports how many entries it read, whether a stream
// filled a batch, and how many it stored.
func (d *Drainer) readNew(ctx context.Context, all bool, skip map[string]bool) (read int, full bool, stored int, err error) {
	d.polls++
	d.pollsSeen.Add(1)
	sales := d.sales
	if !all && (d.polls%quietEvery != 0 || len(skip) > 0) {
		every := d.polls%quietEvery == 0
		sales = make([]string, 0, len(d.sales))
		for _, s := range d.sales {
			if (every || d.quiet[s] < quietAfter) && !skip[s] {
				sales = append(sales, s)
			}
		}
	}
	cmds := make([]*redis.XStreamSliceCmd, len(sales))
	_, _ = d.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, s := range sales {
			cmds[i] = p.XReadGroup(ctx, &redis.XReadGroupArgs{
				Group: lua.SinkGroup, Consumer: d.cfg.Consumer,
				Streams: []string{lua.OrdersKey(s), ">"}, Count: int64(d.cfg.Batch), Block: -1,
			})
		}
		return nil
	})
	var batches []batch
	var first error
	for i, c := range cmds {
		res, err := c.Result()
		if errors.Is(err, redis.Nil) {
			d.quiet[sales[i]]++
			continue
		}
		if err != nil {
			if first == nil {
				first = fmt.Errorf("ordersink: reading new entries of %s: %w", lua.OrdersKey(sales[i]), err)
			}
			continue
		}
		if len(res) > 0 && len(res[0].Messages) > 0 {
			batches = append(batches, batch{sales[i], res[0].Messages})
			read += len(res[0].Messages)
			full = full || len(res[0].Messages) >= d.cfg.Batch
			d.quiet[sales[i]] = 0
		} else {
			d.quiet[sales[i]]++
		}
	}
	// What was read is in this consumer's pending list whatever else failed:
	// store it now rather than after a backoff.
	stored, err = d.commit(ctx, batches)
	if err == nil {
		err = first
	}
	if err != nil && ctx.Err() != nil && read == 0 {
		return 0, false, 0, nil
	}
	return read, full, stored, err
}
