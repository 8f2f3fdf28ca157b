package controlplane

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/lua"
)

// BucketStore is what the re-sync of a bucketed sale needs beyond Store:
// the figures of each bucket from one snapshot. *sqldb.DB satisfies it.
type BucketStore interface {
	BucketFigures(ctx context.Context, saleID string, n int) ([]flashgate.SaleFigures, error)
}

// BucketStatus is one bucket's live figures in GET /admin/sales/{id}.
type BucketStatus struct {
	Bucket int    `json:"bucket"`
	Tag    string `json:"tag"`
	// Total is the units the bucket holds now (its share of the sale).
	Total  int64 `json:"total"`
	Booked int64 `json:"booked"`
	// StreamBacklog is the bucket's reserved orders not yet in the database.
	StreamBacklog int64 `json:"stream_backlog"`
}

// maxSalt bounds the search for a salt that puts a bucket on the primary
// it should go to (16384 slots over a few primaries: a few tries each).
const maxSalt = 100_000

// chooseSalts picks the salt of each of n buckets of sale: bucket b goes to
// the (b mod P)-th primary of the cluster (primaries ordered by their first
// slot), on a slot no other bucket uses. Without a cluster (or when the
// slot map cannot be read) the buckets only get distinct slots.
func (s *Service) chooseSalts(ctx context.Context, sale string, n int) []int {
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		slots, err := cc.ClusterSlots(ctx).Result()
		if err != nil {
			s.log.Warn("reading the cluster's slot map for bucket placement; buckets get distinct slots only", "sale", sale, "err", err)
		} else {
			sort.Slice(slots, func(i, j int) bool { return slots[i].Start < slots[j].Start })
			byAddr := map[string]int{}
			var ranges [][3]int // start, end, primary
			for _, sl := range slots {
				if len(sl.Nodes) == 0 {
					continue
				}
				p, ok := byAddr[sl.Nodes[0].Addr]
				if !ok {
					p = len(byAddr)
					byAddr[sl.Nodes[0].Addr] = p
				}
				ranges = append(ranges, [3]int{int(sl.Start), int(sl.End), p})
			}
			return pickSalts(sale, n, func(slot int) int {
				for _, r := range ranges {
					if slot >= r[0] && slot <= r[1] {
						return r[2]
					}
				}
				return -1
			}, len(byAddr))
		}
	}
	return pickSalts(sale, n, func(int) int { return 0 }, 1)
}

// pickSalts gives bucket b the smallest salt whose tag's slot is owned by
// primary b mod primaries (ownerOf) and used by no other bucket; a bucket
// that finds none within maxSalt tries settles for a distinct slot.
func pickSalts(sale string, n int, ownerOf func(slot int) int, primaries int) []int {
	salts := make([]int, n)
	used := map[int]bool{}
	for b := range n {
		want := b % max(primaries, 1)
		found := -1
		for salt := 0; salt < maxSalt && found < 0; salt++ {
			slot := lua.Slot(lua.BucketTag(sale, b, salt))
			if !used[slot] && ownerOf(slot) == want {
				found = salt
			}
		}
		for salt := 0; found < 0; salt++ {
			if !used[lua.Slot(lua.BucketTag(sale, b, salt))] {
				found = salt
			}
		}
		salts[b] = found
		used[lua.Slot(lua.BucketTag(sale, b, found))] = true
	}
	return salts
}

// saleLayout is the bucket layout of a sale row.
func saleLayout(sale flashgate.Sale) lua.Layout {
	if !sale.Bucketed() {
		return lua.Layout{Sale: sale.ID}
	}
	return lua.Layout{Sale: sale.ID, Salts: sale.BucketSalts}
}

// bucketShare is bucket b's share of total over n buckets: an even split,
// the first total mod n buckets one unit more.
func bucketShare(total int64, n, b int) int64 {
	share := total / int64(n)
	if int64(b) < total%int64(n) {
		share++
	}
	return share
}

// setBucketsState opens or closes every bucket of a bucketed sale; it
// reports whether some bucket (or the sale's own hash) is missing.
func (s *Service) setBucketsState(ctx context.Context, sale flashgate.Sale, arg string) (missing bool, err error) {
	tok := fenceOf(ctx)
	for _, t := range saleLayout(sale).Tags() {
		n, err := lua.SetState.Run(ctx, s.rdb, lua.SaleKeys(t), arg, tok).Int()
		if err != nil {
			return false, err
		}
		if n == lua.SetStateFenced {
			return false, errFenced("setting bucket state", tok)
		}
		if n == -1 {
			missing = true
		}
	}
	return missing, nil
}

