package buckets

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/internal/fencing"
	"github.com/flashgate/flashgate/controlplane/internal/salehash"
	"github.com/flashgate/flashgate/lua"
)

// Resync is controlplane's Resync for a bucketed sale, whose id and bucket
// tags the caller has added to the set the order sinks drain: releases go
// back to their orders' buckets, then each bucket runs lua.Resync from one database
// snapshot grouped by bucket (FigureStore; each bucket's releases counter
// read before it), and the sale's own hash gets
// its admission cap raised while units remain. A bucket Redis lost is
// rebuilt with its share (after its buyers and released orders are
// restored from every row); a lost sale hash is prepared again with the
// layout and the row's state. The figures returned are sums over buckets.
//
// The per-sale count of delivered releases (release_sync) is not checked
// per bucket: a bucket is restored when it is missing or its reserved is
// below the database's units of its rows.
func (k *Keeper) Resync(ctx context.Context, sale flashgate.Sale) (before, after salehash.ResyncFigures, err error) {
	bs, ok := k.store.(FigureStore)
	if !ok {
		return before, after, fmt.Errorf("re-syncing bucketed sale %s: the store keeps no bucket figures", sale.ID)
	}
	l := Layout(sale)
	tags := l.Tags()
	variants := variantIDs(sale)
	// Each bucket's releases counter and rebuild mark come before the
	// snapshot, so that its script knows whether a release reached the
	// bucket after the snapshot may have been taken, and whether the
	// bucket was rebuilt since by another pass (which this pass then does
	// not reopen; lua/resync.lua's ARGV[13]).
	rels, err := salehash.ResyncMarks(ctx, k.rdb, tags)
	if err != nil {
		return before, after, fmt.Errorf("re-syncing: %w", err)
	}
	// The pending retakes and the figures, read in one database snapshot
	// as the one-bucket re-sync reads them (controlplane/resync): a bucket
	// rebuilt below holds the units of those of its orders (its final
	// lua.Resync), so that a settler past its retake that honours after a
	// Redis loss does not commit a unit the rebuilt bucket sold again.
	var pending []flashgate.Order
	var figs []flashgate.SaleFigures
	var vfigs []map[string]flashgate.SaleFigures
	err = k.store.Snapshot(ctx, func(ctx context.Context) error {
		var err error
		if pending, err = k.store.PendingRetakes(ctx, sale.ID); err != nil {
			return fmt.Errorf("reading pending retakes: %w", err)
		}
		if figs, vfigs, err = bucketFigures(ctx, bs, sale, l.N()); err != nil {
			return fmt.Errorf("reading figures: %w", err)
		}
		return nil
	})
	if err != nil {
		return before, after, err
	}
	if err := k.deliverReleases(ctx, l); err != nil {
		return before, after, err
	}
	if err := salehash.DeliverOwed(ctx, k.rdb, k.store, sale); err != nil {
		return before, after, err
	}
	// The sale's own hash: prepared again (with its layout) if Redis lost it.
	created, err := lua.Prepare.Run(ctx, k.rdb, lua.SaleKeys(sale.ID),
		sale.Total, flashgate.AdmitCap(sale.Total, sale.AdmitRatio), salehash.PerUser(sale), sale.PriceCents, l.String(), "", salehash.VariantSpec(sale.Variants, nil, nil)).Int()
	if err != nil {
		return before, after, fmt.Errorf("re-syncing: %w: %w", flashgate.ErrUnavailable, err)
	}
	if created == 1 && sale.State != flashgate.StateUpcoming {
		n, err := lua.SetState.Run(ctx, k.rdb, lua.SaleKeys(sale.ID), salehash.StateArg(sale.State), fencing.Of(ctx)).Int()
		if err != nil {
			return before, after, fmt.Errorf("re-syncing: %w: %w", flashgate.ErrUnavailable, err)
		}
		if n == lua.SetStateFenced {
			return before, after, fencing.Err("re-syncing sale "+sale.ID, fencing.Of(ctx))
		}
	}
	before.Missing = created == 1
	// A bucket Redis lost is rebuilt with what no other bucket and no move
	// in flight holds (see rebuildTotals).
	stock, err := k.readStock(ctx, l, variants)
	if err != nil {
		return before, after, err
	}
	led, err := k.readLedger(ctx, sale.ID)
	if err != nil {
		return before, after, err
	}
	if led.inFlight && int(led.to) < len(stock) && !stock[led.to].found {
		// The taking bucket of a move in flight is gone, and whether it was
		// credited is gone with it: the move ends here. Its giver shrinks no
		// further (lua.Shrink of the move for 0: what it freed stays freed),
		// and the rebuilds share out everything no present bucket holds,
		// those units included, with the move marked done in every rebuilt
		// bucket (its grant then changes nothing).
		if int(led.from) < len(stock) && stock[led.from].found {
			if err := lua.Shrink.Run(ctx, k.rdb, lua.SaleKeys(l.Tag(int(led.from))), led.seq, 0, led.variant).Err(); err != nil {
				return before, after, fmt.Errorf("re-syncing: %w: %w", flashgate.ErrUnavailable, err)
			}
			if stock, err = k.readStock(ctx, l, variants); err != nil {
				return before, after, err
			}
		}
		led.inFlight = false
	}
	rebuild, vrebuild := k.rebuildShares(sale, stock, led, figs, vfigs, pending)
	// A bucket paused for its rebuild reopens only once the buckets'
	// totals fit the sale's (settlePlans): two passes at once may each
	// have rebuilt some of them from plans of their own.
	marks := make([]string, len(rels))
	for b, r := range rels {
		marks[b] = markOf(r)
	}
	reopen, err := k.settlePlans(ctx, sale, l, stock, led, figs, vfigs, pending, marks)
	if err != nil {
		return before, after, err
	}
	if !reopen {
		for b, r := range rels {
			rels[b] = withMark(r, noMark)
		}
	}
	restored := false
	restoreArgs := map[string]string{} // tag → its final run's ARGV[9] once restored
	// lostInPass are the buckets read present above and rebuilt below:
	// Redis lost them during this pass, after their shares were computed
	// (which give a present bucket nothing), so each was rebuilt with
	// total 0 and needs its share computed again (see after the loop).
	var lostInPass []int
	ratio := strconv.FormatFloat(salehash.AdmitRatio(sale), 'f', -1, 64)
	for b, t := range tags {
		keys := lua.SaleKeys(t)
		run := func(restore string, held []flashgate.Order) ([]int64, error) {
			args := []any{figs[b].LiveUnits, figs[b].PersistedUnits,
				rebuild[b], salehash.PerUser(sale), sale.PriceCents,
				string(sale.State), ratio, 0, restore, fencing.Of(ctx)}
			spec := ""
			if len(variants) > 0 {
				spec = salehash.VariantSpec(sale.Variants, vrebuild[b], vfigs[b])
			}
			args = append(args, "", spec, rels[b])
			ks, args := salehash.HeldArgs(t, keys, args, held)
			return lua.Resync.Run(ctx, k.rdb, ks, args...).Int64Slice()
		}
		v, err := run("0", nil)
		if err == nil && len(v) == 1 && v[0] == lua.ResyncRestore {
			if !restored {
				restoring, err := k.restore(ctx, l)
				if err != nil {
					return before, after, err
				}
				restored = true
				// Each bucket's restore is marked, under the id its pages
				// carried, and its final run checks the mark (see
				// controlplane/resync).
				for i, tag := range tags {
					arg, err := salehash.MarkRestored(ctx, k.rdb, tag, restoring[i])
					if err != nil {
						return before, after, err
					}
					restoreArgs[tag] = arg
				}
				// The pending retakes again, and those of the first read
				// honoured since: a row written after that read may belong
				// to a retake the lost bucket made, one refunded since is
				// not held (see controlplane/resync).
				late, err := k.store.PendingRetakes(ctx, sale.ID)
				if err != nil {
					return before, after, fmt.Errorf("reading pending retakes: %w", err)
				}
				honoured, err := k.store.HonouredRetakes(ctx, sale.ID)
				if err != nil {
					return before, after, fmt.Errorf("reading honoured retakes: %w", err)
				}
				pending = salehash.RetakesToHold(pending, late, honoured)
				// The shares of the buckets still to rebuild again, with
				// room for the retakes held now: a row of the second read
				// (one the first did not see) held in a bucket whose share
				// left it no room was capped away there, and its unit sold
				// in another bucket (a reviewer's window: an oversell).
				rebuild, vrebuild = k.rebuildShares(sale, stock, led, figs, vfigs, pending)
			}
			// The bucket's pending retakes are held and counted by its
			// final script, in one step (see controlplane/resync).
			v, err = run(restoreArgs[t], inBucket(pending, b))
			if err == nil && len(v) == 1 && v[0] == lua.ResyncRestore {
				return before, after, salehash.ErrLostAgain("bucket " + t)
			}
		}
		if err != nil {
			return before, after, fmt.Errorf("re-syncing bucket %s: %w: %w", t, flashgate.ErrUnavailable, err)
		}
		if len(v) == 1 && v[0] == lua.ResyncFenced {
			return before, after, fencing.Err("re-syncing bucket "+t, fencing.Of(ctx))
		}
		if len(v) != 10 {
			return before, after, fmt.Errorf("re-syncing bucket %s: script returned %d values", t, len(v))
		}
		if v[0] == 1 {
			before.Missing = true
			if stock[b].found {
				lostInPass = append(lostInPass, b)
			}
			if err := k.markRebuilt(ctx, l, b, led, led.granted(stock)); err != nil {
				return before, after, err
			}
			k.log.Warn("bucket rebuilt in redis from the database", "sale", sale.ID, "bucket", b, "booked", v[5], "total", v[9])
		}
		before.Booked += v[1]
		before.Reserved += v[2]
		after.Booked += v[5]
		after.Reserved += v[6]
		after.Total += v[9]
		if v[0] == 0 {
			before.Total += v[9]
		}
	}
	if len(lostInPass) > 0 {
		// A bucket lost after readStock was rebuilt with the share of a
		// present bucket (none): its stock, and with variants each
		// variant's booked (clamped to its total 0), would be gone for
		// good, since later passes find it present. It is still paused
		// (resume = 1); MarkForRebuild gives it its share of what the
		// other buckets do not hold and sends the next pass down its
		// restore path, which reopens it with booked from the rows.
		k.log.Warn("bucket lost during a re-sync pass: its share is computed again", "sale", sale.ID, "buckets", lostInPass)
		if err := k.MarkForRebuild(ctx, sale, l, lostInPass); err != nil {
			return before, after, err
		}
	}
	// Admission: the sale's own hash counts for the whole sale.
	h, err := k.rdb.HMGet(ctx, lua.SaleKey(sale.ID), lua.FieldCount, lua.FieldAccess).Result()
	if err != nil {
		return before, after, fmt.Errorf("re-syncing: %w: %w", flashgate.ErrUnavailable, err)
	}
	count, access := lua.Int(h[0]), lua.Int(h[1])
	before.AdmissionCap, before.Admitted = count, access
	after.AdmissionCap, after.Admitted = count, access
	if rem := sale.Total - after.Booked; rem > 0 {
		want := access + int64(float64(rem)*salehash.AdmitRatio(sale)+0.999999)
		if want > count {
			if err := fencing.Mark(ctx, k.rdb, sale.ID, lua.FieldCount, want); err != nil {
				return before, after, fmt.Errorf("re-syncing: %w", err)
			}
			after.AdmissionCap = want
		}
	}
	before.Remaining = max(before.Total-before.Booked, 0)
	after.Remaining = max(sale.Total-after.Booked, 0)
	return before, after, nil
}

