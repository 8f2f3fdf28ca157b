package orders

import (
	"context"
	"errors"
	"fmt"

	"github.com/flashgate/flashgate"
)

// Refund refunds a pending or paid order (an admin action: any owner) and
// gives its units back. Refunding a refunded order again returns it; a
// cancelled or expired one is flashgate.ErrNotPayable.
//
// With a payment provider and a payment, the refund is an owned step of
// the payment (refundOwned): it first records that an admin refund owns
// the payment (outcome refunding), so that no settler pays or honours the
// order from then on, then cancels the intent at the provider when it is
// still in flight, or refunds it (idempotency key flashgate-refund-<order>)
// when it succeeded (the cancel answers a success that landed meanwhile),
// and last moves the order to refunded with the outcome refunded. A
// provider that cannot be reached is flashgate.ErrUnavailable with the
// order unchanged; the refund it owns is finished by the reconciliation
// (or by asking again).
func (s *Service) Refund(ctx context.Context, orderID string) (flashgate.Order, error) {
	if s.provider != nil && flashgate.ValidOrderID(orderID) {
		p, err := s.paymentStore.Payment(ctx, orderID)
		switch {
		case err == nil:
			return s.refundOwned(ctx, p)
		case !errors.Is(err, flashgate.ErrNotFound):
			return flashgate.Order{}, fmt.Errorf("reading payment: %w", err)
		}
		switch p, ok, err := s.adoptDrawHold(ctx, orderID); {
		case err != nil:
			return flashgate.Order{}, err
		case ok:
			return s.refundOwned(ctx, p)
		}
		s.yield(ctx, "refund:nopayment")
		return s.refundUnpaid(ctx, orderID)
	}
	return s.transition(ctx, orderID, "", []flashgate.OrderStatus{flashgate.StatusPendingPayment, flashgate.StatusPaid}, flashgate.StatusRefunded)
}

// adoptDrawHold stores, as the payment of orderID, the card hold whose
// capture paid it when it is a draw winner's order (Config.DrawHold): the
// close charges the hold and marks the order paid without a payment row,
// so a refund that found none would otherwise mark the order refunded
// and keep the money. ok is false for any other order (and for an order
// that is not in the database: refundUnpaid answers it).
func (s *Service) adoptDrawHold(ctx context.Context, orderID string) (flashgate.Payment, bool, error) {
	if s.drawHold == nil {
		return flashgate.Payment{}, false, nil
	}
	o, err := s.store.Order(ctx, orderID)
	if errors.Is(err, flashgate.ErrNotFound) {
		return flashgate.Payment{}, false, nil
	}
	if err != nil {
		return flashgate.Payment{}, false, fmt.Errorf("reading order: %w", err)
	}
	intent, err := s.drawHold(ctx, o)
	if err != nil || intent == "" {
		return flashgate.Payment{}, false, err
	}
	in, err := s.provider.Intent(ctx, intent)
	if err != nil {
		return flashgate.Payment{}, false, fmt.Errorf("reading the hold of %s: %w", orderID, err)
	}
	amount, err := flashgate.OrderAmount(o.PriceCents, o.Quantity)
	if err != nil {
		return flashgate.Payment{}, false, fmt.Errorf("order %q: %w", orderID, err)
	}
	p, err := s.paymentStore.InsertPayment(ctx, flashgate.Payment{OrderID: o.ID, IntentID: intent, Status: in.Status,
		AmountCents: amount, Currency: in.Currency}, s.clock.Now())
	if err != nil {
		return flashgate.Payment{}, false, err
	}
	return p, true, nil
}

