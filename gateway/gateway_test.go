package gateway

import (
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/lua"
)

func TestNewRequiresSettings(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Fatalf("New(Config{}): got nil error, want one")
	}
}

// TestRoutes walks every public route and the status codes of docs/api.md.
func TestRoutes(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.UserRate = -1 })
	h := e.s.Handler()
	e.sale(t, "open1", 5, 8, true)
	e.sale(t, "soon", 5, 8, false)
	e.sale(t, "gone", 5, 8, true)
	e.setState(t, "gone", "close")
	e.sale(t, "one", 1, 2, true)
	alice, bob := token(t, "alice"), token(t, "bob")
	e.orders.orders["ord-a"] = flashgate.Order{ID: "ord-a", SaleID: "open1", UserID: "alice", Status: flashgate.StatusPendingPayment}
	e.orders.orders["ord-x"] = flashgate.Order{ID: "ord-x", SaleID: "open1", UserID: "alice", Status: flashgate.StatusExpired}

	// The one unit of "one" goes to bob first.
	if r := do(h, req{method: "POST", path: "/api/sales/one/orders", token: bob}); r.StatusCode() != 201 {
		t.Fatalf("bob buys: got %d %s, want 201", r.StatusCode(), r.Body())
	}

	tests := []struct {
		name   string
		r      req
		status int
		code   string // error code, or a substring of the body for successes
	}{
		{"page", req{method: "GET", path: "/sales/open1"}, 200, "Widget &lt;open1&gt;"},
		{"page head", req{method: "HEAD", path: "/sales/open1"}, 200, ""},
		{"page unknown", req{method: "GET", path: "/sales/nope"}, 404, "Not found"},
		{"page post", req{method: "POST", path: "/sales/open1"}, 405, ""},
		{"api sale", req{method: "GET", path: "/api/sales/open1"}, 200, `"state":"open"`},
		{"api upcoming", req{method: "GET", path: "/api/sales/soon"}, 200, `"state":"upcoming"`},
		{"api closed", req{method: "GET", path: "/api/sales/gone"}, 200, `"state":"closed"`},
		{"api unknown", req{method: "GET", path: "/api/sales/nope"}, 404, "not_found"},
		{"api post", req{method: "POST", path: "/api/sales/open1"}, 405, "method_not_allowed"},
		{"buy", req{method: "POST", path: "/api/sales/open1/orders", token: alice}, 201, `"status":"reserved"`},
		{"buy again", req{method: "POST", path: "/api/sales/open1/orders", token: alice}, 409, "already_purchased"},
		{"buy qty", req{method: "POST", path: "/api/sales/open1/orders", token: token(t, "carol"), body: `{"quantity":1}`}, 201, `"user_id":"carol"`},
		{"buy qty too big", req{method: "POST", path: "/api/sales/open1/orders", token: token(t, "dave"), body: `{"quantity":2}`}, 400, "bad_request"},
		{"buy qty zero", req{method: "POST", path: "/api/sales/open1/orders", token: token(t, "erin"), body: `{"quantity":0}`}, 400, "bad_request"},
		{"buy malformed", req{method: "POST", path: "/api/sales/open1/orders", token: token(t, "frank"), body: `{"quantity":`}, 400, "bad_request"},
		{"buy not started", req{method: "POST", path: "/api/sales/soon/orders", token: alice}, 409, "not_started"},
		{"buy closed", req{method: "POST", path: "/api/sales/gone/orders", token: alice}, 409, "closed"},
		{"buy sold out upstream", req{method: "POST", path: "/api/sales/one/orders", token: alice}, 409, "sold_out"},
		{"buy unknown", req{method: "POST", path: "/api/sales/nope/orders", token: alice}, 404, "not_found"},
		{"buy no token", req{method: "POST", path: "/api/sales/open1/orders"}, 401, "unauthorized"},
		{"buy get", req{method: "GET", path: "/api/sales/open1/orders", token: alice}, 405, "method_not_allowed"},
		{"buy too large", req{method: "POST", path: "/api/sales/open1/orders", token: alice, body: strings.Repeat(" ", 5000)}, 413, "too_large"},
		{"order", req{method: "GET", path: "/api/orders/ord-a", token: alice}, 200, `"status":"pending_payment"`},
		{"order not owner", req{method: "GET", path: "/api/orders/ord-a", token: bob}, 404, "not_found"},
		{"order no token", req{method: "GET", path: "/api/orders/ord-a"}, 401, "unauthorized"},
		{"order post", req{method: "POST", path: "/api/orders/ord-a", token: alice}, 405, "method_not_allowed"},
		{"pay", req{method: "POST", path: "/api/orders/ord-a/pay", token: alice}, 200, `"status":"paid"`},
		{"pay expired", req{method: "POST", path: "/api/orders/ord-x/pay", token: alice}, 409, "not_payable"},
		{"pay get", req{method: "GET", path: "/api/orders/ord-a/pay", token: alice}, 405, "method_not_allowed"},
		{"cancel", req{method: "POST", path: "/api/orders/ord-a/cancel", token: alice}, 200, `"status":"cancelled"`},
		{"cancel not owner", req{method: "POST", path: "/api/orders/ord-a/cancel", token: bob}, 404, "not_found"},
		{"healthz", req{method: "GET", path: "/healthz"}, 200, "ok"},
		{"readyz", req{method: "GET", path: "/readyz"}, 200, `{"status":"ready"}`},
		{"static js", req{method: "GET", path: "/static/buy.js"}, 200, "sessionStorage"},
		{"static css", req{method: "GET", path: "/static/style.css"}, 200, "button"},
		{"static unknown", req{method: "GET", path: "/static/nope.js"}, 404, "not_found"},
		{"admin", req{method: "GET", path: "/admin/sales"}, 404, "not_found"},
		{"api admin", req{method: "GET", path: "/api/admin/sales"}, 404, "not_found"},
		{"root", req{method: "GET", path: "/"}, 404, "not_found"},
		{"buy unknown field", req{method: "POST", path: "/api/sales/open1/orders", token: token(t, "gina"), body: `{"quantity":1,"colour":"red"}`}, 400, "bad_request"},
		{"buy trailing data", req{method: "POST", path: "/api/sales/open1/orders", token: token(t, "hank"), body: `{"quantity":1} {}`}, 400, "bad_request"},
		{"buy null body", req{method: "POST", path: "/api/sales/open1/orders", token: token(t, "ivan"), body: `null`}, 400, "bad_request"},
		{"buy null body spaced", req{method: "POST", path: "/api/sales/open1/orders", token: token(t, "judy"), body: " null\n"}, 400, "bad_request"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := do(h, tc.r)
			if r.StatusCode() != tc.status {
				t.Fatalf("got status %d (%s), want %d", r.StatusCode(), r.Body(), tc.status)
			}
			body := string(r.Body())
			if tc.status >= 400 && strings.HasPrefix(tc.r.path, "/api/") {
				if got := errCode(r); got != tc.code {
					t.Fatalf("got error code %q (%s), want %q", got, body, tc.code)
				}
				if ct := string(r.Header.ContentType()); ct != "application/json" {
					t.Fatalf("got content type %q, want application/json", ct)
				}
			} else if !strings.Contains(body, tc.code) {
				t.Fatalf("got body %q, want it to contain %q", body, tc.code)
			}
			if tc.status == 405 && len(r.Header.Peek("Allow")) == 0 {
				t.Fatalf("got no Allow header on 405")
			}
		})
	}

	// The already_purchased answer names alice's live order.
	r := do(h, req{method: "POST", path: "/api/sales/open1/orders", token: alice})
	var got struct {
		Error   string `json:"error"`
		OrderID string `json:"order_id"`
	}
	_ = json.Unmarshal(r.Body(), &got)
	if r.StatusCode() != 409 || got.OrderID == "" {
		t.Fatalf("repeat purchase: got %d %s, want 409 with an order_id", r.StatusCode(), r.Body())
	}
}

