package orders

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/buckets"
	"github.com/flashgate/flashgate/internal/promreg"
	"github.com/flashgate/flashgate/lua"
)

// PaymentProvider takes the money of an order at a payment provider;
// *payments.Stripe satisfies it. Its failures to reach the provider are
// flashgate.ErrUnavailable.
type PaymentProvider interface {
	// Checkout creates the order's payment, idempotently: the same order
	// gets the same intent, however often it is called.
	Checkout(ctx context.Context, o flashgate.Order, amountCents int64, currency string) (flashgate.Intent, error)
	// Intent reads an intent's current state.
	Intent(ctx context.Context, intentID string) (flashgate.Intent, error)
	// Cancel cancels an intent that has not succeeded; one that has is
	// returned as it stands.
	Cancel(ctx context.Context, intentID string) (flashgate.Intent, error)
	// Refund refunds an intent in full under an idempotency key.
	Refund(ctx context.Context, intentID, key string) (refundID string, err error)
	// ParseEvent verifies a webhook's signature and reduces its event;
	// a bad or stale signature is flashgate.ErrBadSignature.
	ParseEvent(payload []byte, signature string) (flashgate.PaymentEvent, error)
}

// PaymentStore keeps payments and webhook events; *sqldb.DB satisfies it.
type PaymentStore interface {
	InsertPayment(ctx context.Context, p flashgate.Payment, now time.Time) (flashgate.Payment, error)
	Payment(ctx context.Context, orderID string) (flashgate.Payment, error)
	PaymentByIntent(ctx context.Context, intentID string) (flashgate.Payment, error)
	SetPaymentStatus(ctx context.Context, orderID, status string, now time.Time) error
	MarkPayment(ctx context.Context, orderID string, refunded, disputed bool, refundID string, now time.Time) error
	SettlePayment(ctx context.Context, orderID string, from []string, to string, now time.Time) (bool, error)
	RecordEvent(ctx context.Context, eventID, typ, intentID, orderID, status string, now time.Time) (bool, error)
	OpenPayments(ctx context.Context, createdBefore time.Time, limit int) ([]flashgate.Payment, error)
	SalePayments(ctx context.Context, saleID string) (map[string]flashgate.Payment, error)
	UnadoptedIntents(ctx context.Context, since time.Time, limit int) ([]string, error)
}

// The outcomes of a payment (flashgate.Payment.Outcome). latePending and
// refundingLate are the steps of a late payment's decision, recorded
// before each is acted on, so that a decider that stops half way is
// finished by the reconciliation the same way: never both, never neither.
const (
	outcomePaid          = "paid"
	outcomeHonouredLate  = "honoured_late"
	outcomeRefundedLate  = "refunded_late"
	outcomeLatePending   = "late_pending"
	outcomeRefundingLate = "refunding_late"
)

// adoptFor is how long an event about an intent no payment names is
// looked at again (its order may not be stored yet).
const adoptFor = time.Hour

// reconcileBatch is how many open payments one reconciliation pass reads.
const reconcileBatch = 200

// paymentMetrics count what the payments came to.
type paymentMetrics struct {
	results *prometheus.CounterVec
	badSigs prometheus.Counter
}

func newPaymentMetrics(reg prometheus.Registerer) (*paymentMetrics, error) {
	m := &paymentMetrics{
		results: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flashgate_payments_total",
			Help: "Payments by result: succeeded (order paid in time), failed, late_honoured, late_refunded."}, []string{"result"}),
		badSigs: prometheus.NewCounter(prometheus.CounterOpts{Name: "flashgate_webhook_signature_failures_total",
			Help: "Webhooks refused for a bad or stale signature."}),
	}
	var err error
	if m.results, err = promreg.Register(reg, m.results); err != nil {
		return nil, err
	}
	if m.badSigs, err = promreg.Register(reg, m.badSigs); err != nil {
		return nil, err
	}
	for _, r := range []string{"succeeded", "failed", "late_honoured", "late_refunded"} {
		m.results.WithLabelValues(r)
	}
	return m, nil
}

// Paying reports whether the Service takes payments at a provider.
func (s *Service) Paying() bool { return s.provider != nil }

