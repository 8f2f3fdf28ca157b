package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
)

// fakeDraws is Config.Draws for the routes' tests: HoldEntry answers a
// pending entry with hold "pi_<user>", ReleaseEntry the entry withdrawn,
// each failing with fail while it is set.
type fakeDraws struct {
	mu       sync.Mutex
	fail     error
	holds    map[string]int // user → HoldEntry calls
	releases map[string]int // user → ReleaseEntry calls
}

func (f *fakeDraws) HoldEntry(_ context.Context, sale, user string) (flashgate.DrawEntry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.holds[user]++
	if f.fail != nil {
		return flashgate.DrawEntry{}, f.fail
	}
	return flashgate.DrawEntry{ID: "e-" + user, SaleID: sale, UserID: user, Variant: "S", Quantity: 1,
		State: flashgate.DrawPending, PaymentIntent: "pi_" + user, ClientSecret: "pi_" + user + "_secret"}, nil
}

func (f *fakeDraws) ReleaseEntry(_ context.Context, sale, user string) (flashgate.DrawEntry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.releases[user]++
	if f.fail != nil {
		return flashgate.DrawEntry{}, f.fail
	}
	return flashgate.DrawEntry{ID: "e-" + user, SaleID: sale, UserID: user, Variant: "S", Quantity: 1,
		State: flashgate.DrawWithdrawn, PaymentIntent: "pi_" + user}, nil
}

func (f *fakeDraws) setFail(err error) { f.mu.Lock(); f.fail = err; f.mu.Unlock() }

// TestDrawHoldRoutes: an entry's POST asks Config.Draws for its hold and
// answers it (or, when that fails, the pending entry without it);
// /entry/pay asks again (503 without Draws, 409 closed from the close);
// DELETE releases the hold, 503 while the release fails.
func TestDrawHoldRoutes(t *testing.T) {
	e, clock := drawEnv(t, 0)
	h := e.s.Handler()
	call := func(method, path, user, body string) (int, map[string]any, string) {
		t.Helper()
		r := do(h, req{method: method, path: "/api/sales/dr" + path, token: token(t, user), body: body})
		var m map[string]any
		_ = json.Unmarshal(r.Body(), &m)
		return r.StatusCode(), m, string(r.Body())
	}
	if code, _, raw := call("POST", "/entry/pay", "ann", ""); code != 503 {
		t.Errorf("pay without Draws: got %d %s, want 503", code, raw)
	}
	d := &fakeDraws{holds: map[string]int{}, releases: map[string]int{}}
	e.s.cfg.Draws = d
	unavailable := fmt.Errorf("provider down: %w", flashgate.ErrUnavailable)
	steps := []struct {
		name, method, path, user, body string
		fail                           error
		code                           int
		want                           map[string]any
	}{
		{"enter", "POST", "/entry", "ann", `{"variant":"S"}`, nil, 201,
			map[string]any{"state": "pending", "payment_intent": "pi_ann", "client_secret": "pi_ann_secret"}},
		{"enter, provider down", "POST", "/entry", "bob", `{"variant":"S"}`, unavailable, 201,
			map[string]any{"state": "pending", "payment_intent": nil, "client_secret": nil}},
		{"pay, provider down", "POST", "/entry/pay", "bob", "", unavailable, 503, map[string]any{"error": "unavailable"}},
		{"pay", "POST", "/entry/pay", "bob", "", nil, 200, map[string]any{"state": "pending", "client_secret": "pi_bob_secret"}},
		{"pay by GET", "GET", "/entry/pay", "bob", "", nil, 405, nil},
		{"withdraw, provider down", "DELETE", "/entry", "ann", "", unavailable, 503, map[string]any{"error": "unavailable"}},
		{"withdraw again", "DELETE", "/entry", "ann", "", nil, 200, map[string]any{"state": "withdrawn", "result": "withdrawn"}},
	}
	for _, s := range steps {
		d.setFail(s.fail)
		code, m, raw := call(s.method, s.path, s.user, s.body)
		if code != s.code {
			t.Errorf("%s: got %d %s, want %d", s.name, code, raw, s.code)
			continue
		}
		for k, v := range s.want {
			if m[k] != v {
				t.Errorf("%s: %s = %v, want %v (%s)", s.name, k, m[k], v, raw)
			}
		}
	}
	d.setFail(nil)
	if got, want := [2]int{d.holds["ann"], d.releases["ann"]}, [2]int{1, 2}; got != want {
		t.Errorf("ann's holds, releases: got %v, want %v", got, want)
	}
	clock.Add(11 * time.Minute)
	if code, m, raw := call("POST", "/entry/pay", "bob", ""); code != 409 || m["error"] != "closed" {
		t.Errorf("pay after the close: got %d %s, want 409 closed", code, raw)
	}
}
