package controlplane

import (
	"context"
	"fmt"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/buckets"
)

// The entry points of the bucket machinery (controlplane/buckets): each
// reads the sale row and serialises with the re-syncs of this process.

// Rebalance runs one rebalancing step of a bucketed sale under fencing
// token (the leader's; the loop passes its lease's): see
// buckets.Keeper.Rebalance. It moves nothing while a slot of the sale is
// being recovered after a failover (controlplane/failover), and nothing for
// an unbucketed sale. It returns the units this call credited.
func (s *Service) Rebalance(ctx context.Context, id string, token int64) (moved int64, err error) {
	if !flashgate.ValidSaleID(id) {
		return 0, fmt.Errorf("sale %q: %w", id, flashgate.ErrNotFound)
	}
	if token < 1 {
		return 0, fmt.Errorf("rebalancing sale %s: no fencing token (not leading)", id)
	}
	s.sync.Lock()
	defer s.sync.Unlock()
	sale, err := s.store.Sale(ctx, id)
	if err != nil {
		return 0, fmt.Errorf("reading sale: %w", err)
	}
	if !sale.Bucketed() || s.failover.Recovering(id) {
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