// checkout is Pay with a provider: it creates (or finds again) the
// order's intent and answers the order as paying, with what the page
// needs to collect the payment.
func (s *Service) checkout(ctx context.Context, orderID, userID string) (flashgate.Order, error) {
	if !flashgate.ValidOrderID(orderID) {
		return flashgate.Order{}, fmt.Errorf("order %q: %w", orderID, flashgate.ErrNotFound)
	}
	o, err := s.persistedOrder(ctx, orderID, userID)
	if err != nil {
		return flashgate.Order{}, err
	}
	if o.UserID != userID {
		return flashgate.Order{}, fmt.Errorf("order %q: %w", orderID, flashgate.ErrNotFound)
	}
	p, err := s.paymentStore.Payment(ctx, orderID)
	switch {
	case err == nil:
		return s.withPayment(o, p), nil
	case !errors.Is(err, flashgate.ErrNotFound):
		return flashgate.Order{}, fmt.Errorf("reading payment: %w", err)
	}
	if o.Status != flashgate.StatusPendingPayment {
		return o, fmt.Errorf("order %q is %s: %w", orderID, o.Status, flashgate.ErrNotPayable)
	}
	sale, err := s.store.Sale(ctx, o.SaleID)
	if err != nil {
		return flashgate.Order{}, fmt.Errorf("reading sale: %w", err)
	}
	currency := sale.Currency
	if currency == "" {
		currency = s.currency
	}
	in, err := s.provider.Checkout(ctx, o, o.PriceCents*o.Quantity, currency)
	if err != nil {
		return flashgate.Order{}, fmt.Errorf("checkout of %s: %w", orderID, err)
	}
	p, err = s.paymentStore.InsertPayment(ctx, flashgate.Payment{OrderID: o.ID, IntentID: in.ID, Status: in.Status,
		AmountCents: o.PriceCents * o.Quantity, Currency: currency}, s.clock.Now())
	if err != nil {
		return flashgate.Order{}, err
	}
	p.Status = in.Status
	o2 := s.withPayment(o, p)
	o2.ClientSecret = in.ClientSecret
	// The order may have expired between the read and the insert; the
	// payment then settles as a late one if it succeeds.
	return o2, nil
}

// withPayment is o as the order routes answer it with payment p: paying
// while p is in flight, the intent named.
func (s *Service) withPayment(o flashgate.Order, p flashgate.Payment) flashgate.Order {
	o.PaymentIntent = p.IntentID
	if o.Status == flashgate.StatusPendingPayment && p.InFlight() {
		o.Status = flashgate.StatusPaying
	}
	return o
}

// clientSecret reads the client secret of an order's intent again (it is
// never stored).
func (s *Service) clientSecret(ctx context.Context, o flashgate.Order) flashgate.Order {
	if o.PaymentIntent == "" {
		return o
	}
	if in, err := s.provider.Intent(ctx, o.PaymentIntent); err == nil {
		o.ClientSecret = in.ClientSecret
	}
	return o
}

// Webhook handles one webhook delivery of the provider: it verifies the
// signature (flashgate.ErrBadSignature, nothing changed), stores the event
// id once with the status it tells (a redelivery changes nothing) and then
// applies it. An event the database cannot apply yet (an order not yet
// stored) is applied by the reconciliation, which reads the intent.
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
	now := s.clock.Now()
	status := ""
	switch ev.Type {
	case flashgate.EventIntentSucceeded, flashgate.EventIntentFailed, flashgate.EventIntentCanceled:
		status = ev.Status
	}
	fresh, err := s.paymentStore.RecordEvent(ctx, ev.ID, ev.Type, ev.IntentID, ev.OrderID, status, now)
	if err != nil || !fresh {
		return err
	}
	if ev.IntentID == "" {
		return nil
	}
	p, err := s.paymentStore.PaymentByIntent(ctx, ev.IntentID)
	if errors.Is(err, flashgate.ErrNotFound) {
		// Before the row: the checkout's insert has not happened yet (or
		// its answer was lost). Adopt the intent from its metadata when
		// the order is stored; else the reconciliation's next pass does.
		p, err = s.adopt(ctx, ev)
	}
	if err != nil {
		s.log.Info("webhook stored; applied later", "event", ev.ID, "type", ev.Type, "err", err)
		return nil
	}
	switch ev.Type {
	case flashgate.EventIntentFailed:
		s.pm.results.WithLabelValues("failed").Inc()
	case flashgate.EventChargeRefunded:
		if err := s.paymentStore.MarkPayment(ctx, p.OrderID, true, false, "", now); err != nil {
			return err
		}
	case flashgate.EventDisputeCreated:
		if err := s.paymentStore.MarkPayment(ctx, p.OrderID, false, true, "", now); err != nil {
			return err
		}
		s.audit("payment disputed", p, "dispute opened at the provider")
	}
	if err := s.settlePayment(ctx, p.OrderID); err != nil {
		s.log.Warn("payment not settled yet; the reconciliation retries", "order", p.OrderID, "err", err)
	}
	return nil
}

