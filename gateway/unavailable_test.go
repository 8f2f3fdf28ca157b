package gateway

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/testclock"
)

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) lines(substr string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, l := range strings.Split(b.b.String(), "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return out
}

// TestUnavailableLogged: a purchase answered 503 because the inventory was
// unreachable is logged (it used to leave no trace in the gateway's log),
// once per unavailableLogEvery with the count of those it stood for.
func TestUnavailableLogged(t *testing.T) {
	var logs syncBuffer
	clock := testclock.New(time.Now())
	fr := &fakeReserver{err: flashgate.ErrUnavailable}
	e := newEnv(t, func(c *Config) {
		c.Reserver = fr
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		c.Clock = clock
	})
	e.sale(t, "un", 100, 100, true)
	h := e.s.Handler()
	buy := func(user string) {
		t.Helper()
		if r := do(h, req{method: "POST", path: "/api/sales/un/orders", token: token(t, user)}); r.StatusCode() != 503 {
			t.Fatalf("purchase with the inventory down: got %d %s, want 503", r.StatusCode(), r.Body())
		}
	}
	const msg = "purchases answered 503"
	for _, u := range []string{"a", "b", "c"} {
		buy(u)
	}
	if got := logs.lines(msg); len(got) != 1 || !strings.Contains(got[0], "purchases=1 ") {
		t.Fatalf("after 3 failed purchases: got %q, want one warning for 1 purchase", got)
	}
	clock.Add(unavailableLogEvery)
	buy("d")
	if got := logs.lines(msg); len(got) != 2 || !strings.Contains(got[1], "purchases=3 ") {
		t.Fatalf("after 4 failed purchases, the interval passed: got %q, want a second warning for 3", got)
	}
}
