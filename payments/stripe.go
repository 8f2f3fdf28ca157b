// Package payments holds flashgate's payment providers. Stripe takes money
// through Stripe's API with its own Go library; the control plane consumes
// it through controlplane.PaymentProvider. (Simulated payments, today's
// default, need no provider: the control plane marks an order paid.)
package payments

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/flashgate/flashgate"
)

// Tolerance is how old a webhook's signed timestamp may be: Stripe's
// default, five minutes, against replays.
const Tolerance = 5 * time.Minute

// DefaultTimeout bounds one call to the provider's API: below the
// gateway's order timeout (5 s), so that a stalled provider is a clean 503.
const DefaultTimeout = 3 * time.Second

// StripeConfig configures Stripe. Key and WebhookSecret are required.
type StripeConfig struct {
	// Key is the secret API key (from a flag or the environment, never
	// the repository).
	Key string
	// WebhookSecret is the endpoint's signing secret (whsec_...).
	WebhookSecret string
	// APIBase is the API's base URL; "" means Stripe's
	// (https://api.stripe.com). Tests and the demo point it at a local
	// stand-in.
	APIBase string
	// Timeout bounds one API call; zero means DefaultTimeout.
	Timeout time.Duration
	// HTTPClient makes the calls; nil means one with Timeout.
	HTTPClient *http.Client
}

// Stripe is a payment provider on Stripe's PaymentIntents.
type Stripe struct {
	sc     *stripe.Client
	secret string
}

// NewStripe builds a Stripe provider.
func NewStripe(cfg StripeConfig) (*Stripe, error) {
	if cfg.Key == "" || cfg.WebhookSecret == "" {
		return nil, errors.New("stripe: an API key and a webhook secret are required")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: cfg.Timeout}
	}
	// A 429 is tried again after its Retry-After when that fits in the
	// call's deadline (ratelimit.go).
	next := hc.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	rc := *hc
	rc.Transport = retryTransport{next: next, now: time.Now}
	hc = &rc
	bc := &stripe.BackendConfig{
		HTTPClient:        hc,
		MaxNetworkRetries: stripe.Int64(1),
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
	}
	if cfg.APIBase != "" {
		bc.URL = stripe.String(cfg.APIBase)
	}
	sc := stripe.NewClient(cfg.Key, stripe.WithBackends(stripe.NewBackendsWithConfig(bc)))
	return &Stripe{sc: sc, secret: cfg.WebhookSecret}, nil
}

// Checkout creates (or, for the same order, finds again: the order id is
// the idempotency key) the PaymentIntent of order o for amount cents of
// currency; the order id is in its metadata.
func (s *Stripe) Checkout(ctx context.Context, o flashgate.Order, amount int64, currency string) (flashgate.Intent, error) {
	p := &stripe.PaymentIntentCreateParams{
		Amount:   stripe.Int64(amount),
		Currency: stripe.String(currency),
		AutomaticPaymentMethods: &stripe.PaymentIntentCreateAutomaticPaymentMethodsParams{
			Enabled: stripe.Bool(true),
		},
	}
	p.SetIdempotencyKey("flashgate-order-" + o.ID)
	p.AddMetadata("order_id", o.ID)
	p.AddMetadata("sale_id", o.SaleID)
	p.Context = ctx
	pi, err := s.sc.V1PaymentIntents.Create(ctx, p)
	if err != nil {
		return flashgate.Intent{}, fmt.Errorf("creating payment intent: %w", unavailable(err))
	}
	return intent(pi), nil
}

// Intent reads an intent's current state; one the provider does not know
// is flashgate.ErrNotFound.
func (s *Stripe) Intent(ctx context.Context, id string) (flashgate.Intent, error) {
	pi, err := s.sc.V1PaymentIntents.Retrieve(ctx, id, nil)
	var se *stripe.Error
	if errors.As(err, &se) && se.HTTPStatusCode == http.StatusNotFound {
		return flashgate.Intent{}, fmt.Errorf("reading payment intent %s: %w", id, flashgate.ErrNotFound)
	}
	if err != nil {
		return flashgate.Intent{}, fmt.Errorf("reading payment intent: %w", unavailable(err))
	}
	return intent(pi), nil
}