// adopt stores the payment of an intent an event names before its
// checkout stored it, reading the intent's current state.
func (s *Service) adopt(ctx context.Context, ev flashgate.PaymentEvent) (flashgate.Payment, error) {
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
	return s.paymentStore.InsertPayment(ctx, flashgate.Payment{OrderID: in.OrderID, IntentID: in.ID, Status: in.Status,
		AmountCents: in.AmountCents, Currency: in.Currency}, s.clock.Now())
}

// settlePayment brings an order in line with its payment: a succeeded payment
// pays a pending order, and after the order expired (or was cancelled) it
// is honoured when a unit can be taken again for the buyer, else refunded.
// Every step is recorded before the next, and each is idempotent, so a
// settle that stops half way is finished by the next one.
func (s *Service) settlePayment(ctx context.Context, orderID string) error {
	p, err := s.paymentStore.Payment(ctx, orderID)
	if err != nil {
		return err
	}
	if p.Status != flashgate.IntentSucceeded && p.Outcome == "" {
		return nil
	}
	o, err := s.store.Order(ctx, orderID)
	if err != nil {
		return err
	}
	now := s.clock.Now()
	switch p.Outcome {
	case outcomePaid, outcomeHonouredLate, outcomeRefundedLate:
		return nil
	case outcomeRefundingLate:
		return s.refundLate(ctx, p, o, "resumed")
	case "":
		if o.Status == flashgate.StatusPendingPayment {
			got, err := s.store.Transition(ctx, orderID, []flashgate.OrderStatus{flashgate.StatusPendingPayment}, flashgate.StatusPaid, now)
			if err != nil && !(errors.Is(err, flashgate.ErrNotPayable) && got.Status == flashgate.StatusPaid) {
				if errors.Is(err, flashgate.ErrNotPayable) {
					return s.settlePayment(ctx, orderID) // it expired meanwhile: late
				}
				return err
			}
			if ok, err := s.paymentStore.SettlePayment(ctx, orderID, []string{""}, outcomePaid, now); err != nil || !ok {
				return err
			}
			s.pm.results.WithLabelValues("succeeded").Inc()
			return nil
		}
		if o.Status == flashgate.StatusPaid {
			_, err := s.paymentStore.SettlePayment(ctx, orderID, []string{""}, outcomePaid, now)
			return err
		}
		if o.Status == flashgate.StatusRefunded {
			// An admin refunded the order before its payment came in.
			return s.refundLate(ctx, p, o, "order refunded before the payment succeeded")
		}
		if _, err := s.paymentStore.SettlePayment(ctx, orderID, []string{""}, outcomeLatePending, now); err != nil {
			return err
		}
	}
	// late_pending: the payment succeeded after the order released its
	// units. Take them again if the buyer can have them.
	sale, err := s.store.Sale(ctx, o.SaleID)
	if err != nil {
		return err
	}
	l := buckets.Layout(sale)
	if l.Bucketed() && o.Bucket != l.Home(o.UserID) {
		// A spilled order's buyer is known to the home bucket only by a
		// marker; Retake guards one bucket's buyers hash, so it cannot
		// keep the one-per-user rule here.
		return s.refundLate(ctx, p, o, "the order was spilled to another bucket of a bucketed sale")
	}
	tag := l.Tag(o.Bucket)
	code, err := lua.Retake.Run(ctx, s.rdb, lua.RetakeKeys(tag), o.ID, o.UserID, o.Quantity, o.Variant).Int()
	if err != nil {
		return fmt.Errorf("retaking units: %w: %w", flashgate.ErrUnavailable, err)
	}
	switch code {
	case lua.RetakeOK:
		got, err := s.store.Transition(ctx, orderID, []flashgate.OrderStatus{flashgate.StatusExpired, flashgate.StatusCancelled}, flashgate.StatusPaid, now)
		if err != nil && !(errors.Is(err, flashgate.ErrNotPayable) && got.Status == flashgate.StatusPaid) {
			return err
		}
		ok, err := s.paymentStore.SettlePayment(ctx, orderID, []string{outcomeLatePending}, outcomeHonouredLate, now)
		if err != nil || !ok {
			return err
		}
		s.pm.results.WithLabelValues("late_honoured").Inc()
		s.audit("late payment honoured", p, "a unit was free for the buyer; the order is paid")
		return nil
	case lua.RetakeNoSale:
		return fmt.Errorf("sale %s not in Redis: %w", o.SaleID, flashgate.ErrUnavailable)
	case lua.RetakeHolds:
		return s.refundLate(ctx, p, o, "the buyer holds another order of the sale")
	default:
		return s.refundLate(ctx, p, o, "sold out: no unit left for the order")
	}
}

