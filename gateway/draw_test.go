package gateway

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/testclock"
	"github.com/flashgate/flashgate/lua"
)

// drawEnv is a gateway with draw sale "dr" (sizes S and M, per_user 2,
// proof of work of difficulty maxnum) whose window is open for ten minutes
// from the clock's now (within the test tokens' hour).
func drawEnv(t *testing.T, maxnum int64) (*env, *testclock.Clock) {
	t.Helper()
	clock := testclock.New(time.Now().Truncate(time.Millisecond))
	e := newEnv(t, func(c *Config) {
		c.UserRate = -1
		c.Clock = clock
	})
	ctx := context.Background()
	open, closeAt := clock.Now(), clock.Now().Add(10*time.Minute)
	if err := lua.Prepare.Run(ctx, e.primary, lua.SaleKeys("dr"), 5, 8, 2, 100, "", lua.DrawWindowArg(open, closeAt), "S:3,M:2").Err(); err != nil {
		t.Fatal(err)
	}
	e.catalog.put(flashgate.Sale{ID: "dr", Name: "Drop", PriceCents: 100, Total: 5, PerUser: 2, Queue: flashgate.QueueDraw,
		EntriesOpenAt: &open, EntriesCloseAt: &closeAt, ChallengeMaxNumber: maxnum,
		Variants: []flashgate.Variant{{ID: "S", Name: "Small", Total: 3}, {ID: "M", Name: "Medium", Total: 2}}})
	e.s.refreshState(ctx)
	e.s.lookup([]byte("dr"))
	e.s.refreshState(ctx)
	return e, clock
}

