package orders

import (
	"context"
	"errors"
	"fmt"

	"github.com/flashgate/flashgate"
)

// outcomeCanceled is a second charge canceled before it took any money
// (the other outcomes of a second charge are outcomeRefunding and
// outcomeRefunded, as an admin refund's).
const outcomeCanceled = "canceled"

// errSecondCharge is adopt's answer for an intent whose order's payment is
// another intent: the intent is recorded as a second charge of the order
// (secondCharge), never the order's payment.
var errSecondCharge = errors.New("orders: a second charge of an order that has its payment")

// secondCharge records intent in, whose order's payment p names another
// intent (a payment made outside the checkout, in the provider's
// dashboard for example), as a second charge of the order, once, and
// settles it: it is never honoured (the order has its payment), canceled
// while it can take no money yet, refunded once it succeeded. It returns
// an error only when the record could not be stored (the intent stays
// unadopted and is adopted again); a step that fails is logged and
// finished by the reconciliation (DueSecondCharges).
func (s *Service) secondCharge(ctx context.Context, in flashgate.Intent, p flashgate.Payment) error {
	c, err := s.paymentStore.RecordSecondCharge(ctx, flashgate.SecondCharge{IntentID: in.ID, OrderID: in.OrderID,
		Status: in.Status, AmountCents: in.AmountCents, Currency: in.Currency}, s.clock.Now())
	if err != nil {
		return fmt.Errorf("recording second charge %s of %s: %w", in.ID, in.OrderID, err)
	}
	if c.Outcome == "" {
		s.log.Warn("an intent names an order whose payment is another intent: a second charge", "order", in.OrderID,
			"payment_intent", in.ID, "order_payment_intent", p.IntentID, "status", in.Status)
	}
	if err := s.settleSecond(ctx, c, in); err != nil {
		s.log.Warn("second charge not settled yet; the reconciliation retries", "order", in.OrderID, "payment_intent", in.ID, "err", err)
	}
	return nil
}

// settleSecond takes second charge c on from in, its intent as the
// provider last told it. Each step is a compare-and-set on c's outcome
// that one actor wins; the refund is keyed by the intent
// (flashgate-second-refund-<intent>), so two actors refunding at once
// make one refund.
func (s *Service) settleSecond(ctx context.Context, c flashgate.SecondCharge, in flashgate.Intent) error {
	switch c.Outcome {
	case "":
		switch in.Status {
		case flashgate.IntentSucceeded, flashgate.IntentCanceled, flashgate.IntentProcessing:
		default:
			// Still collectable: cancel it, so that it can take no money
			// (one that succeeded meanwhile is answered as it stands).
			var err error
			if in, err = s.provider.Cancel(ctx, c.IntentID); err != nil {
				return fmt.Errorf("canceling second charge %s: %w", c.IntentID, err)
			}
		}
		now := s.clock.Now()
		switch in.Status {
		case flashgate.IntentCanceled:
			won, err := s.paymentStore.StepSecondCharge(ctx, c.IntentID, []string{""}, outcomeCanceled, in.Status, "", now)
			if err == nil && won {
				s.audit("second charge canceled", secondPayment(c), "the order's payment is another intent")
			}
			return err
		case flashgate.IntentSucceeded:
			// Won or lost, the refund is recorded as under way: the
			// loser goes on to the same keyed refund.
			if _, err := s.paymentStore.StepSecondCharge(ctx, c.IntentID, []string{""}, outcomeRefunding, in.Status, "", now); err != nil {
				return err
			}
		default:
			// In progress (processing): the money is on its way; it is
			// looked at again until it lands.
			_, err := s.paymentStore.StepSecondCharge(ctx, c.IntentID, []string{""}, "", in.Status, "", now)
			return err
		}
		var err error
		if c, err = s.paymentStore.SecondCharge(ctx, c.IntentID); err != nil {
			return err
		}
		if c.Outcome != outcomeRefunding {
			return nil
		}
	case outcomeRefunding:
	default:
		return nil // refunded or canceled: settled
	}
	rid, err := s.provider.Refund(ctx, c.IntentID, "flashgate-second-refund-"+c.IntentID)
	if err != nil {
		return fmt.Errorf("refunding second charge %s: %w", c.IntentID, err)
	}
	won, err := s.paymentStore.StepSecondCharge(ctx, c.IntentID, []string{outcomeRefunding}, outcomeRefunded, "", rid, s.clock.Now())
	if err != nil || !won {
		return err
	}
	s.pm.results.WithLabelValues("second_refunded").Inc()
	s.audit("second charge refunded", secondPayment(c), "the order's payment is another intent", "refund", rid,
		"amount_cents", c.AmountCents, "currency", c.Currency)
	return nil
}

// reconcileSecond is the reconciliation's look at a second charge not
// settled: its intent read again unless its refund is under way, then
// settleSecond.
func (s *Service) reconcileSecond(ctx context.Context, c flashgate.SecondCharge) error {
	in := flashgate.Intent{ID: c.IntentID, OrderID: c.OrderID, Status: c.Status}
	if c.Outcome == "" {
		var err error
		if in, err = s.provider.Intent(ctx, c.IntentID); err != nil {
			return err
		}
	}
	return s.settleSecond(ctx, c, in)
}

// secondPayment is c as the audit log names a payment.
func secondPayment(c flashgate.SecondCharge) flashgate.Payment {
	return flashgate.Payment{OrderID: c.OrderID, IntentID: c.IntentID, AmountCents: c.AmountCents, Currency: c.Currency}
}
