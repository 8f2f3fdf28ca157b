package ordersink

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/lua"
)

// Backlog returns the number of reserved orders not yet in the database:
// the sum of the lengths of the sale streams (committed entries are removed).
func (d *Drainer) Backlog(ctx context.Context) (int64, error) {
	sales, err := d.rdb.SMembers(ctx, lua.SalesKey()).Result()
	if err != nil {
		return 0, fmt.Errorf("ordersink: listing sales: %w", err)
	}
	n, err := d.backlog(ctx, sales)
	if err != nil {
		return 0, fmt.Errorf("ordersink: backlog: %w", err)
	}
	return n, nil
}

func (d *Drainer) backlog(ctx context.Context, sales []string) (int64, error) {
	lens, err := d.streamLens(ctx, sales)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, l := range lens {
		n += l
	}
	return n, nil
}

// streamLens returns the length of each sale's stream, by one pipeline of
// XLEN.
func (d *Drainer) streamLens(ctx context.Context, sales []string) ([]int64, error) {
	if len(sales) == 0 {
		return nil, nil
	}
	cmds := make([]*redis.IntCmd, len(sales))
	_, err := d.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, s := range sales {
			cmds[i] = p.XLen(ctx, lua.OrdersKey(s))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	lens := make([]int64, len(cmds))
	for i, c := range cmds {
		lens[i] = c.Val()
	}
	return lens, nil
}

// longestStream returns the length of the longest sale stream.
func (d *Drainer) longestStream(ctx context.Context) (int64, error) {
	lens, err := d.streamLens(ctx, d.sales)
	if err != nil {
		return 0, fmt.Errorf("ordersink: XLEN: %w", err)
	}
	var longest int64
	for _, l := range lens {
		longest = max(longest, l)
	}
	return longest, nil
}
