package payments_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/stripelocal"
	"github.com/flashgate/flashgate/payments"
)

func newStripe(t *testing.T) (*payments.Stripe, *stripelocal.Server) {
	t.Helper()
	stand := stripelocal.New("sk_test_unit", "whsec_unit")
	ts := httptest.NewServer(stand)
	t.Cleanup(ts.Close)
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	p, err := payments.NewStripe(payments.StripeConfig{Key: stand.Key, WebhookSecret: stand.WebhookSecret, APIBase: ts.URL, HTTPClient: hc})
	if err != nil {
		t.Fatal(err)
	}
	return p, stand
}

// TestStripeCheckoutIdempotent: one order gets one intent however often
// it checks out, created with the order's idempotency key, amount and
// metadata; a refund is keyed too.
func TestStripeCheckoutIdempotent(t *testing.T) {
	p, stand := newStripe(t)
	ctx := context.Background()
	o := flashgate.Order{ID: "o1", SaleID: "s1", Quantity: 2, PriceCents: 450}
	first, err := p.Checkout(ctx, o, 900, "eur")
	if err != nil {
		t.Fatal(err)
	}
	again, err := p.Checkout(ctx, o, 900, "eur")
	if err != nil || again.ID != first.ID || first.ClientSecret == "" || first.OrderID != "o1" {
		t.Fatalf("checkout twice: got %+v, %+v, %v; want one intent with a client secret", first, again, err)
	}
	if n := len(stand.Intents()); n != 1 {
		t.Errorf("intents: got %d, want 1", n)
	}
	for _, r := range stand.Requests() {
		if r.Path == "/v1/payment_intents" && (r.IdempotencyKey != "flashgate-order-o1" || r.Form["amount"] != "900" || r.Form["currency"] != "eur" || r.Form["metadata[order_id]"] != "o1") {
			t.Errorf("create request: got %+v", r)
		}
	}
	stand.SetStatus(first.ID, "succeeded")
	r1, err := p.Refund(ctx, first.ID, "k1")
	if err != nil {
		t.Fatal(err)
	}
	if r2, err := p.Refund(ctx, first.ID, "k1"); err != nil || r2 != r1 || len(stand.Refunds()) != 1 {
		t.Errorf("refund twice under one key: got %s and %s (%v), %d refunds; want one", r1, r2, err, len(stand.Refunds()))
	}
	stand.FailNext(4)
	if _, err := p.Checkout(ctx, flashgate.Order{ID: "o2"}, 100, "eur"); !errors.Is(err, flashgate.ErrUnavailable) {
		t.Errorf("provider 500: got %v, want ErrUnavailable", err)
	}
}

// TestStripeParseEvent: a well-signed event is reduced; a bad secret, a
// stale timestamp or a garbled header is ErrBadSignature.
func TestStripeParseEvent(t *testing.T) {
	p, stand := newStripe(t)
	in, err := p.Checkout(context.Background(), flashgate.Order{ID: "o1"}, 100, "usd")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, typ, status string
		at                time.Time
		secret            string
		want              flashgate.PaymentEvent
		bad               bool
	}{
		{name: "succeeded", typ: flashgate.EventIntentSucceeded, status: "succeeded", at: time.Now(), secret: stand.WebhookSecret,
			want: flashgate.PaymentEvent{ID: "e1", Type: flashgate.EventIntentSucceeded, IntentID: in.ID, OrderID: "o1", Status: "succeeded"}},
		{name: "failed", typ: flashgate.EventIntentFailed, status: "requires_payment_method", at: time.Now(), secret: stand.WebhookSecret,
			want: flashgate.PaymentEvent{ID: "e1", Type: flashgate.EventIntentFailed, IntentID: in.ID, OrderID: "o1", Status: flashgate.IntentFailed}},
		{name: "charge", typ: flashgate.EventChargeRefunded, at: time.Now(), secret: stand.WebhookSecret,
			want: flashgate.PaymentEvent{ID: "e1", Type: flashgate.EventChargeRefunded, IntentID: in.ID}},
		{name: "bad secret", typ: flashgate.EventIntentSucceeded, at: time.Now(), secret: "whsec_other", bad: true},
		{name: "stale", typ: flashgate.EventIntentSucceeded, at: time.Now().Add(-payments.Tolerance - time.Minute), secret: stand.WebhookSecret, bad: true},
	}
	for _, tc := range cases {
		ev := stand.Event("e1", tc.typ, in.ID, tc.status)
		got, err := p.ParseEvent(ev, stripelocal.New("", tc.secret).Sign(ev, tc.at))
		if tc.bad {
			if !errors.Is(err, flashgate.ErrBadSignature) {
				t.Errorf("%s: got %v, want ErrBadSignature", tc.name, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: got %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
	if _, err := p.ParseEvent([]byte(`{}`), "garbage"); !errors.Is(err, flashgate.ErrBadSignature) {
		t.Errorf("garbled header: got %v, want ErrBadSignature", err)
	}
}
