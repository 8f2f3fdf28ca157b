package orders

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/promreg"
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
	// StepPayment applies one owned step of a payment's life and reports
	// whether this caller won it (flashgate.PaymentStep).
	StepPayment(ctx context.Context, st flashgate.PaymentStep, now time.Time) (bool, error)
	// PendRetake records, while the payment is late_pending, that its
	// retake in Redis may take the order's units (a pending retakes row a
	// rebuild holds); it reports whether the payment was late_pending.
	PendRetake(ctx context.Context, orderID string, now time.Time) (bool, error)
	// RetakeGivenBack records that the units of an order's owed retake
	// (flashgate.PaymentStep.OweRetake) were given back in Redis.
	RetakeGivenBack(ctx context.Context, orderID string) error
	RecordEvent(ctx context.Context, eventID, typ, intentID, orderID, status string, now time.Time) (bool, error)
	// DuePayments are the open payments whose next look is due, longest
	// due first; DeferPayment counts a look and sets the next.
	DuePayments(ctx context.Context, createdBefore, now time.Time, limit int) ([]flashgate.Payment, error)
	DeferPayment(ctx context.Context, orderID string, next time.Time) error
	// OldestOpenPayment is when the oldest payment not settled was made.
	OldestOpenPayment(ctx context.Context) (time.Time, bool, error)
	SalePayments(ctx context.Context, saleID string) (map[string]flashgate.Payment, error)
	UnadoptedIntents(ctx context.Context, since time.Time, limit int) ([]string, error)
	// RecordSecondCharge stores an intent whose order's payment is
	// another intent once, and returns it as stored; StepSecondCharge
	// moves its outcome (a compare-and-set); DueSecondCharges are those
	// not settled whose next look is due, DeferSecondCharge counts a
	// look and sets the next.
	RecordSecondCharge(ctx context.Context, c flashgate.SecondCharge, now time.Time) (flashgate.SecondCharge, error)
	SecondCharge(ctx context.Context, intentID string) (flashgate.SecondCharge, error)
	StepSecondCharge(ctx context.Context, intentID string, from []string, to, status, refundID string, now time.Time) (bool, error)
	DueSecondCharges(ctx context.Context, now time.Time, limit int) ([]flashgate.SecondCharge, error)
	DeferSecondCharge(ctx context.Context, intentID string, next time.Time) error
}

// The outcomes of a payment (flashgate.Payment.Outcome). latePending and
// refundingLate are the steps of a late payment's decision, recorded
// before each is acted on, so that a decider that stops half way is
// finished by the reconciliation the same way: never both, never neither.
// refunding is an admin refund that owns the payment (no settler pays or
// honours its order from then on), refunded its end.
const (
	outcomePaid          = "paid"
	outcomeHonouredLate  = "honoured_late"
	outcomeRefundedLate  = "refunded_late"
	outcomeLatePending   = "late_pending"
	outcomeRefundingLate = "refunding_late"
	outcomeRefunding     = "refunding"
	outcomeRefunded      = "refunded"
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
	oldest  prometheus.Gauge
}

