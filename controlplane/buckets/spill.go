package buckets

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/lua"
)

// maxClaimsPerPass bounds the stale claims one bucket settles per pass.
const maxClaimsPerPass = 100

// SettleClaims settles the spill claims of the bucketed sale of layout l
// that are older than Config.SpillClaimAge (a spill whose inventory crashed or lost Redis
// between its steps; see lua/spill.go). For each, the order the claim names
// is looked up, and fenced, in every other bucket (lua.SpillCheck: after
// it no late spill reserve of the order can succeed) and then in the
// database: an order live somewhere gets its final marker (lua.Finalize),
// an order live nowhere loses its claim (lua.Unclaim), and the user may buy
// again. A claim is left for a later pass while some bucket is missing
// from Redis (its rebuild comes first). It returns the claims finalised
// and cleared. Any control plane may run it: every step is idempotent.
func (k *Keeper) SettleClaims(ctx context.Context, l lua.Layout) (finalised, cleared int, err error) {
	cutoff := k.clock.Now().Add(-k.spillClaimAge).UnixMilli()
	for h := range l.N() {
		htag := l.Tag(h)
		users, err := k.rdb.ZRangeArgs(ctx, redis.ZRangeArgs{Key: lua.ClaimsKey(htag), Start: "-inf",
			Stop: strconv.FormatInt(cutoff, 10), ByScore: true, Count: maxClaimsPerPass}).Result()
		if err != nil {
			return finalised, cleared, fmt.Errorf("reading spill claims: %w: %w", flashgate.ErrUnavailable, err)
		}
		for _, user := range users {
			f, c, err := k.settleClaim(ctx, l, h, user)
			if err != nil {
				return finalised, cleared, err
			}
			finalised += f
			cleared += c
		}
	}
	if finalised+cleared > 0 {
		k.log.Info("settled stale spill claims", "sale", l.Sale, "finalised", finalised, "cleared", cleared)
	}
	return finalised, cleared, nil
}

// settleClaim settles user's stale claim in home bucket h.
func (k *Keeper) settleClaim(ctx context.Context, l lua.Layout, h int, user string) (finalised, cleared int, err error) {
	htag := l.Tag(h)
	v, err := k.rdb.HGet(ctx, lua.BuyersKey(htag), user).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, 0, fmt.Errorf("reading a spill claim: %w: %w", flashgate.ErrUnavailable, err)
	}
	order, _, final, ok := lua.ParseMarker(v)
	if !ok || final {
		// No claim pending: Unclaim drops the stale claims entry only.
		if err := lua.Unclaim.Run(ctx, k.rdb, lua.UnclaimKeys(htag), user, "").Err(); err != nil {
			return 0, 0, fmt.Errorf("clearing a spill claim: %w: %w", flashgate.ErrUnavailable, err)
		}
		return 0, 0, nil
	}
	where := -1
	for b := range l.N() {
		if b == h {
			continue
		}
		code, err := lua.SpillCheck.Run(ctx, k.rdb, lua.ReleaseKeys(l.Tag(b)), user, order).Int64()
		if err != nil {
			return 0, 0, fmt.Errorf("checking a spill bucket: %w: %w", flashgate.ErrUnavailable, err)
		}
		switch code {
		case -1:
			return 0, 0, nil // a bucket is gone: its rebuild comes first
		case 1:
			where = b
		}
		if where >= 0 {
			break
		}
	}
	if where < 0 {
		// Not live in Redis: the database may still hold it (a row whose
		// bucket lost its buyer entry).
		o, err := k.store.Order(ctx, order)
		switch {
		case err == nil && o.SaleID == l.Sale && o.Status.Live() && o.Bucket != h:
			where = o.Bucket
		case err != nil && !errors.Is(err, flashgate.ErrNotFound):
			return 0, 0, fmt.Errorf("reading a spilled order: %w", err)
		}
	}
	if where >= 0 {
		if err := lua.Finalize.Run(ctx, k.rdb, lua.MarkerKeys(htag), user, order, where).Err(); err != nil {
			return 0, 0, fmt.Errorf("finalising a spill claim: %w: %w", flashgate.ErrUnavailable, err)
		}
		return 1, 0, nil
	}
	n, err := lua.Unclaim.Run(ctx, k.rdb, lua.UnclaimKeys(htag), user, order).Int()
	if err != nil {
		return 0, 0, fmt.Errorf("clearing a spill claim: %w: %w", flashgate.ErrUnavailable, err)
	}
	return 0, n, nil
}

// unmarkSpilled clears the home markers of released orders that were
// reserved outside their buyer's home bucket (lua.Unmark), after their
// units went back to their own buckets.
func (k *Keeper) unmarkSpilled(ctx context.Context, l lua.Layout, orders []flashgate.Order) error {
	byHome := make([][]any, l.N())
	for _, o := range orders {
		h := l.Home(o.UserID)
		if o.Bucket == h || o.Bucket < 0 || o.Bucket >= l.N() {
			continue
		}
		byHome[h] = append(byHome[h], o.UserID, o.ID, o.Bucket)
	}
	for h, args := range byHome {
		if args == nil {
			continue
		}
		if err := lua.Unmark.Run(ctx, k.rdb, lua.MarkerKeys(l.Tag(h)), args...).Err(); err != nil {
			return fmt.Errorf("clearing spill markers: %w: %w", flashgate.ErrUnavailable, err)
		}
	}
	return nil
}
