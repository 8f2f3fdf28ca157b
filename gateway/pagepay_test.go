package gateway

import (
	"errors"
	"strings"
	"testing"

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