func newPaymentMetrics(reg prometheus.Registerer) (*paymentMetrics, error) {
	m := &paymentMetrics{
		results: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flashgate_payments_total",
			Help: "Payments by result: succeeded (order paid in time), failed, late_honoured, late_refunded, second_refunded (a second charge of an order that has its payment)."}, []string{"result"}),
		badSigs: prometheus.NewCounter(prometheus.CounterOpts{Name: "flashgate_webhook_signature_failures_total",
			Help: "Webhooks refused for a bad or stale signature."}),
		oldest: prometheus.NewGauge(prometheus.GaugeOpts{Name: "flashgate_payment_oldest_unsettled_seconds",
			Help: "Age of the oldest payment not yet settled (in flight, or a step under way), as the leader's reconciliation last read it; 0 when none."}),
	}
	var err error
	if m.results, err = promreg.Register(reg, m.results); err != nil {
		return nil, err
	}
	if m.badSigs, err = promreg.Register(reg, m.badSigs); err != nil {
		return nil, err
	}
	if m.oldest, err = promreg.Register(reg, m.oldest); err != nil {
		return nil, err
	}
	for _, r := range []string{"succeeded", "failed", "late_honoured", "late_refunded", "second_refunded"} {
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
	if err == nil && o.Status == flashgate.StatusPendingPayment {
		// A draw winner's order has a payment only once an admin refund
		// adopted its entry's hold (adoptDrawHold), which may come before
		// the close marks it paid: it is no checkout, and its hold's
		// secret is nobody's to confirm.
		sale, serr := s.store.Sale(ctx, o.SaleID)
		switch {
		case serr == nil && sale.Queue == flashgate.QueueDraw:
			return o, fmt.Errorf("order %q is a draw's, paid by its close: %w", orderID, flashgate.ErrNotPayable)
		case serr != nil && !errors.Is(serr, flashgate.ErrNotFound):
			return flashgate.Order{}, fmt.Errorf("reading sale: %w", serr)
		}
	}
	switch {
	case err == nil && (o.Status == flashgate.StatusPendingPayment || o.Status == flashgate.StatusPaid):
		return s.withPayment(o, p), nil
	case err == nil:
		// A payment does not make a dead order payable: one cancelled,
		// expired or refunded after its checkout is not_payable, as one
		// without a payment is.
		return s.withPayment(o, p), fmt.Errorf("order %q is %s: %w", orderID, o.Status, flashgate.ErrNotPayable)
	case !errors.Is(err, flashgate.ErrNotFound):
		return flashgate.Order{}, fmt.Errorf("reading payment: %w", err)
	}
	if o.Status == flashgate.StatusPaid {
		// Paid without a payment of its own (a draw winner's order, paid
		// by the capture of its entry's hold; one paid before payments
		// were taken at a provider): paying it again answers it, as
		// paying any paid order does.
		return o, nil
	}
	if o.Status != flashgate.StatusPendingPayment {
		return o, fmt.Errorf("order %q is %s: %w", orderID, o.Status, flashgate.ErrNotPayable)
	}
	sale, err := s.store.Sale(ctx, o.SaleID)
	if err != nil {
		return flashgate.Order{}, fmt.Errorf("reading sale: %w", err)
	}
	if sale.Queue == flashgate.QueueDraw {
		// A draw winner's order is paid by the capture of its entry's
		// hold, and the close marks it paid: a checkout of its own would
		// charge the winner twice.
		return o, fmt.Errorf("order %q is a draw's, paid by its close: %w", orderID, flashgate.ErrNotPayable)
	}
	currency := sale.Currency
	if currency == "" {
		currency = s.currency
	}
	amount, err := flashgate.OrderAmount(o.PriceCents, o.Quantity)
	if err != nil {
		return o, fmt.Errorf("order %q: %w", orderID, err)
	}
	in, err := s.provider.Checkout(ctx, o, amount, currency)
	if err != nil {
		return flashgate.Order{}, fmt.Errorf("checkout of %s: %w", orderID, err)
	}
	s.yield(ctx, "checkout:intent")
	p, err = s.paymentStore.InsertPayment(ctx, flashgate.Payment{OrderID: o.ID, IntentID: in.ID, Status: in.Status,
		AmountCents: amount, Currency: currency}, s.clock.Now())
	if err != nil {
		return flashgate.Order{}, err
	}
	if p.IntentID != in.ID {
		// The order's payment is another intent (one made outside the
		// checkout, adopted first): this one is a second charge, canceled
		// before the page can confirm it, and the page is answered the
		// order's payment, as a pay after it was stored is.
		if err := s.secondCharge(ctx, in, p); err != nil {
			return flashgate.Order{}, err
		}
		return s.checkout(ctx, orderID, userID)
	}
	p.Status = in.Status
	// The order may have left pending between the read and the insert (a
	// cancel that found no payment to cancel, the expiry, an admin refund):
	// its intent is then canceled before the page can confirm it.
	// A concurrent checkout of the same order whose payment already paid
	// it gets the paid order, as paying a paid order does.
	if now, err := s.store.Order(ctx, orderID); err != nil {
		return flashgate.Order{}, fmt.Errorf("reading order: %w", err)
	} else if now.Status == flashgate.StatusPaid {
		return s.withPayment(now, p), nil
	} else if now.Status != flashgate.StatusPendingPayment {
		return s.orphanIntent(ctx, now, p)
	}
	o2 := s.withPayment(o, p)
	o2.ClientSecret = in.ClientSecret
	return o2, nil
}

// orphanIntent cancels the intent of a checkout whose order left pending
// while the intent was created, and answers the order as it is now
// (flashgate.ErrNotPayable). An intent the provider will not cancel
// (it succeeded or is processing) settles as a late payment.
func (s *Service) orphanIntent(ctx context.Context, o flashgate.Order, p flashgate.Payment) (flashgate.Order, error) {
	in, err := s.provider.Cancel(ctx, p.IntentID)
	if err != nil {
		return flashgate.Order{}, fmt.Errorf("canceling the payment of %s: %w", o.ID, err)
	}
	if err := s.paymentStore.SetPaymentStatus(ctx, o.ID, in.Status, s.clock.Now()); err != nil {
		return flashgate.Order{}, err
	}
	if in.Status == flashgate.IntentSucceeded {
		if err := s.settlePayment(ctx, o.ID); err != nil {
			s.log.Warn("payment not settled yet; the reconciliation retries", "order", o.ID, "err", err)
		}
	}
	return o, fmt.Errorf("order %q is %s: %w", o.ID, o.Status, flashgate.ErrNotPayable)
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
