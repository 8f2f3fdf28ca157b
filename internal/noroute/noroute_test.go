package noroute_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/flashgate/flashgate/internal/noroute"
)

func TestCanonical(t *testing.T) {
	cases := []struct {
		path string
		want bool
	}{
		{"/", true},
		{"/admin/sales", true},
		{"/admin/", true},
		{"/admin/sales/x/", true},
		{"", false},
		{"admin/sales", false},
		{"//", false},
		{"/admin//sales", false},
		{"/admin/./sales", false},
		{"/admin/sales/../sales", false},
		{"/admin/sales/.", false},
		{"/admin/sales//", false},
		{"//admin/sales", false},
	}
	for _, c := range cases {
		if got := noroute.Canonical(c.path); got != c.want {
			t.Errorf("Canonical(%q): got %v, want %v", c.path, got, c.want)
		}
	}
}

// TestHandlerNonCanonical: a path not in its canonical form is a JSON 404,
// not the mux's redirect to the cleaned path (which has the route).
func TestHandlerNonCanonical(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	h := noroute.Handler(mux)
	for _, p := range []string{"/metrics", "//metrics", "/./metrics", "/x/../metrics"} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "http://h"+p, nil))
		want, body := 404, `{"error":"not_found"}`+"\n"
		if p == "/metrics" {
			want, body = 200, "ok"
		}
		if w.Code != want || w.Body.String() != body {
			t.Errorf("GET %s: got %d %q, want %d %q", p, w.Code, w.Body, want, body)
		}
	}
}