// Cancel cancels an intent that has not succeeded, so that it never will;
// for a hold, that releases the held amount. One that did (or otherwise
// cannot be canceled) is returned as it stands.
func (s *Stripe) Cancel(ctx context.Context, id string) (flashgate.Intent, error) {
	pi, err := s.sc.V1PaymentIntents.Cancel(ctx, id, nil)
	if err == nil {
		return intent(pi), nil
	}
	var se *stripe.Error
	if errors.As(err, &se) && se.HTTPStatusCode == http.StatusBadRequest {
		return s.Intent(ctx, id)
	}
	return flashgate.Intent{}, fmt.Errorf("canceling payment intent: %w", unavailable(err))
}

// Hold creates (or, for the same entry, finds again: the entry id is the
// idempotency key) a PaymentIntent with manual capture for a draw entry:
// once the buyer confirms it the amount is held on the card
// (flashgate.IntentRequiresCapture), charged only by Capture and released
// by Cancel. The entry and sale ids are in its metadata.
func (s *Stripe) Hold(ctx context.Context, h flashgate.Hold) (flashgate.Intent, error) {
	p := &stripe.PaymentIntentCreateParams{
		Amount:        stripe.Int64(h.AmountCents),
		Currency:      stripe.String(h.Currency),
		CaptureMethod: stripe.String(string(stripe.PaymentIntentCaptureMethodManual)),
		AutomaticPaymentMethods: &stripe.PaymentIntentCreateAutomaticPaymentMethodsParams{
			Enabled: stripe.Bool(true),
		},
	}
	p.SetIdempotencyKey("flashgate-hold-" + h.EntryID)
	p.AddMetadata("entry_id", h.EntryID)
	p.AddMetadata("sale_id", h.SaleID)
	p.Context = ctx
	pi, err := s.sc.V1PaymentIntents.Create(ctx, p)
	if err != nil {
		return flashgate.Intent{}, fmt.Errorf("creating a hold: %w", unavailable(err))
	}
	return intent(pi), nil
}

// Capture charges a hold in full, with key as the idempotency key: a
// retried capture returns the first answer, and a capture of an intent
// that has already succeeded returns it as it stands. A hold that holds
// nothing any more (declined at capture, expired, canceled, not yet
// confirmed) is flashgate.ErrNotCapturable; a failure of the provider
// (down, 5xx, 429 past the deadline) is flashgate.ErrUnavailable, and may
// be tried again with the same key.
func (s *Stripe) Capture(ctx context.Context, intentID, key string) (flashgate.Intent, error) {
	p := &stripe.PaymentIntentCaptureParams{}
	p.SetIdempotencyKey(key)
	p.Context = ctx
	pi, err := s.sc.V1PaymentIntents.Capture(ctx, intentID, p)
	if err == nil {
		return intent(pi), nil
	}
	var se *stripe.Error
	if errors.As(err, &se) && se.HTTPStatusCode == http.StatusNotFound {
		return flashgate.Intent{}, fmt.Errorf("capturing payment intent %s: %w", intentID, flashgate.ErrNotFound)
	}
	if errors.As(err, &se) && (se.HTTPStatusCode == http.StatusBadRequest || se.HTTPStatusCode == http.StatusPaymentRequired) {
		// Not capturable as it stands: one already captured is the
		// answer a retry wants; any other state holds nothing.
		// Unread, it might be either: the caller tries again, rather
		// than give the unit to another entrant while this one paid.
		in, rerr := s.Intent(ctx, intentID)
		if rerr != nil {
			return flashgate.Intent{}, fmt.Errorf("capturing payment intent %s: refused (%w), and its state unread: %w", intentID, err, rerr)
		}
		if in.Status == flashgate.IntentSucceeded {
			return in, nil
		}
		return in, fmt.Errorf("capturing payment intent %s (%s): %w: %w", intentID, in.Status, flashgate.ErrNotCapturable, err)
	}
	return flashgate.Intent{}, fmt.Errorf("capturing payment intent: %w", unavailable(err))
}