// deliverReleases gives every bucket the releases the database
// queued for its sale, each order to its own bucket (lua.ReleaseBatch,
// idempotent per order), and acknowledges them.
func (k *Keeper) deliverReleases(ctx context.Context, l lua.Layout) error {
	for range 1000 {
		pending, _, err := k.store.PendingReleases(ctx, l.Sale, salehash.ReleaseChunk)
		if err != nil {
			return fmt.Errorf("reading pending releases: %w", err)
		}
		if len(pending) == 0 {
			return nil
		}
		byBucket := make([][]any, l.N())
		ids := make([]string, 0, len(pending))
		for _, o := range pending {
			if o.Bucket < 0 || o.Bucket >= l.N() {
				k.log.Error("queued release of an order outside the sale's buckets", "sale", l.Sale, "order", o.ID, "bucket", o.Bucket)
				continue
			}
			if byBucket[o.Bucket] == nil {
				byBucket[o.Bucket] = []any{":" + strconv.FormatInt(fencing.Of(ctx), 10)}
			}
			byBucket[o.Bucket] = append(byBucket[o.Bucket], o.ID, o.UserID, o.Quantity, o.Variant)
		}
		for b, args := range byBucket {
			if args == nil {
				continue
			}
			t := l.Tag(b)
			res, err := lua.ReleaseBatch.Run(ctx, k.rdb, lua.ReleaseKeys(t), args...).Int64Slice()
			if err != nil {
				return fmt.Errorf("delivering releases: %w: %w", flashgate.ErrUnavailable, err)
			}
			if len(res) == 3 && res[0] == lua.ReleaseBatchFenced {
				return fencing.Err("delivering releases", fencing.Of(ctx))
			}
			if len(res) != 3 || res[0] != lua.ReleaseBatchDone {
				// The bucket is gone: its rebuild restores the released set
				// from the rows; the pending stays until it is delivered.
				return nil
			}
			for i := 1; i < len(args); i += 4 { // order, user, quantity, variant
				ids = append(ids, args[i].(string))
			}
		}
		// Spilled orders' home markers go once their units are back.
		if err := k.unmarkSpilled(ctx, l, pending); err != nil {
			return err
		}
		if _, err := k.store.ReleasesDelivered(ctx, l.Sale, ids, fencing.Of(ctx)); err != nil {
			return fmt.Errorf("acknowledging releases: %w", err)
		}
		if len(pending) < salehash.ReleaseChunk {
			return nil
		}
	}
	return fmt.Errorf("re-syncing sale %s: %w", l.Sale, salehash.ErrReleaseBacklog)
}

