package admin

import (
	"net/http/httptest"
	"testing"

	"github.com/flashgate/flashgate/internal/buildinfo"
)

func TestHealthzVersion(t *testing.T) {
	e := newEnv(t, sqliteDSN(t), nil)
	srv := httptest.NewServer(e.handler())
	t.Cleanup(srv.Close)
	c := client{t, srv.URL}
	v := buildinfo.Get().Version
	code, body, raw := c.do("GET", "/healthz", "", "")
	if code != 200 || body["status"] != "ok" || body["version"] != v {
		t.Errorf("GET /healthz: got %d %s, want 200 with status ok and version %q", code, raw, v)
	}
}
