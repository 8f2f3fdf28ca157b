package gateway

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/redistest"
	"github.com/flashgate/flashgate/internal/testclock"
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

func TestAuth(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Reserver = &fakeReserver{} })
	e.sale(t, "s1", 100, 150, true)
	h := e.s.Handler()
	exp := jwt.NewNumericDate(time.Now().Add(time.Hour))
	sign := func(m jwt.SigningMethod, key any, claims jwt.Claims) string {
		s, err := jwt.NewWithClaims(m, claims).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	b64 := base64.RawURLEncoding.EncodeToString
	good := jwt.RegisteredClaims{Subject: "u1", ExpiresAt: exp}
	payload := b64([]byte(`{"sub":"u1","exp":` + strconv.FormatInt(exp.Unix(), 10) + `}`))
	tests := []struct {
		name   string
		header string
		status int
	}{
		{"valid", "Bearer " + sign(jwt.SigningMethodHS256, testSecret, good), 201},
		{"lower-case scheme", "bearer " + sign(jwt.SigningMethodHS256, testSecret, jwt.RegisteredClaims{Subject: "u2", ExpiresAt: exp}), 201},
		{"missing header", "", 401},
		{"basic", "Basic dTE6cGFzcw==", 401},
		{"bearer only", "Bearer ", 401},
		{"garbage", "Bearer not.a.token", 401},
		{"forged", "Bearer " + sign(jwt.SigningMethodHS256, []byte("another secret"), good), 401},
		{"alg none", "Bearer " + sign(jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, good), 401},
		{"hs512", "Bearer " + sign(jwt.SigningMethodHS512, testSecret, good), 401},
		{"rs256 header", "Bearer " + b64([]byte(`{"alg":"RS256","typ":"JWT"}`)) + "." + payload + "." + b64([]byte("sig")), 401},
		{"expired", "Bearer " + sign(jwt.SigningMethodHS256, testSecret, jwt.RegisteredClaims{Subject: "u1", ExpiresAt: jwt.NewNumericDate(time.Now().Add(-time.Minute))}), 401},
		{"no exp", "Bearer " + sign(jwt.SigningMethodHS256, testSecret, jwt.RegisteredClaims{Subject: "u1"}), 401},
		{"no sub", "Bearer " + sign(jwt.SigningMethodHS256, testSecret, jwt.RegisteredClaims{ExpiresAt: exp}), 401},
		{"long sub", "Bearer " + sign(jwt.SigningMethodHS256, testSecret, jwt.RegisteredClaims{Subject: strings.Repeat("x", 129), ExpiresAt: exp}), 401},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := req{method: "POST", path: "/api/sales/s1/orders"}
			if tc.header != "" {
				r.header = map[string]string{"Authorization": tc.header}
			}
			for i := 0; i < 2; i++ { // twice: the second answer comes from the token cache
				resp := do(h, r)
				want := tc.status
				if i == 1 && want == 201 {
					want = 201 // the fake reserver admits repeats
				}
				if resp.StatusCode() != want {
					t.Fatalf("try %d: got %d %s, want %d", i, resp.StatusCode(), resp.Body(), want)
				}
				if want == 401 && errCode(resp) != "unauthorized" {
					t.Fatalf("got body %s, want unauthorized", resp.Body())
				}
			}
		})
	}
}

