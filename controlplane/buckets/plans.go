package buckets

import (
	"context"
	"fmt"
	"strings"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/internal/fencing"
	"github.com/flashgate/flashgate/lua"
)

// noMark is a rebuild mark no hash has (the server's TIME is digits and a
// dot): a pass that passes it to lua.Resync reopens no bucket.
const noMark = "~"

// settlePlans is the gate a re-sync pass passes before it may reopen a
// bucket paused for its rebuild. Two passes of one sale at once (the
// leader's loop, an admin re-sync, a failover's watch: one term, one
// fencing token) each rebuild the buckets they find missing with the shares
// of their own plan, from their own snapshot and stock read, and the totals
// of two plans can add up to more than the sale's: a stale snapshot counts
// an order live in one bucket that a fresh one counts in another, and even
// two fresh ones split the spare units after each bucket's live units, which
// releases between them change (explorer seed 20262328 on ef24b44: totals
// of 3 in a sale of 2, and three live units; seed 20263080: two passes each
// gave a bucket lost during it its share, 4 of 2). Bucket hashes are in
// different slots, so no script can write the shares of every bucket at
// once; instead no bucket that sells nothing now reopens (nor, on a sale
// not open, keeps its total) until its total fits the totals of all the
// others.
//
// The targets are the buckets that sell nothing now and are the re-sync's
// to open: paused for their rebuild (resume = 1), or on a sale not open,
// any not started (a failover's pause, resume = 2, is the failover's). It
// answers whether the pass may reopen them (lua.Resync's rebuild mark check
// then decides each): every bucket is present, each target's rebuild mark
// is the one the pass read before its snapshot (marks, lua.FieldRebuild of
// each bucket, "" for none), and either each target's totals (its own, each
// variant's) are those this pass would rebuild it with (rebuildShares, the
// targets counted as missing), or every bucket's totals with the move in
// flight add up to the sale's (each variant's), each target's covering its
// live units and pending retakes. Otherwise, with every bucket present and
// the targets' marks unchanged, it gives each target the share of this
// pass's plan (lua.Replan, with a fresh mark) and answers false: the next
// pass, whose snapshot follows those writes, checks them again.
//
// Each target's total and mark change together (lua.Resync's rebuild and
// lua.Replan), and a pass reopens a bucket only while the mark is still the
// one it read, so a bucket opens with the total the pass checked; a replan
// that lands between a pass's check and its reopen changes the mark and
// keeps the bucket shut, and one that meets a bucket reopened meanwhile
// (start = 1) leaves it alone: the next pass gives the buckets still paused
// what the open ones do not hold. A live unit of a paused bucket is never
// sold by it, and every plan counts each bucket's live units first, so the
// share a replan gives a paused bucket covers them.
func (k *Keeper) settlePlans(ctx context.Context, sale flashgate.Sale, l lua.Layout, stock []bucketStock, led ledgerState,
	figs []flashgate.SaleFigures, vfigs []map[string]flashgate.SaleFigures, pending []flashgate.Order, marks []string) (bool, error) {
	var targets []int
	for b, st := range stock {
		if !st.found {
			return false, nil
		}
		if st.start == 1 || st.resume == 2 || (sale.State == flashgate.StateOpen && st.resume != 1) {
			continue
		}
		if st.mark != marks[b] {
			return false, nil
		}
		targets = append(targets, b)
	}
	if len(targets) == 0 {
		return true, nil
	}
	cut := append([]bucketStock(nil), stock...)
	for _, b := range targets {
		cut[b].found = false
	}
	want, vwant := k.rebuildShares(sale, cut, led, figs, vfigs, pending)
	if plansAgree(sale, stock, led, targets, want, vwant) || plansFit(sale, stock, led, targets, figs, vfigs, pending) {
		return true, nil
	}
	replanned := make([]int, 0, len(targets))
	for _, b := range targets {
		args := []any{fencing.Of(ctx), marks[b], want[b]}
		for i, v := range sale.Variants {
			args = append(args, v.ID, vwant[b][i])
		}
		n, err := lua.Replan.Run(ctx, k.rdb, lua.SaleKeys(l.Tag(b)), args...).Int()
		if err != nil {
			return false, fmt.Errorf("re-syncing bucket %d: %w: %w", b, flashgate.ErrUnavailable, err)
		}
		if n == lua.ReplanFenced {
			return false, fencing.Err(fmt.Sprintf("replanning bucket %d", b), fencing.Of(ctx))
		}
		if n == 1 {
			replanned = append(replanned, b)
		}
	}
	k.log.Warn("buckets rebuilt from two plans at once: their totals planned again, reopened by the next re-sync",
		"sale", sale.ID, "buckets", targets, "replanned", replanned, "totals", want)
	return false, nil
}

// plansAgree reports whether each target already has the totals (its own
// and each variant's) this pass would give it, want and vwant.
func plansAgree(sale flashgate.Sale, stock []bucketStock, led ledgerState, targets []int, want []int64, vwant [][]int64) bool {
	for _, b := range targets {
		if stock[b].total != want[b] {
			return false
		}
		for i := range sale.Variants {
			if stock[b].vtotal == nil || stock[b].vtotal[i] != vwant[b][i] {
				return false
			}
		}
	}
	return true
}

// plansFit reports whether every bucket's totals, with the units of the
// move in flight, add up to the sale's (per variant for a sale sold in
// variants) and each target's cover its live units and pending retakes.
func plansFit(sale flashgate.Sale, stock []bucketStock, led ledgerState, targets []int, figs []flashgate.SaleFigures,
	vfigs []map[string]flashgate.SaleFigures, pending []flashgate.Order) bool {
	live, held := liveAndHeld(sale, len(stock), figs, vfigs, pending)
	fits := func(i int, total int64, st []bucketStock, led ledgerState) bool {
		sum := led.inFlightUnits(st)
		for _, s := range st {
			sum += s.total
		}
		if sum != total {
			return false
		}
		for _, b := range targets {
			if st[b].total < live[b][i]+held[b][i] {
				return false
			}
		}
		return true
	}
	if !sale.HasVariants() {
		return fits(0, sale.Total, stock, led)
	}
	for i, v := range sale.Variants {
		if !fits(i, v.Total, variantStock(stock, i, v.ID), led.of(v.ID)) {
			return false
		}
	}
	return true
}

// markOf is the rebuild mark in a releases counter and rebuild mark as
// salehash.ResyncMarks reads them ("3:1765000000.123456").
func markOf(rel string) string {
	_, m, _ := strings.Cut(rel, ":")
	return m
}

// withMark is rel with its rebuild mark replaced by m.
func withMark(rel, m string) string {
	r, _, _ := strings.Cut(rel, ":")
	return r + ":" + m
}
