package orders

import (
	"context"
	"errors"
	"fmt"

	"github.com/flashgate/flashgate"
)

// Webhook handles one webhook delivery of the provider: it verifies the
// signature (flashgate.ErrBadSignature, nothing changed), stores the event
// id once with the status it tells and the flag it sets, in one
// transaction (a redelivery changes nothing), and then applies it. An event the database cannot apply yet (an order not yet
// stored) is applied by the reconciliation, which reads the intent. An
// event that names no order (a charge's) about an intent no payment row
// names, whose intent cannot be read now, is refused (the provider
// delivers it again) and adopted by a redelivery.
func (s *Service) Webhook(ctx context.Context, payload []byte, signature string) error {
	if s.provider == nil {
		return fmt.Errorf("webhook: no payment provider: %w", flashgate.ErrNotFound)
	}
	ev, err := s.provider.ParseEvent(payload, signature)
	if err != nil {
		if errors.Is(err, flashgate.ErrBadSignature) {
			s.pm.badSigs.Inc()
		}
		return err
	}
	if ev.ID == "" {
		return fmt.Errorf("webhook: event without id: %w", flashgate.ErrBadRequest)
	}
	if ev.EntryID != "" {
		// A draw entry's hold, not an order's payment: its steps are
		// compare-and-sets on the entry, so a redelivery changes nothing.
		if s.holdEvents == nil {
			return nil
		}
		return s.holdEvents(ctx, ev)
	}
	status := ""
	switch ev.Type {
	case flashgate.EventIntentSucceeded, flashgate.EventIntentFailed:
		status = ev.Status
	case flashgate.EventIntentCanceled:
		// A canceled intent leaves the reconciliation and lets the expiry
		// release its unit: take it from the provider, not the event (a
		// signed event may be stale, and the intent may have succeeded
		// since). A provider that cannot be reached is
		// flashgate.ErrUnavailable: nothing is stored, the event comes again.
		in, err := s.provider.Intent(ctx, ev.IntentID)
		switch {
		case err == nil:
			status = in.Status
		case !errors.Is(err, flashgate.ErrNotFound):
			return fmt.Errorf("webhook: reading intent %s: %w", ev.IntentID, err)
		}
		// An intent the provider does not know: stored, nothing applied.
	}
	now := s.clock.Now()
	fresh, err := s.paymentStore.RecordEvent(ctx, ev.ID, ev.Type, ev.IntentID, ev.OrderID, status, now)
	if err != nil || ev.IntentID == "" || (!fresh && ev.OrderID != "") {
		return err
	}
	p, err := s.paymentStore.PaymentByIntent(ctx, ev.IntentID)
	switch {
	case errors.Is(err, flashgate.ErrNotFound):
		// Before the row: the checkout's insert has not happened yet (or
		// its answer was lost). Adopt the intent from its metadata when
		// the order is stored; else the reconciliation's next pass does.
		p, err = s.adopt(ctx, ev)
		if errors.Is(err, errSecondCharge) {
			return nil // recorded and settled as a second charge, never the order's payment
		}
	case err == nil && !fresh:
		return nil // a redelivery of an event applied before
	}
	if err != nil {
		if ev.OrderID == "" && !errors.Is(err, flashgate.ErrNotFound) {
			// An event that names no order (a charge's) is not found by
			// the reconciliation's adoption (UnadoptedIntents reads the
			// order from the event): refused, so that the provider
			// delivers it again, and the redelivery adopts the intent
			// (explorer seed 20261639: a late payment's charge.succeeded,
			// its intent's read lost, acknowledged and never applied, the
			// payment_intent.succeeded lost with a killed gateway).
			return fmt.Errorf("webhook: adopting intent %s: %w", ev.IntentID, err)
		}
		s.log.Info("webhook stored; applied later", "event", ev.ID, "type", ev.Type, "err", err)
		return nil
	}
	// The flags of charge.refunded and charge.dispute.created were set
	// with the event id (RecordEvent), or with the row (InsertPayment).
	switch ev.Type {
	case flashgate.EventIntentFailed:
		s.pm.results.WithLabelValues("failed").Inc()
	case flashgate.EventDisputeCreated:
		s.audit("payment disputed", p, "dispute opened at the provider")
	}
	if err := s.settlePayment(ctx, p.OrderID); err != nil {
		s.log.Warn("payment not settled yet; the reconciliation retries", "order", p.OrderID, "err", err)
	}
	return nil
}

// adopt stores the payment of an intent an event names before its
// checkout stored it, reading the intent's current state. An intent whose
// order already has its payment, another intent, is a second charge of
// the order: it is recorded and settled as one (secondCharge), and adopt
// answers errSecondCharge; so it does for an intent recorded as one
// before.
func (s *Service) adopt(ctx context.Context, ev flashgate.PaymentEvent) (flashgate.Payment, error) {
	if c, err := s.paymentStore.SecondCharge(ctx, ev.IntentID); err == nil {
		if c.Outcome == "" || c.Outcome == outcomeRefunding {
			if err := s.reconcileSecond(ctx, c); err != nil {
				s.log.Warn("second charge not settled yet; the reconciliation retries", "order", c.OrderID, "payment_intent", c.IntentID, "err", err)
			}
		}
		return flashgate.Payment{}, fmt.Errorf("intent %s: %w", ev.IntentID, errSecondCharge)
	} else if !errors.Is(err, flashgate.ErrNotFound) {
		return flashgate.Payment{}, err
	}
	in, err := s.provider.Intent(ctx, ev.IntentID)
	if err != nil {
		return flashgate.Payment{}, err
	}
	if in.OrderID == "" {
		return flashgate.Payment{}, fmt.Errorf("intent %s names no order: %w", in.ID, flashgate.ErrNotFound)
	}
	if _, err := s.store.Order(ctx, in.OrderID); err != nil {
		return flashgate.Payment{}, err
	}
	p, err := s.paymentStore.InsertPayment(ctx, flashgate.Payment{OrderID: in.OrderID, IntentID: in.ID, Status: in.Status,
		AmountCents: in.AmountCents, Currency: in.Currency}, s.clock.Now())
	if err != nil || p.IntentID == in.ID {
		return p, err
	}
	if err := s.secondCharge(ctx, in, p); err != nil {
		return flashgate.Payment{}, err
	}
	return flashgate.Payment{}, fmt.Errorf("intent %s: %w", in.ID, errSecondCharge)
}
