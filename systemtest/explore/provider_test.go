package explore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/payments"
)

// provider is a payment provider in the test's process that keeps
// Stripe's promises as internal/stripelocal does (idempotency keys, a
// succeeded or canceled intent never moves, a cancel of a succeeded or
// processing intent answers it as it stands, a refund needs a succeeded
// intent) and parses events with the real payments.Stripe. Its calls are
// made by actors through gated (hooks_test.go), which yields around them
// and injects failures. Its ledger (intents and refunds) is the truth the
// invariants judge the database against.
type provider struct {
	mu      sync.Mutex
	parser  *payments.Stripe
	secret  string
	n       int
	intents map[string]*flashgate.Intent // by id
	sales   map[string]string            // intent → sale id
	byOrder map[string]string            // checkout idempotency key → intent id
	refunds map[string][]string          // intent → its refunds' idempotency keys
	rkeys   map[string]string            // refund idempotency key → refund id
	// decline holds the card holds whose capture the card declines
	// (authorised, then refused at capture, as Stripe's test card
	// 4000000000000341); captures counts the captures that charged each
	// hold (a draw's invariant: exactly once).
	decline  map[string]bool
	captures map[string]int
	// emit hands each new event (its payload) to the world, which
	// delivers it as webhooks.
	emit func(payload []byte, typ string)
}

func newProvider() *provider {
	const secret = "whsec_explore"
	parser, err := payments.NewStripe(payments.StripeConfig{Key: "sk_test_explore", WebhookSecret: secret, APIBase: "http://127.0.0.1:9"})
	if err != nil {
		panic(err)
	}
	return &provider{parser: parser, secret: secret, intents: map[string]*flashgate.Intent{}, sales: map[string]string{},
		byOrder: map[string]string{}, refunds: map[string][]string{}, rkeys: map[string]string{},
		decline: map[string]bool{}, captures: map[string]int{}}
}

// errState is Stripe's 400 for a request the intent's state refuses.
var errState = errors.New("provider: payment_intent_unexpected_state (400)")

// Checkout creates the order's intent, or finds it again by the order's
// idempotency key.
func (p *provider) Checkout(_ context.Context, o flashgate.Order, amount int64, currency string) (flashgate.Intent, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if id, ok := p.byOrder[o.ID]; ok {
		return *p.intents[id], nil
	}
	p.n++
	id := fmt.Sprintf("pi_x%04d", p.n)
	in := &flashgate.Intent{ID: id, ClientSecret: id + "_secret", Status: "requires_payment_method", OrderID: o.ID,
		AmountCents: amount, Currency: currency}
	p.intents[id], p.sales[id], p.byOrder[o.ID] = in, o.SaleID, id
	return *in, nil
}

// Hold creates a draw entry's card hold (manual capture), or finds it
// again by the entry's idempotency key.
func (p *provider) Hold(_ context.Context, h flashgate.Hold) (flashgate.Intent, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	key := "flashgate-hold-" + h.EntryID
	if id, ok := p.byOrder[key]; ok {
		return *p.intents[id], nil
	}
	p.n++
	id := fmt.Sprintf("pi_h%04d", p.n)
	in := &flashgate.Intent{ID: id, ClientSecret: id + "_secret", Status: "requires_payment_method", EntryID: h.EntryID,
		SaleID: h.SaleID, AmountCents: h.AmountCents, Currency: h.Currency}
	p.intents[id], p.sales[id], p.byOrder[key] = in, h.SaleID, id
	return *in, nil
}

// Confirm is the entrant at the provider's page authorising hold id
// (requires_capture, and its held event); with decline the card accepts
// the hold and declines its capture. A hold not waiting for its payment
// method does not move; it reports whether it moved.
func (p *provider) Confirm(id string, decline bool) bool {
	p.mu.Lock()
	in, ok := p.intents[id]
	if !ok || in.EntryID == "" || in.Status != "requires_payment_method" {
		p.mu.Unlock()
		return false
	}
	in.Status = flashgate.IntentRequiresCapture
	p.decline[id] = decline
	out := *in
	p.mu.Unlock()
	p.event(flashgate.EventIntentHeld, out)
	return true
}

// Capture charges an authorised hold in full, once: a capture of a hold
// already captured answers it as it stands (as payments.Stripe does); a
// hold that holds nothing (never authorised, released, declined now at
// capture: then canceled) is flashgate.ErrNotCapturable.
func (p *provider) Capture(_ context.Context, id, _ string) (flashgate.Intent, error) {
	p.mu.Lock()
	in, ok := p.intents[id]
	if !ok {
		p.mu.Unlock()
		return flashgate.Intent{}, fmt.Errorf("provider: no such payment_intent %s (404): %w", id, flashgate.ErrNotFound)
	}
	switch {
	case in.Status == flashgate.IntentSucceeded:
		out := *in
		p.mu.Unlock()
		return out, nil
	case in.Status != flashgate.IntentRequiresCapture:
		out := *in
		p.mu.Unlock()
		return out, fmt.Errorf("provider: capture of %s (%s): %w", id, out.Status, flashgate.ErrNotCapturable)
	case p.decline[id]:
		in.Status = flashgate.IntentCanceled
		out := *in
		p.mu.Unlock()
		p.event(flashgate.EventIntentFailed, out)
		p.event(flashgate.EventIntentCanceled, out)
		return out, fmt.Errorf("provider: capture of %s declined (402): %w", id, flashgate.ErrNotCapturable)
	}
	in.Status = flashgate.IntentSucceeded
	p.captures[id]++
	out := *in
	p.mu.Unlock()
	p.event(flashgate.EventIntentSucceeded, out)
	return out, nil
}

// Captures is how many captures charged hold id.
func (p *provider) Captures(id string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.captures[id]
}