// restore puts every released and live row of a bucketed sale back
// into its own bucket's released set and buyers hash, a page at a time,
// released rows first (lua.Restore; a bucket Redis kept is unchanged by it),
// and returns each bucket's restore (salehash.BeginRestore), opened
// before its first page's write (as controlplane/resync's Restore), or at
// the end for a bucket with none: a page is refused once its bucket's
// hash holds another or none (Redis lost the bucket again, the pages
// before with it), and then restore returns the error of
// salehash.ErrLostAgain.
// A row reserved outside its buyer's home bucket (a spill) also restores
// its final marker in the home bucket, as a buyer entry whose value is the
// marker (lua.SpillMarker): a released row's marker joins the home's
// released set and goes from its buyers, a live row's is set unless so
// released.
func (k *Keeper) restore(ctx context.Context, l lua.Layout) ([]*salehash.Restoring, error) {
	restoring := make([]*salehash.Restoring, l.N())
	begin := func(b int) error {
		if restoring[b] != nil {
			return nil
		}
		var err error
		restoring[b], err = salehash.BeginRestore(ctx, k.rdb, l.Tag(b))
		return err
	}
	for _, st := range []flashgate.OrderStatus{flashgate.StatusCancelled, flashgate.StatusExpired, flashgate.StatusRefunded,
		flashgate.StatusPendingPayment, flashgate.StatusPaid} {
		released := !st.Live()
		after := ""
		for {
			page, err := k.store.OrdersPage(ctx, l.Sale, st, after, salehash.ReleaseChunk)
			if err != nil {
				return nil, fmt.Errorf("reading orders to restore: %w", err)
			}
			if len(page) == 0 {
				break
			}
			byBucket := make([][]any, l.N())
			for _, o := range page {
				if o.Bucket < 0 || o.Bucket >= l.N() {
					continue
				}
				if byBucket[o.Bucket] == nil {
					byBucket[o.Bucket] = []any{fencing.Of(ctx), "", 0}
				}
				byBucket[o.Bucket] = append(byBucket[o.Bucket], o.UserID, o.ID)
				// A spilled order's marker in its buyer's home bucket
				// comes back with a live row (so a rebuilt home never
				// lets the user buy again) and goes with a released one.
				if h := l.Home(o.UserID); h != o.Bucket {
					if byBucket[h] == nil {
						byBucket[h] = []any{fencing.Of(ctx), "", 0}
					}
					byBucket[h] = append(byBucket[h], o.UserID, lua.SpillMarker(o.ID, o.Bucket))
				}
			}
			for b, args := range byBucket {
				if args == nil {
					continue
				}
				if err := begin(b); err != nil {
					return nil, err
				}
				args[1] = restoring[b].Page()
				if released {
					args[2] = (len(args) - 3) / 2
				}
				t := l.Tag(b)
				n, err := lua.Restore.Run(ctx, k.rdb, lua.RestoreKeys(t), args...).Int()
				if err != nil {
					return nil, fmt.Errorf("restoring buyers: %w: %w", flashgate.ErrUnavailable, err)
				}
				switch n {
				case lua.RestoreFenced:
					return nil, fencing.Err("restoring buyers", fencing.Of(ctx))
				case lua.RestoreLost:
					return nil, salehash.ErrLostAgain("bucket " + t)
				}
			}
			if len(page) < salehash.ReleaseChunk {
				break
			}
			after = page[len(page)-1].ID
		}
	}
	for b := range restoring {
		if err := begin(b); err != nil {
			return nil, err
		}
	}
	return restoring, nil
}

