package gateway

import (
	"context"
	"strconv"
	"testing"

	"github.com/valyala/fasthttp"
)

// allocsPerRequest runs r through h repeatedly on one RequestCtx, as a
// keep-alive connection does, and returns the allocations per request.
func allocsPerRequest(t *testing.T, h fasthttp.RequestHandler, r req, wantStatus int) float64 {
	t.Helper()
	var rq fasthttp.Request
	r.request(&rq)
	var ctx fasthttp.RequestCtx
	ctx.Init(&rq, nil, nil)
	for i := 0; i < 3; i++ { // warm the caches and buffers
		ctx.Response.Reset()
		h(&ctx)
	}
	if got := ctx.Response.StatusCode(); got != wantStatus {
		t.Fatalf("%s %s: got %d %s, want %d", r.method, r.path, got, ctx.Response.Body(), wantStatus)
	}
	return testing.AllocsPerRun(500, func() {
		ctx.Response.Reset()
		h(&ctx)
	})
}

// TestZeroAllocs proves the hot paths allocate nothing per request, with
// metrics on: the sold-out and not-started rejections (whatever the token's
// signature), the item page (200 and 304, plain and gzip) and the status JSON.
func TestZeroAllocs(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.UserRate = -1 })
	e.sale(t, "soon", 10, 15, false)
	e.sale(t, "one", 1, 2, true)
	h := e.s.Handler()
	if r := do(h, req{method: "POST", path: "/api/sales/one/orders", token: token(t, "winner")}); r.StatusCode() != 201 {
		t.Fatalf("warm-up purchase: got %d", r.StatusCode())
	}
	e.s.refreshState(context.Background())
	tok := token(t, "loser")
	// A token of the right shape whose signature is wrong: the cached
	// state answers before any signature check.
	forged := tok[:len(tok)-4] + "AAAA"
	page := do(h, req{method: "GET", path: "/sales/soon"})
	gzPage := do(h, req{method: "GET", path: "/sales/soon", header: map[string]string{"Accept-Encoding": "gzip"}})
	tests := []struct {
		name   string
		r      req
		status int
	}{
		{"sold out", req{method: "POST", path: "/api/sales/one/orders", token: tok}, 409},
		{"not started", req{method: "POST", path: "/api/sales/soon/orders", token: tok}, 409},
		{"sold out, bad signature", req{method: "POST", path: "/api/sales/one/orders", token: forged}, 409},
		{"not started, bad signature", req{method: "POST", path: "/api/sales/soon/orders", token: forged}, 409},
		{"item page", req{method: "GET", path: "/sales/soon"}, 200},
		{"item page gzip", req{method: "GET", path: "/sales/soon", header: map[string]string{"Accept-Encoding": "gzip, deflate, br"}}, 200},
		{"item page 304", req{method: "GET", path: "/sales/soon", header: map[string]string{"If-None-Match": string(page.Header.Peek("ETag"))}}, 304},
		{"item page gzip 304", req{method: "GET", path: "/sales/soon", header: map[string]string{"Accept-Encoding": "gzip", "If-None-Match": string(gzPage.Header.Peek("ETag"))}}, 304},
		{"item page head", req{method: "HEAD", path: "/sales/soon"}, 200},
		{"api sale", req{method: "GET", path: "/api/sales/one"}, 200},
		{"static", req{method: "GET", path: "/static/buy.js"}, 200},
		{"healthz", req{method: "GET", path: "/healthz"}, 200},
		{"unauthorized", req{method: "POST", path: "/api/sales/one/orders"}, 401},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := allocsPerRequest(t, h, tc.r, tc.status); got != 0 {
				t.Fatalf("got %v allocations per request, want 0", got)
			}
		})
	}
}

// TestPurchaseAllocs proves an admitted purchase by a new buyer each time,
// with both rate limits on, allocates only the buyer's id (a string the
// Reserver keeps): not the token's checks, the limiters (the adaptive
// reserve limit too, when on), nor the 201's body.
func TestPurchaseAllocs(t *testing.T) {
	for _, limit := range []int{0, 1024} {
		t.Run("reserve-limit="+strconv.Itoa(limit), func(t *testing.T) { testPurchaseAllocs(t, limit) })
	}
}

func testPurchaseAllocs(t *testing.T, reserveLimit int) {
	e := newEnv(t, func(c *Config) { c.Reserver = constReserver{}; c.ReserveLimit = reserveLimit })
	e.sale(t, "big", 1<<40, 1<<41, true)
	h := e.s.Handler()
	const runs = 300
	auth := make([]string, runs+2)
	for i := range auth {
		auth[i] = "Bearer " + token(t, "buyer-"+strconv.Itoa(i))
	}
	var rq fasthttp.Request
	req{method: "POST", path: "/api/sales/big/orders"}.request(&rq)
	var ctx fasthttp.RequestCtx
	ctx.Init(&rq, nil, nil)
	n := 0
	buy := func() {
		ctx.Request.Header.Set("Authorization", auth[n])
		n++
		ctx.Response.Reset()
		h(&ctx)
		if ctx.Response.StatusCode() != 201 {
			t.Fatalf("purchase %d: got %d %s, want 201", n, ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
	buy() // warm the buffers
	if got := testing.AllocsPerRun(runs, buy); got > 1 && !raceEnabled {
		t.Fatalf("got %v allocations per purchase, want at most 1", got)
	}
	if want := `{"order_id":"o-1","sale_id":"big","user_id":"buyer-` + strconv.Itoa(n-1) + `","status":"reserved"}`; string(ctx.Response.Body()) != want {
		t.Fatalf("got body %s, want %s", ctx.Response.Body(), want)
	}
}