// TestTokenExpiry checks that a token stops working at exp.
func TestTokenExpiry(t *testing.T) {
	clock := testclock.New(time.Now())
	e := newEnv(t, func(c *Config) { c.Clock = clock; c.Reserver = &fakeReserver{}; c.UserRate = -1 })
	e.sale(t, "s1", 100, 150, true)
	tok, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.RegisteredClaims{
		Subject: "u1", ExpiresAt: jwt.NewNumericDate(clock.Now().Add(time.Minute)),
	}).SignedString(testSecret)
	r := req{method: "POST", path: "/api/sales/s1/orders", token: tok}
	if got := do(e.s.Handler(), r).StatusCode(); got != 201 {
		t.Fatalf("fresh token: got %d, want 201", got)
	}
	clock.Add(2 * time.Minute)
	if got := do(e.s.Handler(), r).StatusCode(); got != 401 {
		t.Fatalf("expired token: got %d, want 401", got)
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

func TestItemPageCaching(t *testing.T) {
	e := newEnv(t, nil)
	e.sale(t, "s1", 3, 4, true)
	h := e.s.Handler()
	plain := do(h, req{method: "GET", path: "/sales/s1"})
	gz := do(h, req{method: "GET", path: "/sales/s1", header: map[string]string{"Accept-Encoding": "gzip, br"}})
	et, gzet := string(plain.Header.Peek("ETag")), string(gz.Header.Peek("ETag"))
	if et == "" || et[0] != '"' || et == gzet {
		t.Fatalf("got ETags %q and %q, want two different quoted strong tags", et, gzet)
	}
	for _, r := range []*fasthttp.Response{plain, gz} {
		if got := string(r.Header.Peek("Vary")); got != "Accept-Encoding" {
			t.Errorf("got Vary %q, want Accept-Encoding", got)
		}
		if got := string(r.Header.Peek("Cache-Control")); got != "public, max-age=1" {
			t.Errorf("got Cache-Control %q, want public, max-age=1", got)
		}
	}
	if got := string(gz.Header.Peek("Content-Encoding")); got != "gzip" {
		t.Fatalf("got Content-Encoding %q, want gzip", got)
	}
	unz, err := gz.BodyGunzip()
	if err != nil || string(unz) != string(plain.Body()) {
		t.Fatalf("gunzipped body differs from the plain one (err %v)", err)
	}
	if !strings.Contains(string(plain.Body()), `data-sale="s1"`) {
		t.Fatalf("page lacks its sale id: %s", plain.Body())
	}
	// 304 for each encoding's own tag, 200 for the other's.
	tests := []struct {
		inm, enc string
		status   int
	}{
		{et, "", 304},
		{gzet, "gzip", 304},
		{`W/` + et, "", 304},
		{`"x", ` + et, "", 304},
		{"*", "", 304},
		{gzet, "", 200},
		{et, "gzip", 200},
		{`"other"`, "", 200},
	}
	for _, tc := range tests {
		hdr := map[string]string{"If-None-Match": tc.inm}
		if tc.enc != "" {
			hdr["Accept-Encoding"] = tc.enc
		}
		r := do(h, req{method: "GET", path: "/sales/s1", header: hdr})
		if r.StatusCode() != tc.status {
			t.Errorf("If-None-Match %s (%q): got %d, want %d", tc.inm, tc.enc, r.StatusCode(), tc.status)
		}
		if tc.status == 304 && len(r.Body()) != 0 {
			t.Errorf("304 with a body of %d bytes", len(r.Body()))
		}
	}
	// A changed catalog entry gives a new page and ETag after a catalog refresh.
	starts := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	e.catalog.put(flashgate.Sale{ID: "s1", Name: "Renamed", PriceCents: 2500, Total: 3, StartsAt: &starts})
	e.s.refreshCatalog(context.Background())
	r := do(h, req{method: "GET", path: "/sales/s1", header: map[string]string{"If-None-Match": et}})
	if r.StatusCode() != 200 || string(r.Header.Peek("ETag")) == et || !strings.Contains(string(r.Body()), "Renamed") {
		t.Fatalf("after a rename: got %d, ETag %s, want 200 with a new ETag and the new name", r.StatusCode(), r.Header.Peek("ETag"))
	}
	// An unchanged catalog entry keeps the page.
	et2 := string(r.Header.Peek("ETag"))
	e.s.refreshCatalog(context.Background())
	if r := do(h, req{method: "GET", path: "/sales/s1", header: map[string]string{"If-None-Match": et2}}); r.StatusCode() != 304 {
		t.Fatalf("unchanged catalog: got %d, want 304", r.StatusCode())
	}
	// The static assets are cacheable too.
	js := do(h, req{method: "GET", path: "/static/buy.js"})
	if r := do(h, req{method: "GET", path: "/static/buy.js", header: map[string]string{"If-None-Match": string(js.Header.Peek("ETag"))}}); r.StatusCode() != 304 {
		t.Fatalf("static 304: got %d, want 304", r.StatusCode())
	}
}

func TestRateLimits(t *testing.T) {
	t.Run("user", func(t *testing.T) {
		fr := &fakeReserver{}
		e := newEnv(t, func(c *Config) { c.Reserver = fr; c.UserRate = 0.001; c.UserBurst = 2 })
		e.sale(t, "s1", 100, 150, true)
		tok := token(t, "u1")
		var got []int
		for i := 0; i < 4; i++ {
			r := do(e.s.Handler(), req{method: "POST", path: "/api/sales/s1/orders", token: tok})
			got = append(got, r.StatusCode())
			if r.StatusCode() == 429 {
				if errCode(r) != "rate_limited" {
					t.Fatalf("got body %s, want rate_limited", r.Body())
				}
				if ra, err := strconv.Atoi(string(r.Header.Peek("Retry-After"))); err != nil || ra < 1 {
					t.Fatalf("got Retry-After %q, want whole seconds ≥ 1", r.Header.Peek("Retry-After"))
				}
			}
		}
		if want := []int{201, 201, 429, 429}; !equalInts(got, want) {
			t.Fatalf("got %v, want %v", got, want)
		}
		// Another user is not affected.
		if r := do(e.s.Handler(), req{method: "POST", path: "/api/sales/s1/orders", token: token(t, "u2")}); r.StatusCode() != 201 {
			t.Fatalf("other user: got %d, want 201", r.StatusCode())
		}
	})
	t.Run("one user's flood spends no sale tokens", func(t *testing.T) {
		fr := &fakeReserver{}
		e := newEnv(t, func(c *Config) {
			c.Reserver = fr
			c.UserRate = 0.001
			c.UserBurst = 1
			c.SaleRate = 0.001
			c.SaleBurst = 3
		})
		e.sale(t, "s1", 100, 150, true)
		tok := token(t, "flooder")
		for i := 0; i < 10; i++ {
			do(e.s.Handler(), req{method: "POST", path: "/api/sales/s1/orders", token: tok})
		}
		for _, u := range []string{"u1", "u2"} {
			if r := do(e.s.Handler(), req{method: "POST", path: "/api/sales/s1/orders", token: token(t, u)}); r.StatusCode() != 201 {
				t.Fatalf("%s after another user's flood: got %d %s, want 201", u, r.StatusCode(), r.Body())
			}
		}
		if n := fr.n.Load(); n != 3 {
			t.Fatalf("got %d reserves, want 3 (one flooder, two others)", n)
		}
	})
	t.Run("sale", func(t *testing.T) {
		fr := &fakeReserver{}
		e := newEnv(t, func(c *Config) { c.Reserver = fr; c.UserRate = -1; c.SaleRate = 0.001; c.SaleBurst = 3 })
		e.sale(t, "s1", 100, 150, true)
		limited := 0
		for i := 0; i < 10; i++ {
			r := do(e.s.Handler(), req{method: "POST", path: "/api/sales/s1/orders", token: token(t, "u"+strconv.Itoa(i))})
			if r.StatusCode() == 429 {
				limited++
			}
		}
		if fr.n.Load() != 3 || limited != 7 {
			t.Fatalf("got %d admitted and %d limited, want 3 and 7", fr.n.Load(), limited)
		}
	})
	t.Run("bounded users", func(t *testing.T) {
		e := newEnv(t, func(c *Config) { c.Reserver = &fakeReserver{}; c.MaxUsers = 10 })
		e.sale(t, "s1", 100, 150, true)
		for i := 0; i < 50; i++ {
			do(e.s.Handler(), req{method: "POST", path: "/api/sales/s1/orders", token: token(t, "u"+strconv.Itoa(i))})
		}
		if n := e.s.users.len(); n > 10 || n < 8 {
			t.Fatalf("got %d user limiters, want 8 to 10", n)
		}
	})
	t.Run("rejections spend no token", func(t *testing.T) {
		e := newEnv(t, func(c *Config) { c.Reserver = &fakeReserver{}; c.UserRate = 0.001; c.UserBurst = 1 })
		e.sale(t, "s1", 100, 150, false)
		tok := token(t, "u1")
		for i := 0; i < 5; i++ {
			if r := do(e.s.Handler(), req{method: "POST", path: "/api/sales/s1/orders", token: tok}); errCode(r) != "not_started" {
				t.Fatalf("got %s, want not_started", r.Body())
			}
		}
		e.setState(t, "s1", "open")
		e.s.refreshState(context.Background())
		if r := do(e.s.Handler(), req{method: "POST", path: "/api/sales/s1/orders", token: tok}); r.StatusCode() != 201 {
			t.Fatalf("first admitted try: got %d %s, want 201", r.StatusCode(), r.Body())
		}
	})
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestAdmissionCap: with count 15 for 10 units, 15 requests are admitted
// (10 reserve, 5 fail on the primary), then the gateway answers sold_out
// itself, and a flush brings access on the primary to 15.
// TestRejectedFlushDeferred checks that rejections alone reach the primary
// every RejectedFlushInterval, not every flush tick, and that they go at
// once with admissions.
func TestRejectedFlushDeferred(t *testing.T) {
	clock := testclock.New(time.Now())
	e := newEnv(t, func(c *Config) { c.UserRate = -1; c.Clock = clock; c.RejectedFlushInterval = 250 * time.Millisecond })
	e.sale(t, "s1", 10, 15, true)
	h := e.s.Handler()
	ctx := context.Background()
	buy := func(n int, prefix string) {
		for i := range n {
			do(h, req{method: "POST", path: "/api/sales/s1/orders", token: token(t, prefix+strconv.Itoa(i))})
		}
	}
	counts := func() (access, rejected int64) {
		access, _ = e.primary.HGet(ctx, lua.SaleKey("s1"), lua.FieldAccess).Int64()
		rejected, _ = e.primary.HGet(ctx, lua.SaleKey("s1"), lua.FieldRejected).Int64()
		return access, rejected
	}
	buy(20, "a") // 15 admitted, 5 rejected
	e.s.flushTick(ctx)
	if a, r := counts(); a != 15 || r != 5 {
		t.Fatalf("first tick: got access %d, rejected %d; want 15, 5", a, r)
	}
	for _, step := range []struct {
		advance time.Duration
		buy     int
		want    int64
	}{
		{10 * time.Millisecond, 7, 5},   // rejections alone, not yet due
		{100 * time.Millisecond, 3, 5},  // still not due
		{200 * time.Millisecond, 0, 15}, // due: all ten go
		{10 * time.Millisecond, 4, 15},
	} {
		clock.Add(step.advance)
		buy(step.buy, "b"+strconv.FormatInt(int64(step.advance), 10))
		e.s.flushTick(ctx)
		if _, r := counts(); r != step.want {
			t.Fatalf("after %s more: got rejected %d on the primary, want %d", step.advance, r, step.want)
		}
	}
	e.s.flush(ctx) // the last flush at Close takes everything
	if _, r := counts(); r != 19 {
		t.Fatalf("after the last flush: got rejected %d, want 19", r)
	}
}

func TestAdmissionCap(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.UserRate = -1 })
	e.sale(t, "s1", 10, 15, true)
	h := e.s.Handler()
	statuses := map[int]int{}
	for i := 0; i < 40; i++ {
		r := do(h, req{method: "POST", path: "/api/sales/s1/orders", token: token(t, "u"+strconv.Itoa(i))})
		statuses[r.StatusCode()]++
	}
	if got := e.reserver.calls.Load(); got != 15 {
		t.Fatalf("got %d reserve calls, want 15", got)
	}
	if statuses[201] != 10 || statuses[409] != 30 {
		t.Fatalf("got statuses %v, want 10×201 and 30×409", statuses)
	}
	e.s.flush(context.Background())
	ctx := context.Background()
	if got, _ := e.primary.HGet(ctx, lua.SaleKey("s1"), lua.FieldAccess).Int64(); got != 15 {
		t.Fatalf("got access %d on the primary, want 15", got)
	}
	if got, _ := e.primary.HGet(ctx, lua.SaleKey("s1"), lua.FieldRejected).Int64(); got != 25 {
		t.Fatalf("got rejected %d on the primary, want 25", got)
	}
	// After a refresh (access now read from Redis) it still answers locally.
	e.s.refreshState(ctx)
	r := do(h, req{method: "POST", path: "/api/sales/s1/orders", token: token(t, "late")})
	if errCode(r) != "sold_out" || e.reserver.calls.Load() != 15 {
		t.Fatalf("after refresh: got %s and %d reserve calls, want sold_out and 15", r.Body(), e.reserver.calls.Load())
	}
	// A raised cap (as the control plane's re-sync does) lets traffic in again.
	if err := e.primary.HSet(ctx, lua.SaleKey("s1"), lua.FieldCount, 20, lua.FieldBooked, 9).Err(); err != nil {
		t.Fatal(err)
	}
	e.s.refreshState(ctx)
	if r := do(h, req{method: "POST", path: "/api/sales/s1/orders", token: token(t, "late")}); r.StatusCode() != 201 {
		t.Fatalf("after a re-sync: got %d %s, want 201", r.StatusCode(), r.Body())
	}
}