// refundUnpaid is Refund, with a provider, of an order that had no payment
// when it was read. Only a pending order moves to refunded in one step: a
// payment stored since then is refunded through the provider later (a
// success of a refunded order is a late one, refunded; the checkout cancels
// an intent whose order left pending). An order found paid instead is
// refunded as the owner of its payment when it has one now (a checkout and
// its success landed meanwhile), and with no payment (paid before payments
// were taken at a provider) with no money to give back: an order is paid
// through a payment only once that payment's row is stored, so a paid order
// read before its payment is read as missing has none.
func (s *Service) refundUnpaid(ctx context.Context, orderID string) (flashgate.Order, error) {
	o, err := s.transition(ctx, orderID, "", []flashgate.OrderStatus{flashgate.StatusPendingPayment}, flashgate.StatusRefunded)
	if err == nil || !errors.Is(err, flashgate.ErrNotPayable) || o.Status != flashgate.StatusPaid {
		return o, err
	}
	p, err := s.paymentStore.Payment(ctx, orderID)
	switch {
	case err == nil:
		return s.refundOwned(ctx, p)
	case !errors.Is(err, flashgate.ErrNotFound):
		return flashgate.Order{}, fmt.Errorf("reading payment: %w", err)
	}
	return s.transition(ctx, orderID, "", []flashgate.OrderStatus{flashgate.StatusPaid}, flashgate.StatusRefunded)
}

// refundOwned is Refund of an order with a payment.
func (s *Service) refundOwned(ctx context.Context, p flashgate.Payment) (flashgate.Order, error) {
	for range settleRounds {
		switch p.Outcome {
		case outcomeRefunding, outcomeRefunded:
			return s.finishRefund(ctx, p)
		case "", outcomePaid, outcomeHonouredLate:
			o, err := s.store.Order(ctx, p.OrderID)
			if err != nil {
				return flashgate.Order{}, err
			}
			if o.Status != flashgate.StatusPendingPayment && o.Status != flashgate.StatusPaid {
				return o, fmt.Errorf("order %q is %s: %w", o.ID, o.Status, flashgate.ErrNotPayable)
			}
			won, err := s.step(ctx, flashgate.PaymentStep{OrderID: p.OrderID,
				FromOutcome: []string{"", outcomePaid, outcomeHonouredLate}, ToOutcome: outcomeRefunding})
			if err != nil {
				return flashgate.Order{}, err
			}
			if won {
				p.Outcome = outcomeRefunding
				s.yield(ctx, "refund:owned")
				return s.finishRefund(ctx, p)
			}
		default:
			// A late decision: the order is expired or cancelled.
			o, err := s.store.Order(ctx, p.OrderID)
			if err != nil {
				return flashgate.Order{}, err
			}
			if o.Status == flashgate.StatusRefunded {
				return o, nil
			}
			return o, fmt.Errorf("order %q is %s: %w", o.ID, o.Status, flashgate.ErrNotPayable)
		}
		var err error
		if p, err = s.paymentStore.Payment(ctx, p.OrderID); err != nil {
			return flashgate.Order{}, err
		}
	}
	return flashgate.Order{}, fmt.Errorf("refund of %s: the payment kept moving: %w", p.OrderID, flashgate.ErrUnavailable)
}