// Refund refunds an intent in full, with key as the idempotency key: a
// retried refund returns the first.
func (s *Stripe) Refund(ctx context.Context, intentID, key string) (string, error) {
	p := &stripe.RefundCreateParams{PaymentIntent: stripe.String(intentID)}
	p.SetIdempotencyKey(key)
	p.AddMetadata("reason", "flashgate_late_payment")
	r, err := s.sc.V1Refunds.Create(ctx, p)
	if err != nil {
		return "", fmt.Errorf("refunding payment intent: %w", unavailable(err))
	}
	return r.ID, nil
}

// ParseEvent verifies a webhook's Stripe-Signature with the library
// (Tolerance against replays; any API version) and reduces the event.
// A bad or stale signature is flashgate.ErrBadSignature.
func (s *Stripe) ParseEvent(payload []byte, signature string) (flashgate.PaymentEvent, error) {
	ev, err := webhook.ConstructEventWithOptions(payload, signature, s.secret,
		webhook.ConstructEventOptions{Tolerance: Tolerance, IgnoreAPIVersionMismatch: true})
	if err != nil {
		return flashgate.PaymentEvent{}, fmt.Errorf("webhook: %w: %w", flashgate.ErrBadSignature, err)
	}
	out := flashgate.PaymentEvent{ID: ev.ID, Type: string(ev.Type)}
	if ev.Data == nil {
		return out, nil
	}
	var obj struct {
		ID            string            `json:"id"`
		Object        string            `json:"object"`
		Status        string            `json:"status"`
		PaymentIntent json.RawMessage   `json:"payment_intent"`
		Metadata      map[string]string `json:"metadata"`
	}
	if err := json.Unmarshal(ev.Data.Raw, &obj); err != nil {
		return flashgate.PaymentEvent{}, fmt.Errorf("webhook object: %w: %w", flashgate.ErrBadRequest, err)
	}
	switch obj.Object {
	case "payment_intent":
		out.IntentID, out.OrderID, out.EntryID, out.Status = obj.ID, obj.Metadata["order_id"], obj.Metadata["entry_id"], obj.Status
		out.SaleID = obj.Metadata["sale_id"]
		if out.Type == flashgate.EventIntentFailed {
			out.Status = flashgate.IntentFailed
		}
	default: // a charge or a dispute names its intent
		var id string
		if json.Unmarshal(obj.PaymentIntent, &id) != nil {
			var exp struct {
				ID string `json:"id"`
			}
			_ = json.Unmarshal(obj.PaymentIntent, &exp)
			id = exp.ID
		}
		out.IntentID = id
	}
	return out, nil
}

func intent(pi *stripe.PaymentIntent) flashgate.Intent {
	return flashgate.Intent{ID: pi.ID, ClientSecret: pi.ClientSecret, Status: string(pi.Status),
		OrderID: pi.Metadata["order_id"], EntryID: pi.Metadata["entry_id"], SaleID: pi.Metadata["sale_id"], AmountCents: pi.Amount, Currency: string(pi.Currency)}
}

// unavailable marks a failure of the provider (down, slow, 5xx) as
// flashgate.ErrUnavailable: the buyer may retry, and the retry finds the
// same intent.
func unavailable(err error) error {
	var se *stripe.Error
	if errors.As(err, &se) && se.HTTPStatusCode == http.StatusTooManyRequests {
		after := defaultRetryAfter
		if se.LastResponse != nil {
			after = retryAfter(se.LastResponse.Header.Get("Retry-After"))
		}
		return fmt.Errorf("%w: %w", flashgate.ErrUnavailable, &RateLimitedError{After: after})
	}
	if errors.As(err, &se) && se.HTTPStatusCode > 0 && se.HTTPStatusCode < 500 && se.HTTPStatusCode != http.StatusTooManyRequests {
		return err
	}
	return fmt.Errorf("%w: %w", flashgate.ErrUnavailable, err)
}