// bucketFigures reads each bucket's hash and stream length in one pipeline.
func (s *Service) bucketFigures(ctx context.Context, sale flashgate.Sale) ([]BucketStatus, []redisFigures, error) {
	l := saleLayout(sale)
	tags := l.Tags()
	rfs, err := s.redisFiguresOf(ctx, tags)
	if err != nil {
		return nil, nil, err
	}
	totals := make([]*redis.StringCmd, len(tags))
	pipe := s.rdb.Pipeline()
	for b, t := range tags {
		totals[b] = pipe.HGet(ctx, lua.SaleKey(t), lua.FieldTotal)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, nil, fmt.Errorf("reading bucket totals: %w: %w", flashgate.ErrUnavailable, err)
	}
	out := make([]BucketStatus, len(tags))
	for b, t := range tags {
		total, _ := strconv.ParseInt(totals[b].Val(), 10, 64)
		out[b] = BucketStatus{Bucket: b, Tag: t, Total: total, Booked: rfs[b].booked, StreamBacklog: rfs[b].backlog}
	}
	return out, rfs, nil
}

// foldBuckets puts a bucketed sale's stock figures into rf, read from the
// sale's own hash: booked, reserved and the stream backlog become sums over
// its buckets (admission counters stay the sale's). It returns each
// bucket's figures; an unbucketed sale is left as it is.
func (s *Service) foldBuckets(ctx context.Context, sale flashgate.Sale, rf *redisFigures) ([]BucketStatus, error) {
	if !sale.Bucketed() {
		return nil, nil
	}
	bst, brf, err := s.bucketFigures(ctx, sale)
	if err != nil {
		return nil, err
	}
	rf.booked, rf.reserved, rf.backlog = 0, 0, 0
	for _, b := range brf {
		rf.booked += b.booked
		rf.reserved += b.reserved
		rf.backlog += b.backlog
	}
	return bst, nil
}

