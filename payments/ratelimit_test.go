package payments_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/payments"
)

// TestStripeRateLimit: a checkout the provider rate-limits (429,
// Retry-After: 1) is tried again after the wait and answered, not
// refused; a call whose deadline cannot hold the wait is a
// *payments.RateLimitedError naming it, and flashgate.ErrUnavailable.
func TestStripeRateLimit(t *testing.T) {
	p, stand := newStripe(t)
	stand.RateLimit(1)
	ctx := context.Background()
	for i := range 2 {
		o := flashgate.Order{ID: fmt.Sprintf("o%d", i), SaleID: "s1", Quantity: 1, PriceCents: 100}
		if _, err := p.Checkout(ctx, o, 100, "usd"); err != nil {
			t.Fatalf("checkout %d under the rate limit: %v", i, err)
		}
	}
	if stand.Limited() == 0 {
		t.Fatal("the stand-in answered no 429: the test tried nothing")
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err := p.Intent(short, "pi_1")
	var rl *payments.RateLimitedError
	if !errors.As(err, &rl) || rl.RetryAfter() != time.Second || !errors.Is(err, flashgate.ErrUnavailable) {
		t.Fatalf("a read that cannot wait: got %v, want a RateLimitedError of 1s that is ErrUnavailable", err)
	}
}
