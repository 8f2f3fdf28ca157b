package failover

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/buckets"
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
//     its total wrong. It reopens at the watch's next tick (paused.go).
//
// The other buckets sell on meanwhile: a buyer only ever buys in their home
// bucket, whose buyers hash alone says whether they hold an order, and no
// unit moves between buckets while one is being recovered (Rebalance waits
// for recovering to clear), so their totals stay what the rebuild subtracts.

// Recovering reports whether a slot of bucketed sale id is being recovered
// after a failover; Rebalance moves nothing meanwhile.
func (s *Watcher) Recovering(id string) bool {
	_, ok := s.recoveringSales.Load(id)
	return ok
}

// checkBuckets compares every marker of a bucketed sale with the
// replication id of its slot's primary now, and moves the recovery of the
// slots that changed on by one step: the sale's own hash and the ledger
// first, then the buckets, all the changed ones together. A bucket paused
// while its marker names its primary is recovered as a changed one, and a
// rebuilt bucket reopened (paused.go). It returns where the recovery
// stands.
func (s *Watcher) checkBuckets(ctx context.Context, sale flashgate.Sale, marks []slotMarker, cmds []*redis.StringCmd, states []*redis.SliceCmd, ids map[string]string) (string, error) {
	var changed []slotMarker
	var replIDs []string
	reopen := false
	for i, m := range marks {
		marker, err := cmds[i].Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return "", fmt.Errorf("reading the primary marker %s: %w", m.key, err)
		}
		replID, err := s.replicationID(ctx, m.probe, ids)
		if err != nil {
			return noteNewPrimary, err
		}
		switch marker {
		case replID:
			switch p := pauseOf(states[i]); {
			case p >= 2 && sale.State == flashgate.StateOpen:
				s.log.Warn("bucket paused with no recovery under way (its marker names this primary): rebuilding it from the database", "sale", sale.ID, "slot", m.probe)
				changed = append(changed, m)
				replIDs = append(replIDs, replID)
			case p == 1 && sale.State == flashgate.StateOpen:
				reopen = true
			}
		case "":
			// First look at this slot on this Redis: remember its primary.
			if err := s.rdb.Set(ctx, m.key, replID, 0).Err(); err != nil {
				return "", err
			}
		default:
			changed = append(changed, m)
			replIDs = append(replIDs, replID)
		}
	}
	if len(changed) == 0 {
		s.recoveringSales.Delete(sale.ID)
		if reopen {
			if _, _, err := s.resync(ctx, sale.ID); err != nil {
				return noteReopening, fmt.Errorf("reopening rebuilt buckets: %w", err)
			}
			return noteReopened, nil
		}
		return "", nil
	}
	s.recoveringSales.Store(sale.ID, true)
	l := buckets.Layout(sale)
	var buckets []int
	var bucketIDs []string
	for i, m := range changed {
		if m.bucket >= 0 {
			buckets = append(buckets, m.bucket)
			bucketIDs = append(bucketIDs, replIDs[i])
		}
	}
	// The buckets stop selling first, whatever else fails this pass.
	if err := s.buckets.Pause(ctx, sale, l, buckets); err != nil {
		return noteNewPrimary, err
	}
	for i, m := range changed {
		switch m.bucket {
		case markSale:
			if err := s.buckets.RecoverSaleHash(ctx, sale); err != nil {
				return noteRebuilding, err
			}
		case markLedger:
			if err := s.buckets.RepairLedger(ctx, l); err != nil {
				return noteRebuilding, err
			}
		default:
			continue
		}
		s.log.Warn("new redis primary: bucketed sale's slot recovered", "sale", sale.ID, "slot", m.probe, "new_replid", replIDs[i])
		if err := s.rdb.Set(ctx, m.key, replIDs[i], 0).Err(); err != nil {
			return noteRebuilding, err
		}
	}
	if len(buckets) > 0 {
		done, err := s.rebuildBuckets(ctx, sale, l, buckets)
		if err != nil || !done {
			return noteDraining, err
		}
		// Each bucket's marker names its new primary and an open sale's
		// bucket is marked to reopen in one step (lua.Rebuilt), as for a
		// sale (recoverSale).
		for i, b := range buckets {
			if err := s.markRebuilt(ctx, l.Tag(b), bucketIDs[i], sale.State == flashgate.StateOpen); err != nil {
				return noteRebuilding, err
			}
		}
		s.recoveringSales.Delete(sale.ID)
		return noteRebuilt, nil
	}
	s.recoveringSales.Delete(sale.ID)
	return "", nil
}

// rebuildBuckets rebuilds the given (paused) buckets of a bucketed sale from
// the database once each one's stream has drained (see the top of this
// file); it reports whether they are rebuilt. The caller marks them rebuilt
// (markRebuilt).
func (s *Watcher) rebuildBuckets(ctx context.Context, sale flashgate.Sale, l lua.Layout, buckets []int) (bool, error) {
	for _, b := range buckets {
		drained, err := s.streamDrained(ctx, l.Tag(b))
		if err != nil || !drained {
			return false, err
		}
	}
	s.sync.Lock()
	defer s.sync.Unlock()
	if err := s.buckets.MarkForRebuild(ctx, sale, l, buckets); err != nil {
		return false, err
	}
	_, after, err := s.sync.Bucketed(ctx, sale)
	if err != nil {
		return false, fmt.Errorf("rebuilding after a failover: %w", err)
	}
	s.log.Warn("buckets rebuilt from the database after a failover", "sale", sale.ID, "buckets", buckets, "booked", after.Booked)
	return true, nil
}