// resyncBuckets is Resync for a bucketed sale: releases go back to their
// orders' buckets, then each bucket runs lua.Resync from one database
// snapshot grouped by bucket (BucketStore), and the sale's own hash gets
// its admission cap raised while units remain. A bucket Redis lost is
// rebuilt with its share (after its buyers and released orders are
// restored from every row); a lost sale hash is prepared again with the
// layout and the row's state. The figures returned are sums over buckets.
//
// The per-sale count of delivered releases (release_sync) is not checked
// per bucket: a bucket is restored when it is missing or its reserved is
// below the database's units of its rows.
func (s *Service) resyncBuckets(ctx context.Context, sale flashgate.Sale) (before, after ResyncFigures, err error) {
	bs, ok := s.store.(BucketStore)
	if !ok {
		return before, after, fmt.Errorf("re-syncing bucketed sale %s: the store keeps no bucket figures", sale.ID)
	}
	l := saleLayout(sale)
	tags := l.Tags()
	if err := s.joinSalesUnlessArchived(ctx, sale, tags); err != nil {
		return before, after, fmt.Errorf("re-syncing: %w: %w", flashgate.ErrUnavailable, err)
	}
	figs, err := bs.BucketFigures(ctx, sale.ID, l.N())
	if err != nil {
		return before, after, fmt.Errorf("reading figures: %w", err)
	}
	if err := s.deliverBucketReleases(ctx, l); err != nil {
		return before, after, err
	}
	// The sale's own hash: prepared again (with its layout) if Redis lost it.
	created, err := lua.Prepare.Run(ctx, s.rdb, lua.SaleKeys(sale.ID),
		sale.Total, flashgate.AdmitCap(sale.Total, sale.AdmitRatio), perUser(sale), sale.PriceCents, l.String()).Int()
	if err != nil {
		return before, after, fmt.Errorf("re-syncing: %w: %w", flashgate.ErrUnavailable, err)
	}
	if created == 1 && sale.State != flashgate.StateUpcoming {
		n, err := lua.SetState.Run(ctx, s.rdb, lua.SaleKeys(sale.ID), stateArg(sale.State), fenceOf(ctx)).Int()
		if err != nil {
			return before, after, fmt.Errorf("re-syncing: %w: %w", flashgate.ErrUnavailable, err)
		}
		if n == lua.SetStateFenced {
			return before, after, errFenced("re-syncing sale "+sale.ID, fenceOf(ctx))
		}
	}
	before.Missing = created == 1
	// A bucket Redis lost is rebuilt with what no other bucket and no move
	// in flight holds (see rebuildTotals).
	stock, err := s.readStock(ctx, l)
	if err != nil {
		return before, after, err
	}
	led, err := s.readLedger(ctx, sale.ID)
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
			if err := lua.Shrink.Run(ctx, s.rdb, lua.SaleKeys(l.Tag(int(led.from))), led.seq, 0).Err(); err != nil {
				return before, after, fmt.Errorf("re-syncing: %w: %w", flashgate.ErrUnavailable, err)
			}
			if stock, err = s.readStock(ctx, l); err != nil {
				return before, after, err
			}
		}
		led.inFlight = false
	}
	live := make([]int64, l.N())
	for b := range figs {
		live[b] = figs[b].LiveUnits
	}
	rebuild := rebuildTotals(sale.Total, stock, led, live)
	restored := false
	ratio := strconv.FormatFloat(admitRatio(sale), 'f', -1, 64)
	for b, t := range tags {
		keys := lua.SaleKeys(t)
		run := func(restore string) ([]int64, error) {
			return lua.Resync.Run(ctx, s.rdb, keys, figs[b].LiveUnits, figs[b].PersistedUnits,
				rebuild[b], perUser(sale), sale.PriceCents,
				string(sale.State), ratio, 0, restore, fenceOf(ctx)).Int64Slice()
		}
		v, err := run("0")
		if err == nil && len(v) == 1 && v[0] == lua.ResyncRestore {
			if !restored {
				if err := s.restoreBuckets(ctx, l); err != nil {
					return before, after, err
				}
				restored = true
			}
			v, err = run("1")
		}
		if err != nil {
			return before, after, fmt.Errorf("re-syncing bucket %s: %w: %w", t, flashgate.ErrUnavailable, err)
		}
		if len(v) == 1 && v[0] == lua.ResyncFenced {
			return before, after, errFenced("re-syncing bucket "+t, fenceOf(ctx))
		}
		if len(v) != 10 {
			return before, after, fmt.Errorf("re-syncing bucket %s: script returned %d values", t, len(v))
		}
		if v[0] == 1 {
			before.Missing = true
			if err := s.markRebuilt(ctx, l, b, led, led.granted(stock)); err != nil {
				return before, after, err
			}
			s.log.Warn("bucket rebuilt in redis from the database", "sale", sale.ID, "bucket", b, "booked", v[5], "total", v[9])
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
	// Admission: the sale's own hash counts for the whole sale.
	h, err := s.rdb.HMGet(ctx, lua.SaleKey(sale.ID), lua.FieldCount, lua.FieldAccess).Result()
	if err != nil {
		return before, after, fmt.Errorf("re-syncing: %w: %w", flashgate.ErrUnavailable, err)
	}
	count, access := num(h[0]), num(h[1])
	before.AdmissionCap, before.Admitted = count, access
	after.AdmissionCap, after.Admitted = count, access
	if rem := sale.Total - after.Booked; rem > 0 {
		want := access + int64(float64(rem)*admitRatio(sale)+0.999999)
		if want > count {
			if err := s.mark(ctx, sale.ID, lua.FieldCount, want); err != nil {
				return before, after, fmt.Errorf("re-syncing: %w", err)
			}
			after.AdmissionCap = want
		}
	}
	before.Remaining = max(before.Total-before.Booked, 0)
	after.Remaining = max(sale.Total-after.Booked, 0)
	s.metrics.resyncs.Inc()
	return before, after, nil
}

// num reads a Redis reply value as an integer (0 when absent).
func num(v any) int64 {
	str, _ := v.(string)
	n, _ := strconv.ParseInt(str, 10, 64)
	return n
}

// deliverBucketReleases gives every bucket the releases the database
// queued for its sale, each order to its own bucket (lua.ReleaseBatch,
// idempotent per order), and acknowledges them.
func (s *Service) deliverBucketReleases(ctx context.Context, l lua.Layout) error {
	for range 1000 {
		queue, _, err := s.store.ReleaseQueue(ctx, l.Sale, releaseChunk)
		if err != nil {
			return fmt.Errorf("reading release queue: %w", err)
		}
		if len(queue) == 0 {
			return nil
		}
		byBucket := make([][]any, l.N())
		ids := make([]string, 0, len(queue))
		for _, o := range queue {
			if o.Bucket < 0 || o.Bucket >= l.N() {
				s.log.Error("queued release of an order outside the sale's buckets", "sale", l.Sale, "order", o.ID, "bucket", o.Bucket)
				continue
			}
			if byBucket[o.Bucket] == nil {
				byBucket[o.Bucket] = []any{":" + strconv.FormatInt(fenceOf(ctx), 10)}
			}
			byBucket[o.Bucket] = append(byBucket[o.Bucket], o.ID, o.UserID, o.Quantity)
		}
		for b, args := range byBucket {
			if args == nil {
				continue
			}
			t := l.Tag(b)
			res, err := lua.ReleaseBatch.Run(ctx, s.rdb, lua.ReleaseKeys(t), args...).Int64Slice()
			if err != nil {
				return fmt.Errorf("delivering releases: %w: %w", flashgate.ErrUnavailable, err)
			}
			if len(res) == 3 && res[0] == lua.ReleaseBatchFenced {
				return errFenced("delivering releases", fenceOf(ctx))
			}
			if len(res) != 3 || res[0] != lua.ReleaseBatchDone {
				// The bucket is gone: its rebuild restores the released set
				// from the rows; the queue stays until it is delivered.
				return nil
			}
			for i := 1; i < len(args); i += 3 {
				ids = append(ids, args[i].(string))
			}
		}
		// Spilled orders' home markers go once their units are back.
		if err := s.unmarkSpilled(ctx, l, queue); err != nil {
			return err
		}
		if _, err := s.store.ReleasesDelivered(ctx, l.Sale, ids, fenceOf(ctx)); err != nil {
			return fmt.Errorf("acknowledging releases: %w", err)
		}
		if len(queue) < releaseChunk {
			return nil
		}
	}
	return fmt.Errorf("re-syncing sale %s: %w", l.Sale, errReleaseBacklog)
}

// restoreBuckets puts every released and live row of a bucketed sale back
// into its own bucket's released set and buyers hash, a page at a time,
// released rows first (lua.Restore; a bucket Redis kept is unchanged by it).
// A row reserved outside its buyer's home bucket (a spill) also restores
// its final marker in the home bucket, as a buyer entry whose value is the
// marker (lua.SpillMarker): a released row's marker joins the home's
// released set and goes from its buyers, a live row's is set unless so
// released.
func (s *Service) restoreBuckets(ctx context.Context, l lua.Layout) error {
	for _, st := range []flashgate.OrderStatus{flashgate.StatusCancelled, flashgate.StatusExpired, flashgate.StatusRefunded,
		flashgate.StatusPendingPayment, flashgate.StatusPaid} {
		released := !st.Live()
		after := ""
		for {
			page, err := s.store.OrdersPage(ctx, l.Sale, st, after, releaseChunk)
			if err != nil {
				return fmt.Errorf("reading orders to restore: %w", err)
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
					byBucket[o.Bucket] = []any{fenceOf(ctx), 0}
				}
				byBucket[o.Bucket] = append(byBucket[o.Bucket], o.UserID, o.ID)
				// A spilled order's marker in its buyer's home bucket
				// comes back with a live row (so a rebuilt home never
				// lets the user buy again) and goes with a released one.
				if h := l.Home(o.UserID); h != o.Bucket {
					if byBucket[h] == nil {
						byBucket[h] = []any{fenceOf(ctx), 0}
					}
					byBucket[h] = append(byBucket[h], o.UserID, lua.SpillMarker(o.ID, o.Bucket))
				}
			}
			for b, args := range byBucket {
				if args == nil {
					continue
				}
				if released {
					args[1] = (len(args) - 2) / 2
				}
				t := l.Tag(b)
				n, err := lua.Restore.Run(ctx, s.rdb, lua.RestoreKeys(t), args...).Int()
				if err != nil {
					return fmt.Errorf("restoring buyers: %w: %w", flashgate.ErrUnavailable, err)
				}
				if n == lua.RestoreFenced {
					return errFenced("restoring buyers", fenceOf(ctx))
				}
			}
			if len(page) < releaseChunk {
				break
			}
			after = page[len(page)-1].ID
		}
	}
	return nil
}

// markRebuilt gives a rebuilt bucket the ledger's move versions and fence:
// moves the ledger closed are never credited or shrunk again, a move in
// flight to it is still credited, a move in flight from it that was not
// credited yet still shrinks it (one that was answers 0 freed), and a
// stale leader's grant stays refused.
func (s *Service) markRebuilt(ctx context.Context, l lua.Layout, b int, led ledgerState, granted bool) error {
	fence, err := s.rdb.HGet(ctx, lua.LedgerKey(l.Sale), "fence").Int64()
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
	err = s.mark(ctx, l.Tag(b), lua.FieldGrantSeq, gseq, lua.FieldShrinkSeq, sseq,
		lua.FieldShrinkFreed, 0, lua.FieldFence, max(fence, fenceOf(ctx)))
	if err != nil {
		return fmt.Errorf("re-syncing: %w", err)
	}
	return nil
}
