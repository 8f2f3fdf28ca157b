package flashgate

import "fmt"

// Intent is a payment at the provider (a Stripe PaymentIntent): its id,
// the secret the buyer's page confirms it with, its status, and the order
// it pays or the draw entry it holds for (from its metadata).
type Intent struct {
	ID           string
	ClientSecret string
	Status       string
	OrderID      string
	// EntryID is the draw entry a hold (Hold) was made for; "" for an
	// order's payment.
	EntryID string
	// SaleID is the sale of the order or draw entry, from the metadata.
	SaleID      string
	AmountCents int64
	Currency    string
}

// Hold is a card hold a draw entry asks of the provider: AmountCents of
// Currency authorised when the buyer confirms, not charged, until it is
// captured (the entry won) or canceled (it lost, or was withdrawn). The
// entry id is its idempotency key, so an entry holds at most once.
type Hold struct {
	EntryID     string
	SaleID      string
	AmountCents int64
	Currency    string
}

// The intent statuses flashgate acts on (Stripe's names); any other is a
// payment still in flight.
const (
	IntentSucceeded  = "succeeded"
	IntentCanceled   = "canceled"
	IntentProcessing = "processing"
	// IntentRequiresCapture is a hold the buyer confirmed: the amount is
	// authorised on the card, to be captured or canceled.
	IntentRequiresCapture = "requires_capture"
	// IntentFailed is what a payment_intent.payment_failed event records:
	// the intent itself goes back to requires_payment_method, and the
	// buyer may try again.
	IntentFailed = "payment_failed"
)

// PaymentEvent is a verified webhook event of the provider, reduced to what
// flashgate reads: its id (stored once), its type, the intent it concerns
// and, for intent events, the intent's status and order (or, for a hold,
// its draw entry).
type PaymentEvent struct {
	ID       string
	Type     string
	IntentID string
	OrderID  string
	EntryID  string
	// SaleID is the sale of the intent's order or draw entry, from its
	// metadata ("" for an event that does not carry the intent).
	SaleID string
	Status string
}

// The webhook event types flashgate handles; any other is acknowledged and
// ignored.
const (
	EventIntentSucceeded = "payment_intent.succeeded"
	EventIntentFailed    = "payment_intent.payment_failed"
	EventIntentCanceled  = "payment_intent.canceled"
	// EventIntentHeld is a hold confirmed by the buyer: the intent is
	// requires_capture.
	EventIntentHeld     = "payment_intent.amount_capturable_updated"
	EventChargeRefunded = "charge.refunded"
	EventDisputeCreated = "charge.dispute.created"
)

// ValidCurrency reports whether c is "" (the deployment's currency) or
// three lower-case letters, the shape of an ISO 4217 code as Stripe takes
// it.
func ValidCurrency(c string) bool {
	if c == "" {
		return true
	}
	if len(c) != 3 {
		return false
	}
	for i := 0; i < 3; i++ {
		if c[i] < 'a' || c[i] > 'z' {
			return false
		}
	}
	return true
}

// PaymentStep is one owned step of a payment's life (settle, retake,
// honour, refund, admin refund, cancel): a compare-and-set on the payment's
// outcome and, when ToStatus is set, on its order's status, applied in one
// transaction, so that of actors racing for the step exactly one wins and
// the others read its result.
type PaymentStep struct {
	OrderID string
	// FromOutcome are the outcomes the step starts from; ToOutcome is the
	// outcome it records.
	FromOutcome []string
	ToOutcome   string
	// FromStatus and ToStatus move the order in the same transaction
	// (ToStatus "" leaves the order alone).
	FromStatus []OrderStatus
	ToStatus   OrderStatus
	// Retake records that a late payment took the order's units again in
	// Redis, where they were counted as reserved and not yet persisted:
	// from this transaction the database counts them among the persisted
	// units too, so that a re-sync counts them once (docs/internals.md,
	// "Late payments").
	Retake bool
	// DropRetake drops the order's pending retake (a retakes row written
	// before the retake in Redis and never honoured), in the step that
	// decides to refund the late payment: a rebuild of the sale in Redis
	// no longer holds its units.
	DropRetake bool
	// OweRetake marks the order's honoured retake (its retakes row) as
	// owed back, in the step that refunds the honoured order: its units
	// stay among the persisted ones (as a released row's do), and are
	// given back in Redis once (lua/unretake.lua, SREM-guarded) by the
	// refunder or by a re-sync pass, which delivers the owed ones after
	// its snapshot as it delivers queued releases, so the pass's releases
	// counter sees it (PaymentStore.OwedRetakes, RetakeGivenBack).
	// Before, a pass between the step and the give-back counted the
	// order out, and the give-back freed its unit a second time.
	OweRetake bool
	// Refunded and RefundID set the payment's refund; IntentStatus, when
	// not "", its intent's status.
	Refunded     bool
	RefundID     string
	IntentStatus string
}

// MaxAmountCents is the largest amount a payment carries, in the
// currency's minor unit: the 12 digits a Stripe amount takes at most.
const MaxAmountCents = 999_999_999_999

// OrderAmount is qty units at priceCents each, the amount a payment
// charges. An amount outside 0..MaxAmountCents (an overflowing product
// among them: it is checked, never wrapped) is an error wrapping
// ErrNotPayable.
func OrderAmount(priceCents, qty int64) (int64, error) {
	if priceCents < 0 || qty < 0 || qty > 0 && priceCents > MaxAmountCents/qty {
		return 0, fmt.Errorf("an amount of %d units at %d cents is outside 0..%d: %w", qty, priceCents, int64(MaxAmountCents), ErrNotPayable)
	}
	return priceCents * qty, nil
}