// finishRefund finishes an admin refund that owns a payment (outcome
// refunding), idempotently: whoever finishes it (the admin, a settler, the
// reconciliation) cancels or refunds the intent with the same idempotency
// key and races for the same last step.
func (s *Service) finishRefund(ctx context.Context, p flashgate.Payment) (flashgate.Order, error) {
	if p.Outcome == outcomeRefunding {
		status, rid := p.Status, ""
		if status != flashgate.IntentSucceeded {
			// In flight: cancel it, so it can take no money from now on;
			// a success that landed meanwhile is answered as it stands.
			in, err := s.provider.Cancel(ctx, p.IntentID)
			if err != nil {
				return flashgate.Order{}, fmt.Errorf("refund of %s: %w", p.OrderID, err)
			}
			status = in.Status
		}
		if status != flashgate.IntentSucceeded && status != flashgate.IntentCanceled {
			// The provider would not cancel it (a debit processing):
			// the money may still come. The refund keeps owning the
			// payment, and the reconciliation finishes it once the
			// payment lands (refunded if it succeeds, done if not).
			return flashgate.Order{}, fmt.Errorf("refund of %s: the payment is %s, the refund finishes once it lands: %w",
				p.OrderID, status, flashgate.ErrUnavailable)
		}
		if status == flashgate.IntentSucceeded {
			var err error
			if rid, err = s.provider.Refund(ctx, p.IntentID, "flashgate-refund-"+p.OrderID); err != nil {
				return flashgate.Order{}, fmt.Errorf("refund of %s: %w", p.OrderID, err)
			}
		}
		st := flashgate.PaymentStep{OrderID: p.OrderID, FromOutcome: []string{outcomeRefunding}, ToOutcome: outcomeRefunded,
			FromStatus: []flashgate.OrderStatus{flashgate.StatusPendingPayment, flashgate.StatusPaid}, ToStatus: flashgate.StatusRefunded,
			Refunded: rid != "", RefundID: rid, IntentStatus: status, OweRetake: true}
		won, err := s.step(ctx, st)
		if err != nil {
			return flashgate.Order{}, err
		}
		if won {
			s.yield(ctx, "refund:done")
			o, err := s.store.Order(ctx, p.OrderID)
			if err != nil {
				return flashgate.Order{}, err
			}
			s.release(ctx, o)
			s.unretakeOrLog(ctx, o)
			s.refunds.Inc()
			s.audit("payment refunded", p, "an admin refunded the order", "intent_status", status, "refund", rid)
			return o, nil
		}
		// Lost: another actor finished it, or the order left its live
		// status meanwhile (then only the payment's outcome moves).
		st.FromStatus, st.ToStatus, st.OweRetake = nil, "", false
		if _, err := s.step(ctx, st); err != nil {
			return flashgate.Order{}, err
		}
	}
	o, err := s.store.Order(ctx, p.OrderID)
	if err != nil {
		return flashgate.Order{}, err
	}
	if o.Status != flashgate.StatusRefunded {
		return o, fmt.Errorf("order %q is %s: %w", o.ID, o.Status, flashgate.ErrNotPayable)
	}
	// The finisher that won the last step may have stopped before its
	// unretake: every later one (an admin's retry, a settler) gives the
	// units back too (lua.Unretake answers 0 once they are).
	s.unretakeOrLog(ctx, o)
	return o, nil
}

// cancelIntent cancels the intent of an order its buyer cancels, before
// the order is cancelled: a payment in flight can then take no money. It
// answers flashgate.ErrNotPayable when the payment succeeded (the order
// is paid, or will be) and flashgate.ErrUnavailable when the provider
// cannot be reached (nothing changed).
func (s *Service) cancelIntent(ctx context.Context, orderID string) error {
	if s.provider == nil || !flashgate.ValidOrderID(orderID) {
		return nil
	}
	p, err := s.paymentStore.Payment(ctx, orderID)
	if errors.Is(err, flashgate.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading payment: %w", err)
	}
	if !p.InFlight() {
		if p.Outcome != "" || p.Status == flashgate.IntentSucceeded {
			return fmt.Errorf("order %q has a payment: %w", orderID, flashgate.ErrNotPayable)
		}
		return nil
	}
	in, err := s.provider.Cancel(ctx, p.IntentID)
	if err != nil {
		return fmt.Errorf("canceling the payment of %s: %w", orderID, err)
	}
	if err := s.paymentStore.SetPaymentStatus(ctx, orderID, in.Status, s.clock.Now()); err != nil {
		return err
	}
	switch in.Status {
	case flashgate.IntentSucceeded:
		if err := s.settlePayment(ctx, orderID); err != nil {
			s.log.Warn("payment not settled yet; the reconciliation retries", "order", orderID, "err", err)
		}
		return fmt.Errorf("order %q was paid: %w", orderID, flashgate.ErrNotPayable)
	case flashgate.IntentCanceled:
		return nil
	}
	// The provider would not cancel it (a debit processing): the money is
	// coming, so the order keeps its unit until the payment lands.
	return fmt.Errorf("order %q: payment in progress (%s): %w", orderID, in.Status, flashgate.ErrNotPayable)
}
