package gateway

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
)

// TestItemPagePayForm: with a publishable key the item page carries the
// key, loads the configured Stripe.js and answers (200 and 304, plain and
// gzip) with a Content-Security-Policy that lets scripts come only from
// the gateway and the script's origin and frames from that origin and
// Stripe's; without one the page is as before: no script, no key, no
// policy.
func TestItemPagePayForm(t *testing.T) {
	const js = "http://127.0.0.1:9/v3/"
	tests := []struct {
		name, key, js string
		wantScript    string
		wantCSP       string
	}{
		{"no key", "", "", "", ""},
		{"key, Stripe's script", "pk_test_abc", "", `<script src="https://js.stripe.com/v3/" defer>`,
			"script-src 'self' https://js.stripe.com https://*.js.stripe.com; frame-src https://js.stripe.com https://*.js.stripe.com https://hooks.stripe.com; object-src 'none'; base-uri 'self'"},
		{"key, a stand-in", "pk_test_abc", js, `<script src="` + js + `" defer>`,
			"script-src 'self' http://127.0.0.1:9; frame-src http://127.0.0.1:9 https://js.stripe.com https://*.js.stripe.com https://hooks.stripe.com; object-src 'none'; base-uri 'self'"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, func(c *Config) { c.StripePublishableKey, c.StripeJS = tc.key, tc.js })
			e.sale(t, "s1", 3, 4, true)
			h := e.s.Handler()
			plain := do(h, req{method: "GET", path: "/sales/s1"})
			gz := do(h, req{method: "GET", path: "/sales/s1", header: map[string]string{"Accept-Encoding": "gzip"}})
			nm := do(h, req{method: "GET", path: "/sales/s1", header: map[string]string{"If-None-Match": string(plain.Header.Peek("ETag"))}})
			if plain.StatusCode() != 200 || gz.StatusCode() != 200 || nm.StatusCode() != 304 {
				t.Fatalf("got %d, %d, %d, want 200, 200 (gzip), 304", plain.StatusCode(), gz.StatusCode(), nm.StatusCode())
			}
			for _, r := range [][]byte{plain.Header.Peek("Content-Security-Policy"), gz.Header.Peek("Content-Security-Policy"), nm.Header.Peek("Content-Security-Policy")} {
				if got := string(r); got != tc.wantCSP {
					t.Errorf("got Content-Security-Policy %q, want %q", got, tc.wantCSP)
				}
			}
			body := string(plain.Body())
			if tc.key == "" {
				if strings.Contains(body, "data-stripe-key") || strings.Contains(body, "stripe") {
					t.Errorf("page without a key mentions Stripe:\n%s", body)
				}
				return
			}
			if !strings.Contains(body, `data-stripe-key="`+tc.key+`"`) || !strings.Contains(body, tc.wantScript) {
				t.Errorf("page lacks the key or %s:\n%s", tc.wantScript, body)
			}
			if i, j := strings.Index(body, tc.wantScript), strings.Index(body, `src="/static/buy.js"`); i > j {
				t.Errorf("Stripe.js comes after buy.js: buy.js would not find it")
			}
		})
	}
}

// TestPayPageRefuses: New refuses a key that is not a publishable one (a
// secret key would be published in every page) and a script address that
// is not an http(s) URL.
func TestPayPageRefuses(t *testing.T) {
	for _, tc := range []struct{ key, js string }{
		{"sk_test_secret", ""},
		{"rk_live_restricted", ""},
		{"pk_test_x y", ""},
		{"pk_test_ok", "javascript:alert(1)"},
		{"pk_test_ok", "//js.stripe.com/v3/"},
		{"pk_test_ok", "https://user:pw@js.stripe.com/v3/"},
	} {
		if _, err := newPayPage(tc.key, tc.js); !errors.Is(err, flashgate.ErrBadRequest) {
			t.Errorf("newPayPage(%q, %q): got %v, want ErrBadRequest", tc.key, tc.js, err)
		}
	}
	if p, err := newPayPage("", "javascript:alert(1)"); err != nil || p.csp != nil {
		t.Errorf("no key: got %+v, %v, want the zero payPage (the address is not used)", p, err)
	}
}

// TestItemPageDrawView: a draw sale's page carries the draw's view — the
// window, the sizes as radio buttons, the quantity up to per_user, the
// price its hold is for, and draw.js in place of the buy button and the
// fair queue — from the catalogue only, so it stays one cached answer;
// a sale that is no draw has none of it.
func TestItemPageDrawView(t *testing.T) {
	e, _ := drawEnv(t, 0)
	e.sale(t, "plain", 3, 0, true)
	h := e.s.Handler()
	m := e.s.lookup([]byte("dr")).meta.Load()
	open, closeAt := m.sale.EntriesOpenAt.UTC().Format(time.RFC3339), m.sale.EntriesCloseAt.UTC().Format(time.RFC3339)
	tests := []struct {
		path       string
		want, gone []string
	}{
		{"/sales/dr", []string{
			`data-draw data-entries-open="` + open + `" data-entries-close="` + closeAt + `" data-per-user="2" data-price-cents="100"`,
			`<time id="entries-close" datetime="` + closeAt + `">`,
			`<input type="radio" name="draw-variant" value="S" data-name="Small"> Small</label>`,
			`<input type="radio" name="draw-variant" value="M" data-name="Medium"> Medium</label>`,
			`<input type="number" id="draw-qty" min="1" max="2"`,
			`<button id="draw-enter" type="button" disabled>Enter the draw</button>`,
			`<script src="/static/draw.js" defer></script>`,
		}, []string{`id="buy"`, `/static/queue.js`, `id="remaining"`}},
		{"/sales/plain", []string{`id="buy"`, `/static/queue.js`}, []string{"data-draw", "draw.js", "draw-enter"}},
	}
	for _, tc := range tests {
		r := do(h, req{method: "GET", path: tc.path})
		body := string(r.Body())
		if r.StatusCode() != 200 {
			t.Fatalf("GET %s: got %d, want 200", tc.path, r.StatusCode())
		}
		for _, w := range tc.want {
			if !strings.Contains(body, w) {
				t.Errorf("GET %s: got a page without %s, want it:\n%s", tc.path, w, body)
			}
		}
		for _, g := range tc.gone {
			if strings.Contains(body, g) {
				t.Errorf("GET %s: got a page with %s, want none", tc.path, g)
			}
		}
	}
	if r := do(h, req{method: "GET", path: "/static/draw.js"}); r.StatusCode() != 200 || string(r.Header.ContentType()) != "text/javascript; charset=utf-8" {
		t.Errorf("GET /static/draw.js: got %d %s, want 200 text/javascript", r.StatusCode(), r.Header.ContentType())
	}
}