// TestRejectionsMakeNoRedisCalls counts every command both clients send
// while the handler judges not-started and sold-out purchases.
func TestRejectionsMakeNoRedisCalls(t *testing.T) {
	var cnt counter
	e := newEnv(t, func(c *Config) { c.UserRate = -1 })
	e.primary.AddHook(&cnt)
	e.sale(t, "soon", 10, 15, false)
	e.sale(t, "one", 1, 2, true)
	h := e.s.Handler()
	toks := make([]string, 20)
	for i := range toks {
		toks[i] = token(t, "u"+strconv.Itoa(i))
	}
	// Warm up: the first sight of each sale reads Redis once; u0 buys the
	// only unit of "one"; a refresh sees booked = total.
	do(h, req{method: "POST", path: "/api/sales/soon/orders", token: toks[0]})
	if r := do(h, req{method: "POST", path: "/api/sales/one/orders", token: toks[0]}); r.StatusCode() != 201 {
		t.Fatalf("warm-up purchase: got %d %s", r.StatusCode(), r.Body())
	}
	e.s.refreshState(context.Background())
	for _, p := range []string{"/api/sales/soon/orders", "/api/sales/one/orders"} {
		before := cnt.n.Load()
		for i := 1; i < len(toks); i++ {
			r := do(h, req{method: "POST", path: p, token: toks[i]})
			if r.StatusCode() != 409 {
				t.Fatalf("%s: got %d %s, want 409", p, r.StatusCode(), r.Body())
			}
		}
		if got := cnt.n.Load() - before; got != 0 {
			t.Fatalf("%s: got %d Redis commands during rejections, want 0", p, got)
		}
	}
	// The control: an admitted purchase does reach Redis.
	e.setState(t, "soon", "open")
	e.s.refreshState(context.Background())
	before := cnt.n.Load()
	if r := do(h, req{method: "POST", path: "/api/sales/soon/orders", token: toks[1]}); r.StatusCode() != 201 {
		t.Fatalf("control purchase: got %d", r.StatusCode())
	}
	if cnt.n.Load() == before {
		t.Fatalf("the hook saw no command for an admitted purchase: the counter is broken")
	}
}

