package orders

import (
	"context"
	"fmt"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/buckets"
	"github.com/flashgate/flashgate/lua"
)

// settleRounds bounds how often one settle reads a payment again after
// losing a step to another actor: each lost step means the payment moved
// on, and a payment has fewer steps than this.
const settleRounds = 8

// settlePayment brings an order in line with its payment: a succeeded
// payment pays a pending order, and after the order expired (or was
// cancelled) it is honoured when a unit can be taken again for the buyer,
// else refunded. Each step is a compare-and-set on the payment's outcome
// and the order's status (PaymentStore.StepPayment) that exactly one actor
// wins; a loser reads the payment again and goes on from the winner's
// result, finishing only the step the winner recorded. So any number of
// settlers (a webhook on each gateway, the reconciliation) and an admin
// refund end in one outcome, and a settle that stops half way is finished
// by the next one.
func (s *Service) settlePayment(ctx context.Context, orderID string) error {
	for range settleRounds {
		p, err := s.paymentStore.Payment(ctx, orderID)
		if err != nil {
			return err
		}
		if p.Status != flashgate.IntentSucceeded && p.Outcome == "" {
			return nil
		}
		s.yield(ctx, "settle:read")
		var again bool
		switch p.Outcome {
		case outcomePaid, outcomeHonouredLate, outcomeRefundedLate, outcomeRefunded:
			return nil
		case outcomeRefunding:
			_, err := s.finishRefund(ctx, p)
			return err
		case outcomeRefundingLate:
			return s.finishRefundLate(ctx, p, "resumed")
		case outcomeLatePending:
			again, err = s.decideLate(ctx, p)
		case "":
			again, err = s.settleSuccess(ctx, p)
		default:
			return fmt.Errorf("payment of %s: unknown outcome %q", orderID, p.Outcome)
		}
		if err != nil || !again {
			return err
		}
	}
	return fmt.Errorf("payment of %s still moving after %d rounds: %w", orderID, settleRounds, flashgate.ErrUnavailable)
}

// step applies one owned step and reports whether this actor won it.
func (s *Service) step(ctx context.Context, st flashgate.PaymentStep) (bool, error) {
	won, err := s.paymentStore.StepPayment(ctx, st, s.clock.Now())
	if err != nil {
		return false, err
	}
	return won, nil
}

// settleSuccess applies a success not yet settled (outcome ""): a pending
// order is paid, with the outcome, in one step; an order that left its
// live status makes the payment a late one. It reports whether the
// payment moved on, to be read again.
func (s *Service) settleSuccess(ctx context.Context, p flashgate.Payment) (bool, error) {
	o, err := s.store.Order(ctx, p.OrderID)
	if err != nil {
		return false, err
	}
	switch o.Status {
	case flashgate.StatusPendingPayment:
		won, err := s.step(ctx, flashgate.PaymentStep{OrderID: p.OrderID, FromOutcome: []string{""}, ToOutcome: outcomePaid,
			FromStatus: []flashgate.OrderStatus{flashgate.StatusPendingPayment}, ToStatus: flashgate.StatusPaid})
		if err != nil || !won {
			return !won, err // lost: the order expired, or another settler paid it
		}
		s.pm.results.WithLabelValues("succeeded").Inc()
		return false, nil
	case flashgate.StatusPaid:
		_, err := s.step(ctx, flashgate.PaymentStep{OrderID: p.OrderID, FromOutcome: []string{""}, ToOutcome: outcomePaid})
		return false, err
	case flashgate.StatusRefunded:
		// An admin refunded the order before its payment was stored.
		return s.startRefundLate(ctx, p, "order refunded before the payment succeeded")
	}
	won, err := s.step(ctx, flashgate.PaymentStep{OrderID: p.OrderID, FromOutcome: []string{""}, ToOutcome: outcomeLatePending})
	if err != nil {
		return false, err
	}
	_ = won // either way the payment moved on: read it again
	return true, nil
}