// TestDrawEntryRoutes: a buyer enters a draw once across sizes, reads and
// withdraws the entry until the close; bad wishes, other users and other
// sales are answered from the error table, and a purchase is refused.
func TestDrawEntryRoutes(t *testing.T) {
	e, clock := drawEnv(t, 0)
	h := e.s.Handler()
	call := func(method, user, body string) (int, map[string]any, string) {
		t.Helper()
		r := do(h, req{method: method, path: "/api/sales/dr/entry", token: token(t, user), body: body})
		var m map[string]any
		_ = json.Unmarshal(r.Body(), &m)
		return r.StatusCode(), m, string(r.Body())
	}
	steps := []struct {
		name, method, user, body string
		code                     int
		want                     map[string]any // fields of the answer
	}{
		{"no entry", "GET", "ann", "", 404, map[string]any{"error": "not_found"}},
		{"no size", "POST", "ann", `{}`, 400, map[string]any{"error": "bad_request"}},
		{"unknown size", "POST", "ann", `{"variant":"XL"}`, 400, map[string]any{"error": "bad_request"}},
		{"over per_user", "POST", "ann", `{"variant":"S","quantity":3}`, 400, map[string]any{"error": "bad_request"}},
		{"unknown field", "POST", "ann", `{"variant":"S","size":"S"}`, 400, map[string]any{"error": "bad_request"}},
		{"enter", "POST", "ann", `{"variant":"S","quantity":2}`, 201, map[string]any{"state": "pending", "result": "pending", "variant": "S", "quantity": 2.0}},
		{"enter again, another size", "POST", "ann", `{"variant":"M"}`, 200, map[string]any{"state": "pending", "variant": "S", "quantity": 2.0}},
		{"read", "GET", "ann", "", 200, map[string]any{"state": "pending", "variant": "S"}},
		{"bob withdraws nothing", "DELETE", "bob", "", 404, map[string]any{"error": "not_found"}},
		{"withdraw", "DELETE", "ann", "", 200, map[string]any{"state": "withdrawn", "result": "withdrawn"}},
		{"enter anew", "POST", "ann", `{"variant":"M"}`, 201, map[string]any{"state": "pending", "variant": "M", "quantity": 1.0}},
	}
	for _, s := range steps {
		code, m, raw := call(s.method, s.user, s.body)
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
	if r := do(h, req{method: "POST", path: "/api/sales/dr/entry", body: `{"variant":"S"}`}); r.StatusCode() != 401 {
		t.Errorf("no token: got %d, want 401", r.StatusCode())
	}
	if r := do(h, req{method: "PUT", path: "/api/sales/dr/entry", token: token(t, "ann")}); r.StatusCode() != 405 || string(r.Header.Peek("Allow")) != "GET, HEAD, POST, DELETE" {
		t.Errorf("PUT: got %d, Allow %q", r.StatusCode(), r.Header.Peek("Allow"))
	}
	e.sale(t, "fc", 5, 8, true)
	if r := do(h, req{method: "POST", path: "/api/sales/fc/entry", token: token(t, "ann"), body: `{}`}); r.StatusCode() != 404 {
		t.Errorf("entry in a first-come sale: got %d %s, want 404", r.StatusCode(), r.Body())
	}
	// A purchase is refused even with the sale opened.
	e.setState(t, "dr", "open")
	e.s.refreshState(context.Background())
	if r := do(h, req{method: "POST", path: "/api/sales/dr/orders", token: token(t, "cat"), body: `{"quantity":1,"variant":"S"}`}); r.StatusCode() != 409 || errCode(r) != "not_started" {
		t.Errorf("purchase of a draw: got %d %s, want 409 not_started", r.StatusCode(), r.Body())
	}
	// After the close: no entry, no withdrawal; the entry reads as it was.
	clock.Set(clock.Now().Add(10 * time.Minute))
	if code, _, raw := call("POST", "cat", `{"variant":"S"}`); code != 409 || errCodeOf(raw) != "closed" {
		t.Errorf("entry after the close: got %d %s, want 409 closed", code, raw)
	}
	if code, _, raw := call("DELETE", "ann", ""); code != 409 || errCodeOf(raw) != "closed" {
		t.Errorf("withdrawal after the close: got %d %s, want 409 closed", code, raw)
	}
	if code, m, raw := call("GET", "ann", ""); code != 200 || m["state"] != "pending" {
		t.Errorf("read after the close: got %d %s", code, raw)
	}
}

// TestDrawEntryProofOfWork: a draw with a difficulty takes an entry only
// with a solved challenge of its own, each solution once.
func TestDrawEntryProofOfWork(t *testing.T) {
	e, _ := drawEnv(t, 50)
	h := e.s.Handler()
	if r := do(h, req{method: "POST", path: "/api/sales/dr/entry", token: token(t, "ann"), body: `{"variant":"S"}`}); r.StatusCode() != 400 {
		t.Errorf("no solution: got %d %s, want 400", r.StatusCode(), r.Body())
	}
	sol := solutionFor(t, e, "dr", nil)
	body := `{"variant":"S",` + sol[1:]
	if r := do(h, req{method: "POST", path: "/api/sales/dr/entry", token: token(t, "ann"), body: body}); r.StatusCode() != 201 {
		t.Errorf("solved: got %d %s, want 201", r.StatusCode(), r.Body())
	}
	if r := do(h, req{method: "POST", path: "/api/sales/dr/entry", token: token(t, "bob"), body: body}); r.StatusCode() != 400 {
		t.Errorf("the same solution again: got %d %s, want 400", r.StatusCode(), r.Body())
	}
}

// errCodeOf reads the error code of an error answer's body.
func errCodeOf(body string) string {
	var m struct{ Error string }
	_ = json.Unmarshal([]byte(body), &m)
	return m.Error
}

// TestDrawResult: an entry's result is final only once its hold is: won
// once captured, lost once released; while the close settles it (won,
// lost) it is pending, as before the draw.
func TestDrawResult(t *testing.T) {
	for _, tc := range []struct {
		st   flashgate.DrawEntryState
		want string
	}{
		{flashgate.DrawPending, "pending"},
		{flashgate.DrawEntered, "pending"},
		{flashgate.DrawWon, "pending"},
		{flashgate.DrawLost, "pending"},
		{flashgate.DrawCaptured, "won"},
		{flashgate.DrawReleased, "lost"},
		{flashgate.DrawWithdrawn, "withdrawn"},
	} {
		if got := drawResult(tc.st); got != tc.want {
			t.Errorf("drawResult(%s): got %q, want %q", tc.st, got, tc.want)
		}
	}
}
