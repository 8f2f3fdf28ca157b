package gateway

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/testclock"
)

// TestOrderRouteLimit: one user's flood of order requests gets 429
// rate_limited with Retry-After once their burst is spent, on GET, pay and
// cancel alike; another user, and the same user's purchases (a bucket of
// their own), are not held back; the bucket refills with time.
func TestOrderRouteLimit(t *testing.T) {
	clock := testclock.New(time.Now())
	e := newEnv(t, func(c *Config) { c.Clock = clock; c.OrderRate = 2; c.OrderBurst = 4 })
	h := e.s.Handler()
	e.sale(t, "open1", 5, 8, true)
	e.orders.orders["ord-a"] = flashgate.Order{ID: "ord-a", SaleID: "open1", UserID: "alice", Status: flashgate.StatusPendingPayment}
	e.orders.orders["ord-b"] = flashgate.Order{ID: "ord-b", SaleID: "open1", UserID: "bob", Status: flashgate.StatusPendingPayment}
	alice, bob := token(t, "alice"), token(t, "bob")

	paths := []req{
		{method: "GET", path: "/api/orders/ord-a", token: alice},
		{method: "POST", path: "/api/orders/ord-a/pay", token: alice},
		{method: "POST", path: "/api/orders/ord-a/cancel", token: alice},
	}
	ok, limited := 0, 0
	for i := range 30 {
		r := do(h, paths[i%len(paths)])
		switch r.StatusCode() {
		case 200, 409:
			ok++
		case 429:
			limited++
			if got := string(r.Header.Peek("Retry-After")); got != "1" {
				t.Errorf("Retry-After: got %q, want 1", got)
			}
			if !strings.Contains(string(r.Body()), `"rate_limited"`) {
				t.Errorf("429 body: got %s", r.Body())
			}
		default:
			t.Fatalf("request %d: got %d %s", i, r.StatusCode(), r.Body())
		}
	}
	if ok != 4 || limited != 26 {
		t.Errorf("alice's flood of 30: got %d answered, %d limited; want 4, 26", ok, limited)
	}
	if r := do(h, req{method: "GET", path: "/api/orders/ord-b", token: bob}); r.StatusCode() != 200 {
		t.Errorf("bob while alice floods: got %d %s, want 200", r.StatusCode(), r.Body())
	}
	if r := do(h, req{method: "POST", path: "/api/sales/open1/orders", token: alice}); r.StatusCode() != 201 {
		t.Errorf("alice's purchase while her order requests are limited: got %d %s, want 201", r.StatusCode(), r.Body())
	}
	clock.Add(time.Second) // two tokens back
	for i := range 3 {
		want := 200
		if i == 2 {
			want = 429
		}
		if r := do(h, paths[0]); r.StatusCode() != want {
			t.Errorf("after a second, request %d: got %d, want %d", i, r.StatusCode(), want)
		}
	}
}

// stalledOrders is an Orders service whose every call waits for its
// context, as one whose database stopped answering would.
type stalledOrders struct{}

func (stalledOrders) Order(ctx context.Context, id, user string) (flashgate.Order, error) {
	<-ctx.Done()
	return flashgate.Order{}, ctx.Err()
}

func (s stalledOrders) Pay(ctx context.Context, id, user string) (flashgate.Order, error) {
	return s.Order(ctx, id, user)
}

func (s stalledOrders) Cancel(ctx context.Context, id, user string) (flashgate.Order, error) {
	return s.Order(ctx, id, user)
}

// TestOrderRouteDeadline: an order request whose Orders call does not
// return is answered 503 unavailable once OrderTimeout passed, not held.
func TestOrderRouteDeadline(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Orders = stalledOrders{}; c.OrderTimeout = 200 * time.Millisecond })
	h := e.s.Handler()
	alice := token(t, "alice")
	for _, r := range []req{
		{method: "GET", path: "/api/orders/ord-a", token: alice},
		{method: "POST", path: "/api/orders/ord-a/pay", token: alice},
		{method: "POST", path: "/api/orders/ord-a/cancel", token: alice},
	} {
		start := time.Now()
		resp := do(h, r)
		took := time.Since(start)
		if resp.StatusCode() != 503 || !strings.Contains(string(resp.Body()), `"unavailable"`) {
			t.Errorf("%s %s: got %d %s, want 503 unavailable", r.method, r.path, resp.StatusCode(), resp.Body())
		}
		t.Logf("%s %s answered in %v", r.method, r.path, took.Round(time.Millisecond))
	}
}