// markRebuilt gives a rebuilt bucket the ledger's move versions and fence:
// moves the ledger closed are never credited or shrunk again, a move in
// flight to it is still credited, a move in flight from it that was not
// credited yet still shrinks it (one that was answers 0 freed), and a
// stale leader's grant stays refused.
func (k *Keeper) markRebuilt(ctx context.Context, l lua.Layout, b int, led ledgerState, granted bool) error {
	fence, err := k.rdb.HGet(ctx, lua.LedgerKey(l.Sale), lua.FieldFence).Int64() // the ledger keeps its token under the same field
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("re-syncing: %w: %w", flashgate.ErrUnavailable, err)
	}
	gseq, sseq := led.seq, led.seq
	if led.inFlight && int(led.to) == b {
		gseq--
	}
	if led.inFlight && led.phase == "shrink" && int(led.from) == b && !granted {
		sseq--
	}
	err = fencing.Mark(ctx, k.rdb, l.Tag(b), lua.FieldGrantSeq, gseq, lua.FieldShrinkSeq, sseq,
		lua.FieldShrinkFreed, 0, lua.FieldFence, max(fence, fencing.Of(ctx)))
	if err != nil {
		return fmt.Errorf("re-syncing: %w", err)
	}
	return nil
}

// bucketFigures reads a bucketed sale's figures per bucket from one
// snapshot; for a sale sold in variants, also per bucket and variant id.
func bucketFigures(ctx context.Context, bs FigureStore, sale flashgate.Sale, n int) ([]flashgate.SaleFigures, []map[string]flashgate.SaleFigures, error) {
	if !sale.HasVariants() {
		figs, err := bs.BucketFigures(ctx, sale.ID, n)
		return figs, nil, err
	}
	return bs.BucketVariantFigures(ctx, sale.ID, n)
}

