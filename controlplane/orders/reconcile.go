package orders

import (
	"context"
	"time"

	"github.com/flashgate/flashgate"
)

// ReconcilePayments asks the provider about the payments the webhooks
// have not settled: those whose intent succeeded (the order may not have
// followed), those half way through a late decision, and those still in
// flight past the payment window plus the grace, which it cancels unless
// they succeeded (a canceled intent can no longer take money, and the next
// expiry pass releases the order's units). It returns how many it looked
// at. The leader calls it every tick.
func (s *Service) ReconcilePayments(ctx context.Context) (int, error) {
	if s.provider == nil {
		return 0, nil
	}
	now := s.clock.Now()
	open, err := s.paymentStore.OpenPayments(ctx, now.Add(-s.paymentWindow-s.paymentGrace), reconcileBatch)
	if err != nil {
		return 0, err
	}
	var first error
	// Events that came before their order's payment was stored: adopt
	// the intent once the order is a row.
	if ids, err := s.paymentStore.UnadoptedIntents(ctx, now.Add(-adoptFor), reconcileBatch); err != nil {
		first = err
	} else {
		for _, id := range ids {
			p, err := s.adopt(ctx, flashgate.PaymentEvent{IntentID: id})
			if err == nil {
				open = append(open, p)
			}
		}
	}
	for _, p := range open {
		if ctx.Err() != nil {
			break
		}
		if err := s.reconcile(ctx, p, now); err != nil {
			if first == nil {
				first = err
			}
			s.log.Warn("payment reconciliation", "order", p.OrderID, "err", err)
		}
	}
	return len(open), first
}

func (s *Service) reconcile(ctx context.Context, p flashgate.Payment, now time.Time) error {
	if p.Status != flashgate.IntentSucceeded && p.Outcome == "" {
		in, err := s.provider.Intent(ctx, p.IntentID)
		if err != nil {
			return err
		}
		if in.Status != flashgate.IntentSucceeded {
			o, err := s.store.Order(ctx, p.OrderID)
			if err != nil {
				return err
			}
			if o.Status == flashgate.StatusPendingPayment && o.CreatedAt.Add(s.paymentWindow+s.paymentGrace).After(now) {
				return s.paymentStore.SetPaymentStatus(ctx, p.OrderID, in.Status, now)
			}
			if in.Status == flashgate.IntentProcessing {
				// The money is on its way: keep the unit until it lands.
				return s.paymentStore.SetPaymentStatus(ctx, p.OrderID, in.Status, now)
			}
			if in.Status != flashgate.IntentCanceled {
				if in, err = s.provider.Cancel(ctx, p.IntentID); err != nil {
					return err
				}
			}
		}
		if err := s.paymentStore.SetPaymentStatus(ctx, p.OrderID, in.Status, now); err != nil {
			return err
		}
	}
	return s.settlePayment(ctx, p.OrderID)
}
