package controlplane

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/lua"
)

// Failover of a bucketed sale. Its keys live in several slots, possibly on
// several primaries: its own hash (state and admission, no stock), each
// bucket (stock, buyers, stream) and the ledger of moves between buckets.
// Each slot keeps its own marker (markersOf), and a new primary is recovered
// by what its slot holds:
//
//   - the sale's own hash: the database's state is set again (a lost open or
//     close); the admission cap is raised again by the next re-sync.
//   - the ledger: moved past the last move any bucket carries
//     (lua.LedgerRepair), so a move number is never used twice.
//   - a bucket: paused alone (lua.Pause; its buyers get "paused", 503, and
//     retry), its stream drained, then rebuilt from the database: its buyers
//     and released orders restored, its booked from the rows and its total
//     computed afresh as for a bucket Redis lost — what no other bucket and
//     no move in flight holds — since a shrink or a grant it lost would leave
//     its total wrong. It reopens at the next re-sync.
//
// The other buckets sell on meanwhile: a buyer only ever buys in their home
// bucket, whose buyers hash alone says whether they hold an order, and no
// unit moves between buckets while one is being recovered (Rebalance waits
// for recovering to clear), so their totals stay what the rebuild subtracts.

// recovering reports whether a slot of bucketed sale id is being recovered
// after a failover; Rebalance moves nothing meanwhile.
func (s *Service) recovering(id string) bool {
	_, ok := s.recoveringSales.Load(id)
	return ok
}

// checkBuckets compares every marker of a bucketed sale with the
// replication id of its slot's primary now, and moves the recovery of the
// slots that changed on by one step: the sale's own hash and the ledger
// first, then the buckets, all the changed ones together.
func (s *Service) checkBuckets(ctx context.Context, sale flashgate.Sale, marks []slotMarker, cmds []*redis.StringCmd, ids map[string]string) error {
	var changed []slotMarker
	var replIDs []string
	for i, m := range marks {
		marker, err := cmds[i].Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("reading the primary marker %s: %w", m.key, err)
		}
		replID, err := s.replicationID(ctx, m.probe, ids)
		if err != nil {
			return err
		}
		switch marker {
		case replID:
		case "":
			// First look at this slot on this Redis: remember its primary.
			if err := s.rdb.Set(ctx, m.key, replID, 0).Err(); err != nil {
				return err
			}
		default:
			changed = append(changed, m)
			replIDs = append(replIDs, replID)
		}
	}
	if len(changed) == 0 {
		s.recoveringSales.Delete(sale.ID)
		return nil
	}
	s.recoveringSales.Store(sale.ID, true)
	l := saleLayout(sale)
	var buckets []int
	var bucketIDs []string
	for i, m := range changed {
		if m.bucket >= 0 {
			buckets = append(buckets, m.bucket)
			bucketIDs = append(bucketIDs, replIDs[i])
		}
	}
	// The buckets stop selling first, whatever else fails this pass.
	if err := s.pauseBuckets(ctx, sale, l, buckets); err != nil {
		return err
	}
	for i, m := range changed {
		switch m.bucket {
		case markSale:
			if err := s.recoverSaleHash(ctx, sale); err != nil {
				return err
			}
		case markLedger:
			if err := s.repairLedger(ctx, l); err != nil {
				return err
			}
		default:
			continue
		}
		s.log.Warn("new redis primary: bucketed sale's slot recovered", "sale", sale.ID, "slot", m.probe, "new_replid", replIDs[i])
		if err := s.rdb.Set(ctx, m.key, replIDs[i], 0).Err(); err != nil {
			return err
		}
	}
	if len(buckets) > 0 {
		done, err := s.rebuildBuckets(ctx, sale, l, buckets)
		if err != nil || !done {
			return err
		}
		for i, b := range buckets {
			if err := s.rdb.Set(ctx, lua.PrimaryKey(l.Tag(b)), bucketIDs[i], 0).Err(); err != nil {
				return err
			}
		}
	}
	s.recoveringSales.Delete(sale.ID)
	return nil
}

// pauseBuckets pauses the given buckets of a bucketed sale (lua.Pause: an
// open bucket answers "paused" until its rebuild reopens it).
func (s *Service) pauseBuckets(ctx context.Context, sale flashgate.Sale, l lua.Layout, buckets []int) error {
	for _, b := range buckets {
		paused, err := lua.Pause.Run(ctx, s.rdb, lua.SaleKeys(l.Tag(b)), fenceOf(ctx)).Int64()
		if err != nil {
			return fmt.Errorf("pausing bucket %d after a failover: %w", b, err)
		}
		if paused == lua.PauseFenced {
			return errFenced(fmt.Sprintf("pausing bucket %d after a failover", b), fenceOf(ctx))
		}
		if paused == 1 {
			s.log.Warn("new redis primary: bucket paused until rebuilt from the database", "sale", sale.ID, "bucket", b)
		}
	}
	return nil
}

