package buckets

import (
	"context"
	"fmt"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/lua"
)

// Rebalance runs one rebalancing step of a bucketed sale under fencing
// token (the leader's; the loop passes its lease's): it first settles stale
// spill claims (SettleClaims), then finishes a
// move a crashed leader left in the ledger, then moves half the difference
// of unheld units from the bucket with the most to the bucket with the
// fewest when they differ by 2 or more. A move shrinks the giving bucket
// first (lua.Shrink: never below its booked, answers what it freed), then
// credits the taking one (lua.Grant: once per move, refused to a stale
// token), each step recorded in the ledger (lua.Ledger), so the buckets'
// totals never add up to more than the sale's: a crash strands units until
// the next step, never oversells. When no two buckets differ by 2, one unit
// goes to an empty bucket whose buyers were turned away (lua.FieldWant,
// counted by the inventory) from a bucket that can spare it. It returns the units this call credited
// (a finished move's included). An unbucketed sale moves nothing. The
// caller checks token and holds the sale's re-sync lock.
func (k *Keeper) Rebalance(ctx context.Context, sale flashgate.Sale, token int64) (moved int64, err error) {
	if !sale.Bucketed() {
		return 0, nil
	}
	id := sale.ID
	l := Layout(sale)
	// Stale spill claims first: a claim left by a crash keeps its user
	// from buying.
	if _, _, err := k.SettleClaims(ctx, l); err != nil {
		return 0, err
	}
	led, err := k.readLedger(ctx, id)
	if err != nil {
		return 0, err
	}
	if led.inFlight {
		return k.finishMove(ctx, l, token, led)
	}
	variants := variantIDs(sale)
	stock, err := k.readStock(ctx, l, variants)
	if err != nil {
		return 0, err
	}
	for _, st := range stock {
		if !st.found {
			return 0, nil // a re-sync rebuilds it first
		}
	}
	giver, taker, want, variant := -1, -1, int64(0), ""
	if len(variants) == 0 {
		giver, taker, want = pickMove(stock, -1)
	} else {
		// A sale sold in variants moves one variant's units at a time: the
		// variant whose buckets differ most, else the first whose last
		// units an empty bucket's buyers of it want.
		for i, id := range variants {
			if g, t, w := pickMove(stock, i); g >= 0 && (giver < 0 || w > want) {
				giver, taker, want, variant = g, t, w, id
			}
		}
	}
	if giver < 0 {
		return 0, nil
	}
	v, err := lua.Ledger.Run(ctx, k.rdb, lua.LedgerKeys(id), "begin", token, giver, taker, want, variant).Slice()
	if err != nil {
		return 0, fmt.Errorf("recording a move: %w: %w", flashgate.ErrUnavailable, err)
	}
	if code, _ := v[0].(int64); code == 0 && len(v) == 2 {
		seq, _ := v[1].(int64)
		// The taker's demand is answered by this move.
		field := lua.FieldWant
		if variant != "" {
			field = lua.VariantField(variant, lua.FieldWant)
		}
		if err := k.rdb.HSet(ctx, lua.SaleKey(l.Tag(taker)), field, 0).Err(); err != nil {
			return 0, fmt.Errorf("rebalancing: %w: %w", flashgate.ErrUnavailable, err)
		}
		return k.finishMove(ctx, l, token, ledgerState{seq: seq, inFlight: true, phase: "shrink",
			from: int64(giver), to: int64(taker), want: want, variant: variant})
	}
	led, err = parseLedger(v)
	if err != nil {
		return 0, err
	}
	return k.finishMove(ctx, l, token, led)
}

// finishMove carries the move in led through its remaining steps.
func (k *Keeper) finishMove(ctx context.Context, l lua.Layout, token int64, led ledgerState) (int64, error) {
	if led.from < 0 || led.from >= int64(l.N()) || led.to < 0 || led.to >= int64(l.N()) {
		return 0, fmt.Errorf("ledger of sale %s: move %d between buckets %d and %d of %d", l.Sale, led.seq, led.from, led.to, l.N())
	}
	ledger := lua.LedgerKeys(l.Sale)
	freed := led.freed
	if led.phase == "shrink" {
		var err error
		freed, err = lua.Shrink.Run(ctx, k.rdb, lua.SaleKeys(l.Tag(int(led.from))), led.seq, led.want, led.variant).Int64()
		if err != nil {
			return 0, fmt.Errorf("shrinking bucket %d: %w: %w", led.from, flashgate.ErrUnavailable, err)
		}
		v, err := lua.Ledger.Run(ctx, k.rdb, ledger, "shrunk", token, led.seq, freed).Int64Slice()
		if err != nil {
			return 0, fmt.Errorf("recording a shrink: %w: %w", flashgate.ErrUnavailable, err)
		}
		if v[0] == -1 {
			return 0, errStaleLeader
		}
		if v[0] != 0 {
			return 0, fmt.Errorf("recording a shrink: ledger answered %v", v)
		}
	}
	code, err := lua.Grant.Run(ctx, k.rdb, lua.SaleKeys(l.Tag(int(led.to))), token, led.seq, freed, led.variant).Int64()
	if err != nil {
		return 0, fmt.Errorf("crediting bucket %d: %w: %w", led.to, flashgate.ErrUnavailable, err)
	}
	switch code {
	case -1:
		return 0, errStaleLeader
	case -2:
		// The taking bucket is gone: the move stays in flight, and the
		// bucket's rebuild leaves these units out of its share.
		return 0, nil
	}
	v, err := lua.Ledger.Run(ctx, k.rdb, ledger, "done", token, led.seq).Int64Slice()
	if err != nil {
		return 0, fmt.Errorf("closing a move: %w: %w", flashgate.ErrUnavailable, err)
	}
	if v[0] == -1 {
		return 0, errStaleLeader
	}
	if code == 1 {
		k.log.Debug("units moved between buckets", "sale", l.Sale, "from", led.from, "to", led.to, "units", freed, "variant", led.variant, "move", led.seq)
		return freed, nil
	}
	return 0, nil
}

// pickMove chooses a move of variant i (-1: the one stock) between stock's
// buckets by their unheld units of it: half the difference from the bucket
// with the most to the bucket with the fewest when they differ by 2 or
// more; near the end, one unit to an empty bucket whose buyers of it were
// turned away (lua.FieldWant, counted by the inventory) from a bucket that
// has one and no such buyers, or has two or more. giver is -1 when no move
// is due.
func pickMove(stock []bucketStock, i int) (giver, taker int, want int64) {
	free := func(st bucketStock) int64 {
		if i < 0 {
			return st.free()
		}
		return st.vfree(i)
	}
	giver, taker = -1, -1
	for b, st := range stock {
		if giver < 0 || free(st) > free(stock[giver]) {
			giver = b
		}
		if taker < 0 || free(st) < free(stock[taker]) {
			taker = b
		}
	}
	if giver < 0 {
		return -1, -1, 0
	}
	if want = (free(stock[giver]) - free(stock[taker])) / 2; want >= 1 {
		return giver, taker, want
	}
	taker, giver = -1, -1
	for b, st := range stock {
		if free(st) == 0 && st.demand(i) > 0 && (taker < 0 || st.demand(i) > stock[taker].demand(i)) {
			taker = b
		}
	}
	for b, st := range stock {
		if b != taker && (free(st) >= 2 || free(st) == 1 && st.demand(i) == 0) && (giver < 0 || free(st) > free(stock[giver])) {
			giver = b
		}
	}
	if taker < 0 || giver < 0 {
		return -1, -1, 0
	}
	return giver, taker, 1
}