// rebuildShares are the totals a bucket Redis lost is rebuilt with (see
// rebuildTotals), and for a sale sold in variants each one's per variant
// in the sale's order (rebuildVariantTotals); stock was read with the
// sale's variant ids. The units of the pending retakes (pending) count in
// their buckets' shares after the live units, so that the hold of a
// rebuilt bucket fits in its total.
func (k *Keeper) rebuildShares(sale flashgate.Sale, stock []bucketStock, led ledgerState, figs []flashgate.SaleFigures, vfigs []map[string]flashgate.SaleFigures, pending []flashgate.Order) ([]int64, [][]int64) {
	live, held := liveAndHeld(sale, len(stock), figs, vfigs, pending)
	if !sale.HasVariants() {
		l1, h1 := make([]int64, len(stock)), make([]int64, len(stock))
		for b := range stock {
			l1[b], h1[b] = live[b][0], held[b][0]
		}
		return rebuildTotals(sale.Total, stock, led, l1, h1), nil
	}
	totals := make([]int64, len(sale.Variants))
	for i, v := range sale.Variants {
		totals[i] = v.Total
	}
	per, sums := rebuildVariantTotals(variantIDs(sale), totals, stock, led, live, held)
	return sums, per
}

// liveAndHeld are, for each of n buckets, its live units in the snapshot
// (figs, or vfigs for a sale sold in variants) and the units of its
// pending retakes (pending): live[b][i] and held[b][i] of variant i in the
// sale's order, or of its one stock (i = 0).
func liveAndHeld(sale flashgate.Sale, n int, figs []flashgate.SaleFigures, vfigs []map[string]flashgate.SaleFigures, pending []flashgate.Order) (live, held [][]int64) {
	dims := max(len(sale.Variants), 1)
	live, held = make([][]int64, n), make([][]int64, n)
	for b := range n {
		live[b], held[b] = make([]int64, dims), make([]int64, dims)
		switch {
		case !sale.HasVariants():
			if b < len(figs) {
				live[b][0] = figs[b].LiveUnits
			}
		case b < len(vfigs):
			for i, v := range sale.Variants {
				live[b][i] = vfigs[b][v.ID].LiveUnits
			}
		}
	}
	for _, o := range pending {
		if o.Bucket < 0 || o.Bucket >= n {
			continue
		}
		if !sale.HasVariants() {
			held[o.Bucket][0] += o.Quantity
			continue
		}
		for i, v := range sale.Variants {
			if o.Variant == v.ID {
				held[o.Bucket][i] += o.Quantity
			}
		}
	}
	return live, held
}

// inBucket are the orders of bucket b among orders.
func inBucket(orders []flashgate.Order, b int) []flashgate.Order {
	var out []flashgate.Order
	for _, o := range orders {
		if o.Bucket == b {
			out = append(out, o)
		}
	}
	return out
}
