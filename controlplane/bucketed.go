package controlplane

import (
	"context"
	"fmt"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/buckets"
)

// The entry points of the bucket machinery (controlplane/buckets): each
// reads the sale row and serialises with the re-syncs of this process.

// resyncBucketed is Resync for a bucketed sale: the sale and its bucket
// tags join the set the order sinks drain (unless archived), then every
// bucket is re-synced (buckets.Keeper.Resync). The caller holds resyncMu.
func (s *Service) resyncBucketed(ctx context.Context, sale flashgate.Sale) (before, after ResyncFigures, err error) {
	if err := s.joinSalesUnlessArchived(ctx, sale, buckets.Layout(sale).Tags()); err != nil {
		return before, after, fmt.Errorf("re-syncing: %w: %w", flashgate.ErrUnavailable, err)
	}
	if before, after, err = s.buckets.Resync(ctx, sale); err != nil {
		return before, after, err
	}
	s.metrics.resyncs.Inc()
	return before, after, nil
}

// Rebalance runs one rebalancing step of a bucketed sale under fencing
// token (the leader's; the loop passes its lease's): see
// buckets.Keeper.Rebalance. It moves nothing while a slot of the sale is
// being recovered after a failover (failover_buckets.go), and nothing for
// an unbucketed sale. It returns the units this call credited.
func (s *Service) Rebalance(ctx context.Context, id string, token int64) (moved int64, err error) {
	if !flashgate.ValidSaleID(id) {
		return 0, fmt.Errorf("sale %q: %w", id, flashgate.ErrNotFound)
	}
	if token < 1 {
		return 0, fmt.Errorf("rebalancing sale %s: no fencing token (not leading)", id)
	}
	s.resyncMu.Lock()
	defer s.resyncMu.Unlock()
	sale, err := s.store.Sale(ctx, id)
	if err != nil {
		return 0, fmt.Errorf("reading sale: %w", err)
	}
	if !sale.Bucketed() || s.recovering(id) {
		return 0, nil
	}
	return s.buckets.Rebalance(ctx, sale, token)
}

// SettleClaims settles the stale spill claims of a bucketed sale (see
// buckets.Keeper.SettleClaims) and returns the claims finalised and
// cleared. Any control plane may run it: every step is idempotent.
func (s *Service) SettleClaims(ctx context.Context, id string) (finalised, cleared int, err error) {
	sale, err := s.store.Sale(ctx, id)
	if err != nil {
		return 0, 0, fmt.Errorf("reading sale: %w", err)
	}
	if !sale.Bucketed() {
		return 0, 0, nil
	}
	return s.buckets.SettleClaims(ctx, buckets.Layout(sale))
}