func TestAPISaleJSON(t *testing.T) {
	e := newEnv(t, nil)
	e.sale(t, "s1", 3, 4, true)
	r := do(e.s.Handler(), req{method: "GET", path: "/api/sales/s1"})
	var got map[string]any
	if err := json.Unmarshal(r.Body(), &got); err != nil {
		t.Fatalf("got invalid JSON %s: %v", r.Body(), err)
	}
	want := map[string]any{
		"id": "s1", "name": "Widget <s1>", "price_cents": 1999.0, "total": 3.0,
		"remaining": 3.0, "state": "open", "starts_at": "2030-01-02T03:04:05Z",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("field %s: got %v, want %v", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("got %d fields (%s), want %d", len(got), r.Body(), len(want))
	}
	// Sold out once booked reaches total, after a refresh.
	if err := e.primary.HSet(context.Background(), lua.SaleKey("s1"), lua.FieldBooked, 3).Err(); err != nil {
		t.Fatal(err)
	}
	e.s.refreshState(context.Background())
	r = do(e.s.Handler(), req{method: "GET", path: "/api/sales/s1"})
	if !strings.Contains(string(r.Body()), `"remaining":0,"state":"sold_out"`) {
		t.Fatalf("got %s, want remaining 0 and sold_out", r.Body())
	}
}

func TestPathTricks(t *testing.T) {
	e := newEnv(t, nil)
	e.sale(t, "s1", 3, 4, true)
	h := e.s.Handler()
	long := strings.Repeat("a", 65)
	for _, p := range []string{
		"/sales/../admin", "/sales/%2e%2e/admin", "/sales/%2e%2e", "/sales/s1/", "/sales//s1", "//sales/s1",
		"/sales/" + long, "/sales/s%31", "/sales/s.1", "/sales/s1;x", "/sales/", "/sales",
		"/api/sales/s1/", "/api/sales//s1", "/api/sales/../sales/s1", "/api/sales/%73%31",
		"/api/sales/" + long, "/api/sales/s1/orders/", "/api/sales/s1//orders", "/api/orders/",
		"/api/orders/a/b/pay", "/api/orders/" + long, "/api/orders/x%2Fy", "/admin/", "/api/admin/sales",
		"/static/../gateway/item.html", "/static/", "/SALES/s1",
	} {
		r := do(h, req{method: "GET", path: p})
		if r.StatusCode() != 404 {
			t.Errorf("%s: got %d, want 404", p, r.StatusCode())
		}
		if strings.HasPrefix(p, "/api/") && errCode(r) != "not_found" {
			t.Errorf("%s: got body %s, want not_found JSON", p, r.Body())
		}
	}
	// A long valid id is fine.
	if r := do(h, req{method: "GET", path: "/api/sales/" + long[:64]}); r.StatusCode() != 404 || errCode(r) != "not_found" {
		t.Errorf("64-character unknown id: got %d %s, want 404 not_found", r.StatusCode(), r.Body())
	}
}

// TestServerLimits drives a real fasthttp server on a loopback listener:
// fasthttp's own body limit answers in JSON, and Shutdown fails readiness
// and stops. (A socket, not an in-memory pipe: the server answers 413 after
// the headers and closes, and only a socket's buffer lets the client finish
// writing the oversized body and read that answer every time.)
func TestServerLimits(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.ShutdownDelay = 10 * time.Millisecond })
	e.sale(t, "s1", 3, 4, true)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- e.s.Serve(ln) }()
	c := &fasthttp.HostClient{Addr: ln.Addr().String()}
	call := func(method, path, body string) *fasthttp.Response {
		rq, rs := fasthttp.AcquireRequest(), &fasthttp.Response{}
		defer fasthttp.ReleaseRequest(rq)
		rq.Header.SetMethod(method)
		rq.SetRequestURI("http://gateway" + path)
		rq.Header.Set("Authorization", "Bearer "+token(t, "u1"))
		rq.SetBodyString(body)
		if err := c.DoTimeout(rq, rs, 5*time.Second); err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		return rs
	}
	if r := call("POST", "/api/sales/s1/orders", strings.Repeat("x", 10_000)); r.StatusCode() != 413 || errCode(r) != "too_large" {
		t.Fatalf("huge body: got %d %s, want 413 too_large", r.StatusCode(), r.Body())
	}
	if r := call("POST", "/api/sales/s1/orders", `{"quantity":1}`); r.StatusCode() != 201 {
		t.Fatalf("purchase over the wire: got %d %s, want 201", r.StatusCode(), r.Body())
	}
	if r := call("GET", "/sales/..%2fadmin", ""); r.StatusCode() != 404 {
		t.Fatalf("path trick over the wire: got %d, want 404", r.StatusCode())
	}
	if r := call("GET", "/readyz", ""); r.StatusCode() != 200 {
		t.Fatalf("readyz: got %d, want 200", r.StatusCode())
	}
	if len(call("GET", "/healthz", "").Header.Peek("Server")) != 0 {
		t.Fatalf("got a Server header %q, want none", call("GET", "/healthz", "").Header.Peek("Server"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if r := do(e.s.Handler(), req{method: "GET", path: "/readyz"}); r.StatusCode() != 503 {
		t.Fatalf("readyz after Shutdown: got %d, want 503", r.StatusCode())
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("Serve did not return after Shutdown")
	}
}

func TestPanicIsInternal(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Reserver = panicReserver{} })
	e.sale(t, "s1", 3, 4, true)
	r := do(e.s.Handler(), req{method: "POST", path: "/api/sales/s1/orders", token: token(t, "u1")})
	if r.StatusCode() != 500 || errCode(r) != "internal" {
		t.Fatalf("got %d %s, want 500 internal", r.StatusCode(), r.Body())
	}
}

func TestReserveErrorsHideText(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Reserver = &fakeReserver{err: errTest}; c.UserRate = -1 })
	e.sale(t, "s1", 3, 4, true)
	r := do(e.s.Handler(), req{method: "POST", path: "/api/sales/s1/orders", token: token(t, "u1")})
	if r.StatusCode() != 500 || strings.Contains(string(r.Body()), "boom") {
		t.Fatalf("got %d %s, want 500 without the error text", r.StatusCode(), r.Body())
	}
	e2 := newEnv(t, func(c *Config) { c.Reserver = &fakeReserver{err: flashgate.ErrUnavailable}; c.UserRate = -1 })
	e2.sale(t, "s1", 3, 4, true)
	if r := do(e2.s.Handler(), req{method: "POST", path: "/api/sales/s1/orders", token: token(t, "u1")}); r.StatusCode() != 503 || errCode(r) != "unavailable" {
		t.Fatalf("unavailable reserver: got %d %s, want 503 unavailable", r.StatusCode(), r.Body())
	}
}

type panicReserver struct{}

func (panicReserver) Reserve(context.Context, string, string, string, int64) (string, error) {
	panic("reserver exploded")
}
