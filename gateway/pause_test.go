package gateway

import (
	"context"
	"strings"
	"testing"

	"github.com/flashgate/flashgate/lua"
)

// TestFailoverPauseUnavailable: an open sale the control plane paused
// after a failover (lua.Pause: start 0, resume 2, until it is rebuilt; then
// resume 1 until its re-sync reopens it) is
// answered 503 unavailable, which buyers retry, and shown open; it used to
// be 409 not_started, which buyers take as final.
func TestFailoverPauseUnavailable(t *testing.T) {
	e := newEnv(t, nil)
	e.sale(t, "p", 10, 10, true)
	h := e.s.Handler()
	ctx := context.Background()
	if n, err := lua.Pause.Run(ctx, e.primary, lua.SaleKeys("p")).Int(); err != nil || n != 1 {
		t.Fatalf("Pause: got %d, %v; want 1", n, err)
	}
	for _, phase := range []string{"paused", "rebuilt, reopening at the next re-sync"} {
		if phase != "paused" {
			if err := e.primary.HSet(ctx, lua.SaleKey("p"), lua.FieldResume, 1).Err(); err != nil {
				t.Fatal(err)
			}
		}
		e.s.refreshState(ctx)
		if r := do(h, req{method: "POST", path: "/api/sales/p/orders", token: token(t, "u1")}); r.StatusCode() != 503 {
			t.Errorf("%s: purchase got %d %s, want 503", phase, r.StatusCode(), r.Body())
		}
		if r := do(h, req{method: "GET", path: "/api/sales/p"}); !strings.Contains(string(r.Body()), `"state":"open"`) {
			t.Errorf("%s: sale got %s, want state open", phase, r.Body())
		}
	}
	// A sale that is simply not started stays 409 not_started.
	if err := e.primary.HDel(ctx, lua.SaleKey("p"), lua.FieldResume).Err(); err != nil {
		t.Fatal(err)
	}
	e.s.refreshState(ctx)
	if r := do(h, req{method: "POST", path: "/api/sales/p/orders", token: token(t, "u1")}); r.StatusCode() != 409 || errCode(r) != "not_started" {
		t.Errorf("purchase before the start: got %d %s, want 409 not_started", r.StatusCode(), r.Body())
	}
}
