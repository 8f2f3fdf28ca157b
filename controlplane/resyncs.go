package controlplane

import (
	"context"
	"fmt"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/resync"
)

// Resync sets a sale's stock in Redis from one database snapshot and
// raises the admission cap while units remain; it rebuilds the sale's hash
// when Redis lost it (resync.Syncer.Resync). Its writes carry ctx's
// fencing token, or one of its own (fencedCall).
func (s *Service) Resync(ctx context.Context, id string) (before, after ResyncFigures, err error) {
	defer func() { s.metrics.ResyncFailed(err) }() // controlplane/opsmetrics
	if !flashgate.ValidSaleID(id) {
		return before, after, fmt.Errorf("sale %q: %w", id, flashgate.ErrNotFound)
	}
	err = s.fencedCall(ctx, func(ctx context.Context) error {
		var e error
		before, after, e = s.sync.Resync(ctx, id)
		return e
	})
	return before, after, err
}

// restoreContext is resync.RestoreContext, for the fair queue's restore.
var restoreContext = resync.RestoreContext