// decideLate makes a late payment's decision (outcome late_pending): the
// retake in Redis decides once per order and records it, so every settler
// gets the same answer; the step that follows (honour or refund) is then
// won by one of them. It reports whether the payment moved on.
func (s *Service) decideLate(ctx context.Context, p flashgate.Payment) (bool, error) {
	o, err := s.store.Order(ctx, p.OrderID)
	if err != nil {
		return false, err
	}
	sale, err := s.store.Sale(ctx, o.SaleID)
	if err != nil {
		return false, err
	}
	if sale.Archived || sale.State == flashgate.StateClosed {
		// Nothing is sold after the close; an archived sale's Redis state
		// is gone for good (no re-sync rebuilds it).
		return s.startRefundLate(ctx, p, "the sale has closed")
	}
	l := buckets.Layout(sale)
	if l.Bucketed() && o.Bucket != l.Home(o.UserID) {
		// A spilled order's buyer is known to the home bucket only by a
		// marker; Retake guards one bucket's buyers hash, so it cannot
		// keep the one-per-user rule here.
		return s.startRefundLate(ctx, p, "the order was spilled to another bucket of a bucketed sale")
	}
	// The database records the retake as pending before Redis makes it:
	// a rebuild of the sale between the retake and the honour step then
	// holds its units (its final lua.Resync) instead of selling them again.
	pend, err := s.paymentStore.PendRetake(ctx, p.OrderID, s.clock.Now())
	if err != nil {
		return false, err
	}
	if !pend {
		return true, nil // the payment moved on: read it again
	}
	code, err := s.retake(ctx, l.Tag(o.Bucket), o.ID, o.UserID, o.Quantity, o.Variant)
	if err != nil {
		return false, fmt.Errorf("retaking units: %w: %w", flashgate.ErrUnavailable, err)
	}
	s.yield(ctx, "retake:done")
	switch code {
	case lua.RetakeOK:
		won, err := s.step(ctx, flashgate.PaymentStep{OrderID: p.OrderID, FromOutcome: []string{outcomeLatePending}, ToOutcome: outcomeHonouredLate,
			FromStatus: []flashgate.OrderStatus{flashgate.StatusExpired, flashgate.StatusCancelled}, ToStatus: flashgate.StatusPaid, Retake: true})
		if err != nil {
			return false, err
		}
		if !won {
			return true, s.unretakeRefunded(ctx, o)
		}
		s.pm.results.WithLabelValues("late_honoured").Inc()
		s.audit("late payment honoured", p, "a unit was free for the buyer; the order is paid")
		return false, nil
	case lua.RetakeNoSale:
		return false, fmt.Errorf("sale %s not in Redis: %w", o.SaleID, flashgate.ErrUnavailable)
	case lua.RetakeRetry:
		return false, fmt.Errorf("sale %s paused or being rebuilt: %w", o.SaleID, flashgate.ErrUnavailable)
	case lua.RetakeClosed:
		return s.startRefundLate(ctx, p, "the sale has closed")
	case lua.RetakeHolds:
		return s.startRefundLate(ctx, p, "the buyer holds another order of the sale")
	case lua.RetakeHeld:
		return s.startRefundLate(ctx, p, "the sale was rebuilt in Redis while the retake was pending")
	default:
		return s.startRefundLate(ctx, p, "sold out: no unit left for the order")
	}
}

// unretakeRefunded gives back the units this settler's retake took when
// the honour step was lost to a refund (outcome refunding_late or
// refunded_late): that refund's unretake may have run before this retake.
// The unretake is idempotent, so a refund still under way that gives them
// back too changes nothing more.
func (s *Service) unretakeRefunded(ctx context.Context, o flashgate.Order) error {
	p, err := s.paymentStore.Payment(ctx, o.ID)
	if err != nil || (p.Outcome != outcomeRefundedLate && p.Outcome != outcomeRefundingLate) {
		return err
	}
	return s.unretake(ctx, o, true)
}

// startRefundLate records the decision to refund a late payment
// (refunding_late) and, when this actor won that step, refunds it. It
// reports whether another actor moved the payment first.
func (s *Service) startRefundLate(ctx context.Context, p flashgate.Payment, reason string) (bool, error) {
	won, err := s.step(ctx, flashgate.PaymentStep{OrderID: p.OrderID, FromOutcome: []string{"", outcomeLatePending}, ToOutcome: outcomeRefundingLate,
		DropRetake: true})
	if err != nil || !won {
		return !won, err
	}
	return false, s.finishRefundLate(ctx, p, reason)
}

// finishRefundLate refunds a payment whose late decision is refunding_late,
// once: the refund's idempotency key is the order's, and the last step
// (refunded_late) is won by one actor.
//
// Before the refund it gives back the units a retake of the order took
// (lua.Unretake, a no-op when none was recorded): the refund may follow a
// recorded retake (the sale closed in the database after it, or a settler
// stopped between the retake and its honour step), and no retakes row will
// count those units. A failure leaves the payment refunding_late, for the
// next settle (the reconciliation) to finish.
func (s *Service) finishRefundLate(ctx context.Context, p flashgate.Payment, reason string) error {
	o, err := s.store.Order(ctx, p.OrderID)
	if err != nil {
		return err
	}
	if err := s.unretake(ctx, o, true); err != nil {
		return fmt.Errorf("giving back the units of %s: %w: %w", p.OrderID, flashgate.ErrUnavailable, err)
	}
	rid, err := s.provider.Refund(ctx, p.IntentID, "flashgate-late-refund-"+p.OrderID)
	if err != nil {
		return err
	}
	won, err := s.step(ctx, flashgate.PaymentStep{OrderID: p.OrderID, FromOutcome: []string{outcomeRefundingLate}, ToOutcome: outcomeRefundedLate,
		Refunded: true, RefundID: rid})
	if err != nil || !won {
		return err
	}
	s.pm.results.WithLabelValues("late_refunded").Inc()
	status := ""
	if o, err := s.store.Order(ctx, p.OrderID); err == nil {
		status = string(o.Status)
	}
	s.audit("late payment refunded", p, reason, "order_status", status, "refund", rid)
	return nil
}

// audit writes one line of the audit log about a payment.
func (s *Service) audit(msg string, p flashgate.Payment, reason string, kv ...any) {
	args := append([]any{"order", p.OrderID, "payment_intent", p.IntentID, "reason", reason}, kv...)
	l := s.auditLogger
	if l == nil {
		l = s.log.With("log", "audit")
	}
	l.Info(msg, args...)
}

// yield lets a test (or an interleaving explorer) run another actor at a
// named point between two steps (Config.Yield); nothing in production.
func (s *Service) yield(ctx context.Context, point string) {
	if s.hook != nil {
		s.hook(ctx, point)
	}
}
