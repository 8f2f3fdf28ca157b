package orders

import (
	"context"
	"errors"
	"time"

	"github.com/flashgate/flashgate"
)

// The reconciliation's pacing (docs/internals.md, "Reconciliation"):
// each look at a payment that stays open puts its next one off by
// reconcileBase doubled per look so far, up to reconcileCap; the provider
// is asked at most Config.ReconcileRate times a second (a token bucket:
// the per-tick budget), and not at all for as long as a 429 asked.
const (
	reconcileBase = time.Second
	reconcileCap  = 5 * time.Minute
	// DefaultReconcileRate is Config.ReconcileRate's default: under
	// Stripe's test-mode limit (25 a second) with room for checkouts.
	DefaultReconcileRate = 10
)

// backoff is how long after its checks-th look a payment is looked at
// again.
func backoff(checks int) time.Duration {
	if checks >= 16 {
		return reconcileCap
	}
	return min(reconcileBase<<checks, reconcileCap)
}

// retryAfter is what a provider's rate-limited error tells (payments'
// RateLimitedError).
type retryAfter interface{ RetryAfter() time.Duration }

// ReconcilePayments asks the provider about the payments the webhooks
// have not settled: those whose intent succeeded (the order may not have
// followed), those half way through a step (a late decision, an admin
// refund), and those still in flight past the payment window plus the
// grace, which it cancels unless they succeeded (a canceled intent can no
// longer take money, and the next expiry pass releases the order's units).
// It reads them longest due first and looks at as many as its budget
// allows, each then put off (backoff), so that every open payment is
// reached in turn however many there are; the adoption of intents no
// payment names and the second charges not settled take turns with them
// (each side gets at least every other call of the budget while both
// have work); a 429 of the provider pauses it for the Retry-After asked.
// It sets the age of the oldest unsettled payment
// (flashgate_payment_oldest_unsettled_seconds) and returns how many
// payments it looked at. The leader calls it every tick.
func (s *Service) ReconcilePayments(ctx context.Context) (int, error) {
	if s.provider == nil {
		return 0, nil
	}
	now := s.clock.Now()
	if at, ok, err := s.paymentStore.OldestOpenPayment(ctx); err == nil {
		age := 0.0
		if ok {
			age = max(now.Sub(at).Seconds(), 0)
		}
		s.pm.oldest.Set(age)
	}
	s.pmu.Lock()
	paused := now.Before(s.pausedUntil)
	s.pmu.Unlock()
	if paused {
		return 0, nil
	}
	open, err := s.paymentStore.DuePayments(ctx, now.Add(-s.paymentWindow-s.paymentGrace), now, reconcileBatch)
	if err != nil {
		return 0, err
	}
	var first error
	// The other work: events that came before their order's payment was
	// stored (adopt the intent once the order is a row), and second
	// charges not settled yet. It takes turns with the due payments, so
	// that neither starves the other of the budget.
	var side []func() error
	if ids, err := s.paymentStore.UnadoptedIntents(ctx, now.Add(-adoptFor), reconcileBatch); err != nil {
		first = err
	} else {
		for _, id := range ids {
			side = append(side, func() error {
				p, err := s.adopt(ctx, flashgate.PaymentEvent{IntentID: id})
				var ra retryAfter
				switch {
				case err == nil:
					open = append(open, p)
				case errors.As(err, &ra):
					return err // pauses the pass
				case !errors.Is(err, errSecondCharge):
					// Not adoptable yet: tried again next pass, as before.
					s.log.Debug("payment reconciliation: intent not adopted yet", "payment_intent", id, "err", err)
				}
				return nil
			})
		}
	}
	if cs, err := s.paymentStore.DueSecondCharges(ctx, now, reconcileBatch); err != nil {
		if first == nil {
			first = err
		}
	} else {
		for _, c := range cs {
			side = append(side, func() error {
				err := s.reconcileSecond(ctx, c)
				if derr := s.paymentStore.DeferSecondCharge(ctx, c.IntentID, now.Add(backoff(c.Checks))); derr != nil && err == nil {
					err = derr
				}
				return err
			})
		}
	}
	n := 0
	for turn, pi, si := 0, 0, 0; pi < len(open) || si < len(side); turn++ {
		if ctx.Err() != nil || !s.reconcileLimit.Allow() {
			break
		}
		var (
			err   error
			order string
		)
		if si < len(side) && (pi >= len(open) || turn%2 == 1) {
			err = side[si]()
			si++
		} else {
			p := open[pi]
			pi++
			n++
			order = p.OrderID
			err = s.reconcile(ctx, p, now)
			if derr := s.paymentStore.DeferPayment(ctx, p.OrderID, now.Add(backoff(p.Checks))); derr != nil && err == nil {
				err = derr
			}
		}
		var ra retryAfter
		if errors.As(err, &ra) {
			s.pmu.Lock()
			s.pausedUntil = now.Add(ra.RetryAfter())
			s.pmu.Unlock()
			s.log.Info("payment reconciliation paused: the provider asked to wait", "retry_after", ra.RetryAfter())
			break
		}
		if err != nil {
			if first == nil {
				first = err
			}
			s.log.Warn("payment reconciliation", "order", order, "err", err)
		}
	}
	return n, first
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