// recoverSaleHash sets the database's state again on a bucketed sale's own
// hash, which a failover may have rolled back (it holds no stock: a lost
// admission count only lets a few more requests through, and the re-sync
// raises the cap again). A hash Redis lost is the re-sync's to rebuild.
func (s *Service) recoverSaleHash(ctx context.Context, sale flashgate.Sale) error {
	if sale.State == flashgate.StateUpcoming {
		return nil
	}
	n, err := lua.SetState.Run(ctx, s.rdb, lua.SaleKeys(sale.ID), stateArg(sale.State), fenceOf(ctx)).Int()
	if err != nil {
		return fmt.Errorf("setting the sale's state again after a failover: %w", err)
	}
	if n == lua.SetStateFenced {
		return errFenced("setting the sale's state again after a failover", fenceOf(ctx))
	}
	return nil
}

// repairLedger moves the ledger of a bucketed sale past the last move a
// bucket carries (see lua/ledgerrepair.lua). A move whose units a bucket
// freed and none was credited with is recorded in flight to its own giver,
// so the next Rebalance credits them back.
func (s *Service) repairLedger(ctx context.Context, l lua.Layout) error {
	token := fenceOf(ctx)
	if token < 1 {
		return errors.New("repairing the ledger: no fencing token (not leading)")
	}
	led, err := s.readLedger(ctx, l.Sale)
	if err != nil {
		return err
	}
	stock, err := s.readStock(ctx, l)
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
	phase, from, freed := "", 0, int64(0)
	if !credited && giver >= 0 {
		phase, from, freed = "grant", giver, stock[giver].freed
	}
	code, err := lua.LedgerRepair.Run(ctx, s.rdb, lua.LedgerKeys(l.Sale), token, top, phase, from, from, freed).Int64()
	if err != nil {
		return fmt.Errorf("repairing the ledger: %w: %w", flashgate.ErrUnavailable, err)
	}
	if code == -1 {
		return errStaleLeader
	}
	s.log.Warn("bucket ledger moved past the moves its primary lost", "sale", l.Sale, "was", led.seq, "now", top, "phase", phase)
	return nil
}

// rebuildBuckets rebuilds the given (paused) buckets of a bucketed sale from
// the database once each one's stream has drained (see the top of this
// file); it reports whether they are rebuilt.
func (s *Service) rebuildBuckets(ctx context.Context, sale flashgate.Sale, l lua.Layout, buckets []int) (bool, error) {
	for _, b := range buckets {
		drained, err := s.streamDrained(ctx, l.Tag(b))
		if err != nil || !drained {
			return false, err
		}
	}
	bs, ok := s.store.(BucketStore)
	if !ok {
		return false, fmt.Errorf("rebuilding bucketed sale %s: the store keeps no bucket figures", sale.ID)
	}
	s.resyncMu.Lock()
	defer s.resyncMu.Unlock()
	figs, err := bs.BucketFigures(ctx, sale.ID, l.N())
	if err != nil {
		return false, fmt.Errorf("reading figures: %w", err)
	}
	stock, err := s.readStock(ctx, l)
	if err != nil {
		return false, err
	}
	led, err := s.readLedger(ctx, sale.ID)
	if err != nil {
		return false, err
	}
	// The rebuilt buckets' totals are computed as for buckets Redis lost:
	// what the others and the move in flight do not hold.
	present := map[int]bool{}
	for _, b := range buckets {
		present[b] = stock[b].found
		stock[b].found = false
	}
	live := make([]int64, l.N())
	for b := range figs {
		live[b] = figs[b].LiveUnits
	}
	totals := rebuildTotals(sale.Total, stock, led, live)
	granted := led.granted(stock)
	for _, b := range buckets {
		if !present[b] {
			continue // a bucket the new primary lacks: the re-sync rebuilds it whole
		}
		// reserved below every row sends the re-sync down its restore path
		// for this bucket (buyers and releases from the rows, booked from
		// the snapshot).
		if err := s.mark(ctx, l.Tag(b), lua.FieldTotal, totals[b], lua.FieldReserved, -1); err != nil {
			return false, fmt.Errorf("marking bucket %d for its rebuild: %w", b, err)
		}
		if err := s.markRebuilt(ctx, l, b, led, granted); err != nil {
			return false, err
		}
	}
	_, after, err := s.resyncBuckets(ctx, sale)
	if err != nil {
		return false, fmt.Errorf("rebuilding after a failover: %w", err)
	}
	if sale.State == flashgate.StateOpen {
		for _, b := range buckets {
			// Open again at the next re-sync, as a rebuilt sale does.
			if err := s.mark(ctx, l.Tag(b), lua.FieldResume, 1); err != nil {
				return false, fmt.Errorf("resuming bucket %d after the rebuild: %w", b, err)
			}
		}
	}
	s.log.Warn("buckets rebuilt from the database after a failover", "sale", sale.ID, "buckets", buckets, "booked", after.Booked)
	return true, nil
}
