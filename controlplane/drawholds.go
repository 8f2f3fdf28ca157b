package controlplane

import (
	"context"
	"fmt"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/drawhold"
)

// The card holds of draw entries: the work is controlplane/drawhold's;
// these methods hand the gateway's calls on, and the leader runs its read
// path every tick.

// newHolder is the draws' holder of a Service being built: with
// cfg.Payments when it can hold a card (as *payments.Stripe can), else
// with simulated payments when there is no provider.
func newHolder(s *Service, cfg Config) *drawhold.Holder {
	var p drawhold.Provider
	if cfg.Payments != nil {
		var ok bool
		if p, ok = cfg.Payments.(drawhold.Provider); !ok {
			p = noHolds{}
		}
	}
	return drawhold.New(drawhold.Config{Redis: s.rdb, Store: s.store, Provider: p, Currency: cfg.Currency,
		Clock: s.clock, Logger: s.log, Grace: cfg.PaymentGrace, Rate: cfg.PaymentReconcileRate / 2, Flush: s.flushDraw})
}

// noHolds is the holds of a payment provider that cannot hold a card:
// every hold is flashgate.ErrUnavailable, so that no entry counts unpaid.
type noHolds struct{}

var errNoHolds = fmt.Errorf("the payment provider holds no card: %w", flashgate.ErrUnavailable)

func (noHolds) Hold(context.Context, flashgate.Hold) (flashgate.Intent, error) {
	return flashgate.Intent{}, errNoHolds
}
func (noHolds) Intent(context.Context, string) (flashgate.Intent, error) {
	return flashgate.Intent{}, errNoHolds
}
func (noHolds) Cancel(context.Context, string) (flashgate.Intent, error) {
	return flashgate.Intent{}, errNoHolds
}

// HoldEntry gives userID's pending entry in saleID its card hold, or with
// simulated payments enters it (drawhold.Holder.Hold).
func (s *Service) HoldEntry(ctx context.Context, saleID, userID string) (flashgate.DrawEntry, error) {
	return s.holds.Hold(ctx, saleID, userID)
}

// ReleaseEntry releases the hold of userID's withdrawn entry in saleID
// (drawhold.Holder.Release).
func (s *Service) ReleaseEntry(ctx context.Context, saleID, userID string) (flashgate.DrawEntry, error) {
	return s.holds.Release(ctx, saleID, userID)
}

// ReconcileHolds reads the draw holds the webhooks have not settled
// (drawhold.Holder.Reconcile) among sales; the leader calls it every tick.
func (s *Service) ReconcileHolds(ctx context.Context, sales []flashgate.Sale) (int, error) {
	return s.holds.Reconcile(ctx, sales)
}

// holdTick is the leader's read of the draw holds (ReconcileHolds).
func (s *Service) holdTick(ctx context.Context, sales []flashgate.Sale) {
	if _, err := s.ReconcileHolds(ctx, sales); err != nil && ctx.Err() == nil {
		s.log.Warn("draw hold reads", "err", err)
	}
}
