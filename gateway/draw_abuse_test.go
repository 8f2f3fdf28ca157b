package gateway

import (
	"encoding/json"
	"testing"
)

// TestDrawWithdrawLimit: one buyer's flood of DELETE /api/sales/{id}/entry
// is held to the order routes' per-buyer limit (429 rate_limited with
// Retry-After once the burst is spent), so that it cannot make the
// gateway call the payment provider (a release of the hold per DELETE)
// without bound; another buyer is not held back.
func TestDrawWithdrawLimit(t *testing.T) {
	e, _ := drawEnv(t, 0)
	h := e.s.Handler()
	d := &fakeDraws{holds: map[string]int{}, releases: map[string]int{}}
	e.s.cfg.Draws = d
	ann, bob := token(t, "ann"), token(t, "bob")
	for _, tok := range []string{ann, bob} {
		if r := do(h, req{method: "POST", path: "/api/sales/dr/entry", token: tok, body: `{"variant":"S"}`}); r.StatusCode() != 201 {
			t.Fatalf("enter: got %d %s, want 201", r.StatusCode(), r.Body())
		}
	}
	const flood = 30
	answered, limited := 0, 0
	for range flood {
		r := do(h, req{method: "DELETE", path: "/api/sales/dr/entry", token: ann})
		switch r.StatusCode() {
		case 200:
			answered++
		case 429:
			limited++
			if got := string(r.Header.Peek("Retry-After")); got == "" {
				t.Errorf("429 without Retry-After: %s", r.Body())
			}
		default:
			t.Fatalf("DELETE: got %d %s", r.StatusCode(), r.Body())
		}
	}
	if answered != DefaultOrderBurst || limited != flood-DefaultOrderBurst {
		t.Errorf("ann's flood of %d DELETEs: got %d answered, %d limited; want %d, %d", flood, answered, limited,
			DefaultOrderBurst, flood-DefaultOrderBurst)
	}
	d.mu.Lock()
	releases := d.releases["ann"]
	d.mu.Unlock()
	if releases > DefaultOrderBurst {
		t.Errorf("releases asked of the provider side for ann: got %d, want at most %d", releases, DefaultOrderBurst)
	}
	if r := do(h, req{method: "DELETE", path: "/api/sales/dr/entry", token: bob}); r.StatusCode() != 200 {
		t.Errorf("bob's withdrawal while ann floods: got %d %s, want 200", r.StatusCode(), r.Body())
	}
}

// TestDrawEntryBodyStrict: the entry's body is read as strictly as a
// purchase's (docs/api.md, "Public API"): a member given twice or named in
// another case, anything after the object, or a body that is not an
// object is 400 bad_request and makes no entry.
func TestDrawEntryBodyStrict(t *testing.T) {
	e, _ := drawEnv(t, 0)
	h := e.s.Handler()
	tests := []struct{ name, body string }{
		{"member twice", `{"variant":"XL","variant":"S"}`},
		{"quantity twice", `{"variant":"S","quantity":2,"quantity":1}`},
		{"member in another case", `{"Variant":"S"}`},
		{"another value after the object", `{"variant":"S"} {"variant":"M"}`},
		{"garbage after the object", `{"variant":"S"}garbage`},
		{"null", `null`},
		{"array", `[{"variant":"S"}]`},
	}
	for i, tc := range tests {
		r := do(h, req{method: "POST", path: "/api/sales/dr/entry", token: token(t, "strict"+string(rune('a'+i))), body: tc.body})
		var m map[string]any
		_ = json.Unmarshal(r.Body(), &m)
		if r.StatusCode() != 400 || m["error"] != "bad_request" {
			t.Errorf("%s: got %d %s, want 400 bad_request", tc.name, r.StatusCode(), r.Body())
		}
	}
	// The strict reading still takes every well-formed body.
	for i, body := range []string{``, ` {"variant":"S"} `, `{"variant":"M","quantity":2,"payload":""}`, `{"quantity":null,"variant":"S"}`} {
		r := do(h, req{method: "POST", path: "/api/sales/dr/entry", token: token(t, "fine"+string(rune('a'+i))), body: body})
		want := 201
		if body == `` {
			want = 400 // a sale of sizes needs one
		}
		if r.StatusCode() != want {
			t.Errorf("body %q: got %d %s, want %d", body, r.StatusCode(), r.Body(), want)
		}
	}
}

// TestDrawStateLimit: one buyer's flood of GET /api/sales/{id}/entry, each
// a script call on the sale's primary, is held to the order routes'
// per-buyer limit as an order's GET is; another buyer is not held back.
func TestDrawStateLimit(t *testing.T) {
	e, _ := drawEnv(t, 0)
	h := e.s.Handler()
	ann, bob := token(t, "ann"), token(t, "bob")
	for _, tok := range []string{ann, bob} {
		if r := do(h, req{method: "POST", path: "/api/sales/dr/entry", token: tok, body: `{"variant":"S"}`}); r.StatusCode() != 201 {
			t.Fatalf("enter: got %d %s, want 201", r.StatusCode(), r.Body())
		}
	}
	const flood = 30
	answered, limited := 0, 0
	for i := range flood {
		method := "GET"
		if i%2 == 1 {
			method = "HEAD"
		}
		switch r := do(h, req{method: method, path: "/api/sales/dr/entry", token: ann}); r.StatusCode() {
		case 200:
			answered++
		case 429:
			limited++
		default:
			t.Fatalf("%s: got %d %s", method, r.StatusCode(), r.Body())
		}
	}
	if answered != DefaultOrderBurst || limited != flood-DefaultOrderBurst {
		t.Errorf("ann's flood of %d reads: got %d answered, %d limited; want %d, %d", flood, answered, limited,
			DefaultOrderBurst, flood-DefaultOrderBurst)
	}
	if r := do(h, req{method: "GET", path: "/api/sales/dr/entry", token: bob}); r.StatusCode() != 200 {
		t.Errorf("bob's read while ann floods: got %d %s, want 200", r.StatusCode(), r.Body())
	}
}
