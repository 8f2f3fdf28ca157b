package buckets

import (
	"context"
	"errors"
	"fmt"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/internal/fencing"
	"github.com/flashgate/flashgate/controlplane/internal/salehash"
	"github.com/flashgate/flashgate/lua"
)

// The recovery of a bucketed sale's slots after a failover, step by step;
// controlplane notices the new primary of each slot and runs these (see
// controlplane/failover_buckets.go for the whole procedure).

// Pause pauses the given buckets of a bucketed sale (lua.Pause: an
// open bucket answers "paused" until its rebuild reopens it).
func (k *Keeper) Pause(ctx context.Context, sale flashgate.Sale, l lua.Layout, buckets []int) error {
	for _, b := range buckets {
		paused, err := lua.Pause.Run(ctx, k.rdb, lua.SaleKeys(l.Tag(b)), fencing.Of(ctx)).Int64()
		if err != nil {
			return fmt.Errorf("pausing bucket %d after a failover: %w", b, err)
		}
		if paused == lua.PauseFenced {
			return fencing.Err(fmt.Sprintf("pausing bucket %d after a failover", b), fencing.Of(ctx))
		}
		if paused == 1 {
			k.log.Warn("new redis primary: bucket paused until rebuilt from the database", "sale", sale.ID, "bucket", b)
		}
	}
	return nil
}

// RecoverSaleHash sets the database's state again on a bucketed sale's own
// hash, which a failover may have rolled back (it holds no stock: a lost
// admission count only lets a few more requests through, and the re-sync
// raises the cap again). A hash Redis lost is the re-sync's to rebuild.
func (k *Keeper) RecoverSaleHash(ctx context.Context, sale flashgate.Sale) error {
	if sale.State == flashgate.StateUpcoming {
		return nil
	}
	n, err := lua.SetState.Run(ctx, k.rdb, lua.SaleKeys(sale.ID), salehash.StateArg(sale.State), fencing.Of(ctx)).Int()
	if err != nil {
		return fmt.Errorf("setting the sale's state again after a failover: %w", err)
	}
	if n == lua.SetStateFenced {
		return fencing.Err("setting the sale's state again after a failover", fencing.Of(ctx))
	}
	return nil
}

// RepairLedger moves the ledger of a bucketed sale past the last move a
// bucket carries (see lua/ledgerrepair.lua). A move whose units a bucket
// freed and none was credited with is recorded in flight to its own giver,
// so the next Rebalance credits them back.
func (k *Keeper) RepairLedger(ctx context.Context, l lua.Layout) error {
	token := fencing.Of(ctx)
	if token < 1 {
		return errors.New("repairing the ledger: no fencing token (not leading)")
	}
	led, err := k.readLedger(ctx, l.Sale)
	if err != nil {
		return err
	}
	stock, err := k.readStock(ctx, l, nil)
	if err != nil {
		return err
	}
	var top int64
	for _, st := range stock {
		top = max(top, st.sseq, st.gseq)
	}
	if top <= led.seq {
		return nil
	}
	credited, giver := false, -1
	for b, st := range stock {
		if st.found && st.gseq == top {
			credited = true
		}
		if st.found && st.sseq == top {
			giver = b
		}
	}
	phase, from, freed, variant := "", 0, int64(0), ""
	if !credited && giver >= 0 {
		phase, from, freed, variant = "grant", giver, stock[giver].freed, stock[giver].svar
	}
	code, err := lua.LedgerRepair.Run(ctx, k.rdb, lua.LedgerKeys(l.Sale), token, top, phase, from, from, freed, variant).Int64()
	if err != nil {
		return fmt.Errorf("repairing the ledger: %w: %w", flashgate.ErrUnavailable, err)
	}
	if code == -1 {
		return errStaleLeader
	}
	k.log.Warn("bucket ledger moved past the moves its primary lost", "sale", l.Sale, "was", led.seq, "now", top, "phase", phase)
	return nil
}

// MarkForRebuild marks the given (paused, drained) buckets of a bucketed
// sale for their rebuild by the next Resync: each one's total is computed
// as for a bucket Redis lost (what the other buckets and the move in flight
// do not hold), its reserved set below every row (which sends the re-sync
// down its restore path: buyers and releases from the rows, booked from the
// snapshot), and its move versions those of the ledger (markRebuilt). A
// bucket the new primary lacks is left to Resync to rebuild whole.
func (k *Keeper) MarkForRebuild(ctx context.Context, sale flashgate.Sale, l lua.Layout, buckets []int) error {
	bs, ok := k.store.(FigureStore)
	if !ok {
		return fmt.Errorf("rebuilding bucketed sale %s: the store keeps no bucket figures", sale.ID)
	}
	figs, vfigs, err := bucketFigures(ctx, bs, sale, l.N())
	if err != nil {
		return fmt.Errorf("reading figures: %w", err)
	}
	stock, err := k.readStock(ctx, l, variantIDs(sale))
	if err != nil {
		return err
	}
	led, err := k.readLedger(ctx, sale.ID)
	if err != nil {
		return err
	}
	present := map[int]bool{}
	for _, b := range buckets {
		present[b] = stock[b].found
		stock[b].found = false
	}
	totals, vtotals := k.rebuildShares(sale, stock, led, figs, vfigs, nil)
	granted := led.granted(stock)
	for _, b := range buckets {
		if !present[b] {
			continue
		}
		marks := []any{lua.FieldTotal, totals[b], lua.FieldReserved, -1}
		for i, v := range sale.Variants {
			// Each variant's booked comes from the rows too (lua.Resync).
			marks = append(marks, lua.VariantField(v.ID, lua.FieldTotal), vtotals[b][i], lua.VariantField(v.ID, lua.FieldReserved), -1)
		}
		if err := fencing.Mark(ctx, k.rdb, l.Tag(b), marks...); err != nil {
			return fmt.Errorf("marking bucket %d for its rebuild: %w", b, err)
		}
		if err := k.markRebuilt(ctx, l, b, led, granted); err != nil {
			return err
		}
	}
	return nil
}