// refundLate refunds a payment that came too late for its order, once:
// the decision is recorded (refunding_late) before the provider is asked,
// and the refund's idempotency key is the order's.
func (s *Service) refundLate(ctx context.Context, p flashgate.Payment, o flashgate.Order, reason string) error {
	now := s.clock.Now()
	if p.Outcome != outcomeRefundingLate {
		ok, err := s.paymentStore.SettlePayment(ctx, p.OrderID, []string{"", outcomeLatePending}, outcomeRefundingLate, now)
		if err != nil {
			return err
		}
		if !ok {
			return s.settlePayment(ctx, p.OrderID) // another decider moved it
		}
	}
	rid, err := s.provider.Refund(ctx, p.IntentID, "flashgate-late-refund-"+p.OrderID)
	if err != nil {
		return err
	}
	if err := s.paymentStore.MarkPayment(ctx, p.OrderID, true, false, rid, now); err != nil {
		return err
	}
	ok, err := s.paymentStore.SettlePayment(ctx, p.OrderID, []string{outcomeRefundingLate}, outcomeRefundedLate, now)
	if err != nil || !ok {
		return err
	}
	s.pm.results.WithLabelValues("late_refunded").Inc()
	s.audit("late payment refunded", p, reason, "order_status", string(o.Status), "refund", rid)
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

// OrderPayments returns the payments of a sale's orders by order id (none
// with simulated payments); an unknown sale is flashgate.ErrNotFound.
func (s *Service) OrderPayments(ctx context.Context, saleID string) (map[string]flashgate.Payment, error) {
	if !flashgate.ValidSaleID(saleID) {
		return nil, fmt.Errorf("sale %q: %w", saleID, flashgate.ErrNotFound)
	}
	if _, err := s.store.Sale(ctx, saleID); err != nil {
		return nil, err
	}
	if s.paymentStore == nil {
		return nil, nil
	}
	return s.paymentStore.SalePayments(ctx, saleID)
}

// OrderPayment returns an order's payment; flashgate.ErrNotFound without
// one (always, with simulated payments).
func (s *Service) OrderPayment(ctx context.Context, orderID string) (flashgate.Payment, error) {
	if s.paymentStore == nil || !flashgate.ValidOrderID(orderID) {
		return flashgate.Payment{}, fmt.Errorf("payment of %q: %w", orderID, flashgate.ErrNotFound)
	}
	return s.paymentStore.Payment(ctx, orderID)
}

// refundPayment refunds at the provider the succeeded payment of an order
// an admin refunds (nothing without a provider or a succeeded payment).
func (s *Service) refundPayment(ctx context.Context, orderID string) error {
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
	if p.Status != flashgate.IntentSucceeded || p.Outcome == outcomeRefundedLate || p.Outcome == outcomeRefundingLate {
		return nil
	}
	rid, err := s.provider.Refund(ctx, p.IntentID, "flashgate-refund-"+orderID)
	if err != nil {
		return fmt.Errorf("refund of %s: %w", orderID, err)
	}
	return s.paymentStore.MarkPayment(ctx, orderID, true, false, rid, s.clock.Now())
}