// TestReadsHitReplica runs the gateway on a real primary and replica and
// reads INFO commandstats on both.
func TestReadsHitReplica(t *testing.T) {
	rs := redistest.Start(t)
	rp := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(rs.Port))
	rp.WaitReplica(t)
	primary, replica := rs.Client(t), rp.Client(t)
	ctx := context.Background()
	if err := lua.Prepare.Run(ctx, primary, lua.SaleKeys("s1"), 100, 150, 1, 500).Err(); err != nil {
		t.Fatal(err)
	}
	if err := lua.SetState.Run(ctx, primary, lua.SaleKeys("s1"), "open").Err(); err != nil {
		t.Fatal(err)
	}
	// Wait until the replica has the open sale.
	for i := 0; i < 200; i++ {
		if v, _ := replica.HGet(ctx, lua.SaleKey("s1"), lua.FieldStart).Result(); v == "1" {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, c := range []*redis.Client{primary, replica} {
		if err := c.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	cat := &fakeCatalog{}
	cat.put(flashgate.Sale{ID: "s1", Name: "W", PriceCents: 500, Total: 100})
	fr := &fakeReserver{}
	s, err := New(Config{
		Primary: primary, Replica: replica, Reserver: fr, Catalog: cat, JWTSecret: testSecret,
		StateRefresh: 5 * time.Millisecond, FlushInterval: 5 * time.Millisecond, UserRate: -1, ShutdownDelay: -1,
		Logger: discard(),
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	h := s.Handler()
	for i := 0; i < 30; i++ {
		do(h, req{method: "GET", path: "/api/sales/s1"})
		if r := do(h, req{method: "POST", path: "/api/sales/s1/orders", token: token(t, "u"+strconv.Itoa(i))}); r.StatusCode() != 201 {
			t.Fatalf("purchase: got %d %s", r.StatusCode(), r.Body())
		}
	}
	time.Sleep(50 * time.Millisecond) // let a few refreshes run
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got, _ := primary.HGet(ctx, lua.SaleKey("s1"), lua.FieldAccess).Int64(); got != 30 {
		t.Fatalf("got access %d on the primary, want 30", got)
	}
	pStats := cmdStats(t, primary)
	rStats := cmdStats(t, replica)
	if rStats["hmget"] == 0 {
		t.Fatalf("got no HMGET on the replica (stats %v)", rStats)
	}
	if pStats["hmget"] != 0 {
		t.Fatalf("got %d HMGETs on the primary, want 0", pStats["hmget"])
	}
	if pStats["hincrby"] == 0 {
		t.Fatalf("got no HINCRBY on the primary (stats %v)", pStats)
	}
}

// TestReplicaFallback reads from the primary when the replica is down, and
// answers 503 for a new sale when both are.
func TestReplicaFallback(t *testing.T) {
	rs := redistest.Start(t)
	dead := redistest.Start(t)
	primary, replica := rs.Client(t), dead.Client(t)
	dead.Stop()
	ctx := context.Background()
	if err := lua.Prepare.Run(ctx, primary, lua.SaleKeys("s1"), 10, 15, 1, 500).Err(); err != nil {
		t.Fatal(err)
	}
	cat := &fakeCatalog{}
	s, err := New(Config{Primary: primary, Replica: replica, Reserver: &fakeReserver{}, Catalog: cat,
		JWTSecret: testSecret, Logger: discard(), RedisTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if r := do(s.Handler(), req{method: "POST", path: "/api/sales/s1/orders", token: token(t, "u1")}); errCode(r) != "not_started" {
		t.Fatalf("replica down: got %d %s, want not_started read from the primary", r.StatusCode(), r.Body())
	}
	if r := do(s.Handler(), req{method: "GET", path: "/readyz"}); r.StatusCode() != 503 {
		t.Fatalf("readyz with the replica down: got %d, want 503", r.StatusCode())
	}
	rs.Stop()
	if r := do(s.Handler(), req{method: "POST", path: "/api/sales/s2/orders", token: token(t, "u1")}); r.StatusCode() != 503 || errCode(r) != "unavailable" {
		t.Fatalf("both down: got %d %s, want 503 unavailable", r.StatusCode(), r.Body())
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

func TestMetrics(t *testing.T) {
	e := newEnv(t, nil)
	e.sale(t, "s1", 3, 4, false)
	do(e.s.Handler(), req{method: "POST", path: "/api/sales/s1/orders", token: token(t, "u1")})
	do(e.s.Handler(), req{method: "GET", path: "/sales/s1"})
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			lbl := ""
			for _, l := range m.GetLabel() {
				lbl += l.GetName() + "=" + l.GetValue() + ","
			}
			if m.GetCounter().GetValue() > 0 || m.GetHistogram().GetSampleCount() > 0 {
				found[mf.GetName()+"{"+lbl+"}"] = true
			}
		}
	}
	for _, want := range []string{
		"flashgate_http_requests_total{code=409,route=purchase,}",
		"flashgate_http_requests_total{code=200,route=page,}",
		"flashgate_admission_total{decision=not_started,}",
		"flashgate_http_request_seconds{route=page,}",
	} {
		if !found[want] {
			t.Errorf("got no %s among %v", want, found)
		}
	}
}

func TestSalesAreDropped(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.SaleIdle = 100 * time.Millisecond; c.StateRefresh = 10 * time.Millisecond })
	e.sale(t, "s1", 3, 4, true)
	do(e.s.Handler(), req{method: "GET", path: "/api/sales/s1"})
	do(e.s.Handler(), req{method: "GET", path: "/api/sales/ghost"})
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		e.s.refreshState(ctx)
	}
	if _, ok := e.s.sales["ghost"]; ok {
		t.Fatalf("an unknown id is still cached after 3 idle refreshes")
	}
	if _, ok := e.s.sales["s1"]; !ok {
		t.Fatalf("a known sale was dropped after 3 idle refreshes")
	}
	for i := 0; i < 12; i++ {
		e.s.refreshState(ctx)
	}
	if n := len(e.s.sales); n != 0 {
		t.Fatalf("got %d cached sales after SaleIdle, want 0", n)
	}
}

type panicReserver struct{}

func (panicReserver) Reserve(context.Context, string, string, int64) (string, error) {
	panic("reserver exploded")
}

// TestNewSaleLoadedOnce: a burst of requests for a sale never seen before
// causes one Redis read and one catalog read.
func TestNewSaleLoadedOnce(t *testing.T) {
	var cnt counter
	e := newEnv(t, nil)
	e.sale(t, "s1", 3, 4, true)
	e.primary.AddHook(&cnt)
	if err := e.primary.Ping(context.Background()).Err(); err != nil { // dial first: the handshake counts too
		t.Fatal(err)
	}
	cnt.n.Store(0)
	h := e.s.Handler()
	done := make(chan int, 50)
	for i := 0; i < 50; i++ {
		go func() { done <- do(h, req{method: "GET", path: "/api/sales/s1"}).StatusCode() }()
	}
	for i := 0; i < 50; i++ {
		select {
		case st := <-done:
			if st != 200 {
				t.Fatalf("got %d, want 200", st)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("requests did not finish")
		}
	}
	if got := cnt.n.Load(); got != 1 {
		t.Fatalf("got %d Redis commands, want 1", got)
	}
	if got := e.catalog.calls.Load(); got != 1 {
		t.Fatalf("got %d catalog reads, want 1", got)
	}
}

// TestFullCacheKeepsRealSales: ids that are no sale fill the sale cache
// (anyone can send them); a real sale asked for afterwards must still be
// cached, so its admission cap holds and its admissions reach "access".
func TestFullCacheKeepsRealSales(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.UserRate = -1; c.MaxSales = 2 })
	e.sale(t, "real", 100, 2, true)
	h := e.s.Handler()
	for _, id := range []string{"junk1", "junk2"} {
		if r := do(h, req{method: "GET", path: "/api/sales/" + id}); r.StatusCode() != 404 {
			t.Fatalf("GET %s: got %d, want 404", id, r.StatusCode())
		}
	}
	statuses := map[int]int{}
	for i := 0; i < 5; i++ {
		r := do(h, req{method: "POST", path: "/api/sales/real/orders", token: token(t, "u"+strconv.Itoa(i))})
		statuses[r.StatusCode()]++
	}
	if got := e.reserver.calls.Load(); got != 2 {
		t.Fatalf("got %d reserve calls with a full cache, want 2 (the cap); answers %v", got, statuses)
	}
	e.s.flush(context.Background())
	if got, _ := e.primary.HGet(context.Background(), lua.SaleKey("real"), lua.FieldAccess).Int64(); got != 2 {
		t.Fatalf("got access %d on the primary, want 2", got)
	}
	if n := len(e.s.sales); n > 2 {
		t.Fatalf("got %d cached sales, want at most MaxSales (2)", n)
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

// TestMetricsAddShards checks that the sharded counters add up at a
// scrape: requests over many connections (each its own RequestCtx, so
// spread over the shards) count once each, the latency histogram's buckets
// are cumulative with the right bound, and a second gateway on the same
// registry counts into the same series.
func TestMetricsAddShards(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.UserRate = -1 })
	e.sale(t, "s1", 3, 4, false)
	h := e.s.Handler()
	for i := 0; i < 2*metricShards+3; i++ {
		do(h, req{method: "POST", path: "/api/sales/s1/orders", token: token(t, "u1")})
	}
	m2, err := newMetrics(e.reg)
	if err != nil {
		t.Fatalf("a second gateway's metrics: %v", err)
	}
	if m2.c != e.s.m.c {
		t.Fatal("a second gateway's metrics got a collector of their own, want the first one's")
	}
	var ctx fasthttp.RequestCtx
	m2.request(&ctx, routePurchase, 409, 300*time.Microsecond) // in (0.00025, 0.0005]
	m2.request(&ctx, routePurchase, 409, 2*time.Second)        // +Inf only
	m2.decision(&ctx, decNotStarted)
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	const n = 2*metricShards + 3 + 2
	var sawReq, sawDec, sawLat bool
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			switch mf.GetName() {
			case "flashgate_http_requests_total":
				if labels["route"] == "purchase" && labels["code"] == "409" {
					sawReq = true
					if got := m.GetCounter().GetValue(); got != n {
						t.Errorf("purchase 409s: got %v, want %d", got, n)
					}
				}
			case "flashgate_admission_total":
				if labels["decision"] == "not_started" {
					sawDec = true
					if got := m.GetCounter().GetValue(); got != n-1 {
						t.Errorf("not_started decisions: got %v, want %d", got, n-1)
					}
				}
			case "flashgate_http_request_seconds":
				if labels["route"] != "purchase" {
					continue
				}
				sawLat = true
				hist := m.GetHistogram()
				if got := hist.GetSampleCount(); got != n {
					t.Errorf("purchase latencies: got %d, want %d", got, n)
				}
				if got := hist.GetSampleSum(); got < 2.0003 {
					t.Errorf("purchase latency sum: got %v, want at least 2.0003", got)
				}
				for _, b := range hist.GetBucket() {
					if b.GetUpperBound() == 0.00025 && b.GetCumulativeCount() > n-2 ||
						b.GetUpperBound() == 0.0005 && b.GetCumulativeCount() < 1 ||
						b.GetUpperBound() == 1 && b.GetCumulativeCount() != n-1 {
						t.Errorf("bucket le=%v: got %d of %d", b.GetUpperBound(), b.GetCumulativeCount(), n)
					}
				}
			}
		}
	}
	if !sawReq || !sawDec || !sawLat {
		t.Fatalf("got requests %v, decisions %v, latencies %v among the series, want all", sawReq, sawDec, sawLat)
	}
}

// TestHotSlotForgetsDroppedSales: a sale dropped from the cache is not
// served from its lock-free slot afterwards, but loaded again (a stale one
// would keep answering from a state nobody refreshes).
func TestHotSlotForgetsDroppedSales(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.SaleIdle = 100 * time.Millisecond; c.StateRefresh = 10 * time.Millisecond })
	e.sale(t, "s1", 3, 4, false)
	first := e.s.lookup([]byte("s1"))
	if again := e.s.lookup([]byte("s1")); again != first {
		t.Fatal("a second lookup got another sale, want the cached one")
	}
	ctx := context.Background()
	for i := 0; i < 15; i++ {
		e.s.refreshState(ctx)
	}
	if _, ok := e.s.sales["s1"]; ok {
		t.Fatal("the idle sale was not dropped")
	}
	e.setState(t, "s1", "open")
	later := e.s.lookup([]byte("s1"))
	if later == first {
		t.Fatal("after the drop, lookup got the dropped sale from its slot, want a fresh load")
	}
	if st := later.state.Load(); st == nil || !st.start {
		t.Fatalf("fresh load: got state %+v, want the open sale", st)
	}
	if e.s.sales["s1"] != later {
		t.Fatal("the fresh load is not the cached sale")
	}
}
