package gateway

import (
	"testing"

	"github.com/flashgate/flashgate/internal/buildinfo"
)

func TestHealthzVersionHeader(t *testing.T) {
	e := newEnv(t, nil)
	r := do(e.s.Handler(), req{method: "GET", path: "/healthz"})
	if got, want := string(r.Header.Peek(buildinfo.Header)), buildinfo.Get().Version; r.StatusCode() != 200 || got != want {
		t.Errorf("GET /healthz: got %d with %s %q, want 200 with %q", r.StatusCode(), buildinfo.Header, got, want)
	}
}
