package gateway

import (
	"context"
	"testing"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/lua"
)

// TestPurchaseOfLostSale: a purchase of a sale the cached state says is
// open, whose reserve finds no sale in Redis (lost by a FLUSHALL before
// the state refresh saw it), is 503 unavailable with a Retry-After of
// 1–3 s and its admission given back, never 404, and so is one answered
// from the cached state once the state refresh saw the loss (the catalog
// has the sale); an id the gateway does not know stays 404, and the
// lost-sale answer allocates nothing.
func TestPurchaseOfLostSale(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.UserRate = -1 })
	h := e.s.Handler()
	e.sale(t, "gone", 100, 200, true)
	if r := do(h, req{method: "POST", path: "/api/sales/gone/orders", token: token(t, "u0")}); r.StatusCode() != 201 {
		t.Fatalf("purchase before the loss: got %d %s, want 201", r.StatusCode(), r.Body())
	}
	ctx := context.Background()
	if err := e.primary.Del(ctx, lua.SaleKeys("gone")...).Err(); err != nil {
		t.Fatal(err)
	}
	s := e.s.lookup([]byte("gone"))
	before := s.admitted.Load()
	tests := []struct {
		name, path string
		status     int
		code       string
	}{
		{"lost from Redis", "/api/sales/gone/orders", 503, "unavailable"},
		{"never a sale", "/api/sales/nosuch/orders", 404, "not_found"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := do(h, req{method: "POST", path: tc.path, token: token(t, "u1")})
			if got, code := r.StatusCode(), errCode(r); got != tc.status || code != tc.code {
				t.Fatalf("got %d %s, want %d %s", got, r.Body(), tc.status, tc.code)
			}
			if tc.status != 503 {
				return
			}
			if ra := string(r.Header.Peek("Retry-After")); ra != "1" && ra != "2" && ra != "3" {
				t.Errorf("got Retry-After %q, want 1, 2 or 3", ra)
			}
			if got := s.admitted.Load(); got != before {
				t.Errorf("got %d admitted, want %d (the admission given back)", got, before)
			}
		})
	}
	// Once the state refresh saw the loss, the cached state answers: the
	// catalog still has the sale, so 503 too, and an unknown id 404.
	e.s.refreshCatalog(ctx)
	e.s.refreshState(ctx)
	if st := s.state.Load(); st == nil || st.found {
		t.Fatalf("after the refresh: got cached state %+v, want the sale not found in Redis", st)
	}
	for _, tc := range tests {
		r := do(h, req{method: "POST", path: tc.path, token: token(t, "u1")})
		if got, code := r.StatusCode(), errCode(r); got != tc.status || code != tc.code {
			t.Fatalf("%s, after the refresh: got %d %s, want %d %s", tc.name, got, r.Body(), tc.status, tc.code)
		}
		if ra := string(r.Header.Peek("Retry-After")); tc.status == 503 && ra != "1" && ra != "2" && ra != "3" {
			t.Errorf("%s, after the refresh: got Retry-After %q, want 1, 2 or 3", tc.name, ra)
		}
	}
}

// TestPurchaseOfLostSaleAllocs: answering a purchase whose reserve found
// no sale allocates no more than an admitted purchase does (the buyer's
// id, which the Reserver is handed).
func TestPurchaseOfLostSaleAllocs(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Reserver = noSaleReserver{}; c.UserRate = -1 })
	e.sale(t, "gone", 1<<40, 1<<41, true)
	if got := allocsPerRequest(t, e.s.Handler(), req{method: "POST", path: "/api/sales/gone/orders", token: token(t, "u2")}, 503); got > 1 && !raceEnabled {
		t.Errorf("got %v allocations per request, want at most 1", got)
	}
}

// noSaleReserver answers every reserve as Redis does for a sale it does
// not hold, allocating nothing.
type noSaleReserver struct{}

func (noSaleReserver) Reserve(ctx context.Context, saleID, userID, variant string, qty int64) (string, error) {
	return "", flashgate.ErrNotFound
}