// Intent reads an intent.
func (p *provider) Intent(_ context.Context, id string) (flashgate.Intent, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	in, ok := p.intents[id]
	if !ok {
		return flashgate.Intent{}, fmt.Errorf("provider: no such payment_intent %s (404)", id)
	}
	return *in, nil
}

// Cancel cancels an intent that can be canceled; one that cannot is
// answered as it stands (payments.Stripe turns Stripe's 400 into a read).
func (p *provider) Cancel(_ context.Context, id string) (flashgate.Intent, error) {
	p.mu.Lock()
	in, ok := p.intents[id]
	if !ok {
		p.mu.Unlock()
		return flashgate.Intent{}, fmt.Errorf("provider: no such payment_intent %s (404)", id)
	}
	moved := false
	if in.Status != flashgate.IntentSucceeded && in.Status != flashgate.IntentProcessing && in.Status != flashgate.IntentCanceled {
		in.Status, moved = flashgate.IntentCanceled, true
	}
	out := *in
	p.mu.Unlock()
	if moved {
		p.event(flashgate.EventIntentCanceled, out)
	}
	return out, nil
}

// Refund refunds a succeeded intent once per idempotency key.
func (p *provider) Refund(_ context.Context, id, key string) (string, error) {
	p.mu.Lock()
	if rid, ok := p.rkeys[key]; ok {
		p.mu.Unlock()
		return rid, nil
	}
	in, ok := p.intents[id]
	if !ok || in.Status != flashgate.IntentSucceeded {
		p.mu.Unlock()
		return "", fmt.Errorf("provider: refund of %s: payment_intent not succeeded (400)", id)
	}
	if len(p.refunds[id]) > 0 {
		// Stripe refunds a charge once in full: a second refund under
		// another key is refused.
		p.mu.Unlock()
		return "", fmt.Errorf("provider: refund of %s: charge_already_refunded (400)", id)
	}
	rid := fmt.Sprintf("re_x%04d", len(p.rkeys)+1)
	p.rkeys[key] = rid
	p.refunds[id] = append(p.refunds[id], key)
	out := *in
	p.mu.Unlock()
	p.event(flashgate.EventChargeRefunded, out)
	return rid, nil
}

// ParseEvent verifies and reduces an event with the real provider's code.
func (p *provider) ParseEvent(payload []byte, signature string) (flashgate.PaymentEvent, error) {
	return p.parser.ParseEvent(payload, signature)
}

// Pay is the buyer at the provider's page: it moves intent id to status
// (succeeded, processing, or payment_failed, which leaves the intent
// waiting for another method) and emits the event Stripe would. A
// succeeded or canceled intent does not move; it reports whether it moved.
func (p *provider) Pay(id, status string) bool {
	p.mu.Lock()
	in, ok := p.intents[id]
	if !ok || in.Status == flashgate.IntentSucceeded || in.Status == flashgate.IntentCanceled {
		p.mu.Unlock()
		return false
	}
	typ := "payment_intent.processing"
	switch status {
	case flashgate.IntentSucceeded:
		typ = flashgate.EventIntentSucceeded
		in.Status = status
	case flashgate.IntentFailed:
		typ = flashgate.EventIntentFailed
		in.Status = "requires_payment_method"
	default:
		in.Status = flashgate.IntentProcessing
	}
	out := *in
	p.mu.Unlock()
	p.event(typ, out)
	if typ == flashgate.EventIntentSucceeded {
		p.event("charge.succeeded", out) // Stripe tells a success twice
	}
	return true
}

// event builds, numbers and emits an event about intent in.
func (p *provider) event(typ string, in flashgate.Intent) {
	p.mu.Lock()
	p.n++
	evID := fmt.Sprintf("evt_x%04d", p.n)
	sale := p.sales[in.ID]
	p.mu.Unlock()
	meta := map[string]string{"order_id": in.OrderID, "sale_id": sale}
	if in.EntryID != "" {
		meta = map[string]string{"entry_id": in.EntryID, "sale_id": sale} // a hold names its entry
	}
	var obj any = map[string]any{"id": in.ID, "object": "payment_intent", "amount": in.AmountCents, "currency": in.Currency,
		"status": in.Status, "client_secret": in.ClientSecret, "metadata": meta}
	if strings.HasPrefix(typ, "charge.") {
		obj = map[string]any{"id": "ch_" + evID, "object": "charge", "payment_intent": in.ID, "refunded": typ == flashgate.EventChargeRefunded}
	}
	raw, _ := json.Marshal(obj)
	b, _ := json.Marshal(map[string]any{"id": evID, "object": "event", "type": typ, "api_version": stripe.APIVersion,
		"created": time.Now().Unix(), "data": map[string]any{"object": json.RawMessage(raw)}})
	if p.emit != nil {
		p.emit(b, typ)
	}
}

// Sign is the Stripe-Signature header of payload, signed now.
func (p *provider) Sign(payload []byte) string {
	return webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: p.secret, Timestamp: time.Now()}).Header
}

// ledgerIntent is an intent as the provider holds it at the end.
type ledgerIntent struct {
	flashgate.Intent
	Refunds []string
}

// Ledger returns every intent with its refunds, by id.
func (p *provider) Ledger() []ledgerIntent {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]ledgerIntent, 0, len(p.intents))
	for id, in := range p.intents {
		out = append(out, ledgerIntent{Intent: *in, Refunds: append([]string(nil), p.refunds[id]...)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Processing lists the intents still processing, by id.
func (p *provider) Processing() []string {
	var ids []string
	for _, in := range p.Ledger() {
		if in.Status == flashgate.IntentProcessing {
			ids = append(ids, in.ID)
		}
	}
	return ids
}
