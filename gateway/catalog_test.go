package gateway

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/flashgate/flashgate"
)

// failingCatalog is a fakeCatalog that fails every read once fail is set,
// as a catalog whose database is down does.
type failingCatalog struct {
	inner *fakeCatalog
	fail  atomic.Bool
}

var errCatalogDown = errors.New("dial tcp: connect: connection refused")

func (c *failingCatalog) Sale(ctx context.Context, id string) (flashgate.Sale, error) {
	if c.fail.Load() {
		return flashgate.Sale{}, errCatalogDown
	}
	return c.inner.Sale(ctx, id)
}

// TestCatalogDownNeverNotFound: a catalog that starts failing must never
// turn a sale into 404 not_found. A sale read before keeps its last good
// entry; one first read while the catalog is down is answered from Redis,
// and without Redis state it is 503 unavailable (it used to be 404: an
// upcoming sale lives only in the catalog).
func TestCatalogDownNeverNotFound(t *testing.T) {
	fc := &failingCatalog{}
	e := newEnv(t, func(c *Config) { c.Catalog = fc })
	fc.inner = e.catalog
	h := e.s.Handler()
	ctx := context.Background()

	e.sale(t, "known", 10, 10, true)
	if r := do(h, req{method: "GET", path: "/api/sales/known"}); r.StatusCode() != 200 {
		t.Fatalf("known sale before the failure: got %d, want 200", r.StatusCode())
	}
	e.sale(t, "fresh", 10, 10, true) // in Redis, never read by this gateway
	e.catalog.put(flashgate.Sale{ID: "upcoming", Name: "Later", Total: 5, State: flashgate.StateUpcoming})

	fc.fail.Store(true)
	e.s.refreshCatalog(ctx)
	e.s.refreshState(ctx)

	tests := []struct {
		name   string
		r      req
		status int
		want   string
	}{
		{"known doc", req{method: "GET", path: "/api/sales/known"}, 200, `"name":"Widget \u003cknown\u003e"`},
		{"known buy", req{method: "POST", path: "/api/sales/known/orders", token: token(t, "u1")}, 201, `"status":"reserved"`},
		{"fresh doc", req{method: "GET", path: "/api/sales/fresh"}, 200, `"state":"open"`},
		{"fresh buy", req{method: "POST", path: "/api/sales/fresh/orders", token: token(t, "u2")}, 201, `"status":"reserved"`},
		{"upcoming doc", req{method: "GET", path: "/api/sales/upcoming"}, 503, `"unavailable"`},
		{"upcoming buy", req{method: "POST", path: "/api/sales/upcoming/orders", token: token(t, "u3")}, 503, `"unavailable"`},
		// The item page says so too, with its own page, not the 404 one.
		{"upcoming page", req{method: "GET", path: "/sales/upcoming"}, 503, `<h1>Temporarily unavailable</h1>`},
	}
	for _, tc := range tests {
		r := do(h, tc.r)
		if r.StatusCode() != tc.status || !strings.Contains(string(r.Body()), tc.want) {
			t.Errorf("%s: got %d %s, want %d with %s", tc.name, r.StatusCode(), r.Body(), tc.status, tc.want)
		}
	}

	// Once the catalog answers again, the upcoming sale is read and shown.
	fc.fail.Store(false)
	e.s.refreshCatalog(ctx)
	if r := do(h, req{method: "GET", path: "/api/sales/upcoming"}); r.StatusCode() != 200 || !strings.Contains(string(r.Body()), `"state":"upcoming"`) {
		t.Errorf("upcoming after the catalog is back: got %d %s, want 200 upcoming", r.StatusCode(), r.Body())
	}
}

// TestCatalogRefreshSkipsNonSales: ids that are neither in Redis nor in
// the catalog (anyone can make the gateway cache thousands) are not
// re-read from the catalog every CatalogRefresh; real sales are.
func TestCatalogRefreshSkipsNonSales(t *testing.T) {
	e := newEnv(t, nil)
	e.sale(t, "real", 3, 4, true)
	h := e.s.Handler()
	do(h, req{method: "GET", path: "/api/sales/real"})
	do(h, req{method: "GET", path: "/api/sales/junk"})
	before := e.catalog.calls.Load()
	e.s.refreshCatalog(context.Background())
	if got := e.catalog.calls.Load() - before; got != 1 {
		t.Fatalf("got %d catalog reads in one refresh, want 1 (the real sale only)", got)
	}
	// Once Redis knows the id (the sale was created), its entry is read again.
	e.sale(t, "junk", 2, 3, false)
	e.s.refreshState(context.Background())
	e.s.refreshCatalog(context.Background())
	if r := do(h, req{method: "GET", path: "/sales/junk"}); r.StatusCode() != 200 {
		t.Fatalf("page of a sale created after its id was asked for: got %d, want 200", r.StatusCode())
	}
}
