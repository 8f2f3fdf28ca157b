package admin

import (
	"net/http"
	"slices"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/noroute"
)

// routeMux is the control plane's http.ServeMux: it remembers every pattern
// registered (so tests can check the OpenAPI description against them) and
// wraps every route that changes something in the audit, outside the token
// check, so refused attempts are recorded too.
type routeMux struct {
	*http.ServeMux
	audit    *auditLog
	clock    flashgate.Clock
	patterns []string
}

// Handle registers h for pattern, audited when pattern changes something.
func (m *routeMux) Handle(pattern string, h http.Handler) {
	m.patterns = append(m.patterns, pattern)
	if action, ok := auditAction(pattern); ok {
		h = m.audited(action, pattern, h)
	}
	m.ServeMux.Handle(pattern, h)
}

// HandleFunc registers f for pattern like Handle.
func (m *routeMux) HandleFunc(pattern string, f func(http.ResponseWriter, *http.Request)) {
	m.Handle(pattern, http.HandlerFunc(f))
}

// Patterns returns the registered patterns, in order.
func (m *routeMux) Patterns() []string { return append([]string(nil), m.patterns...) }

// ServeHTTP serves the routes and answers every request none takes as the
// contract answers errors: JSON, 405 method_not_allowed with Allow when the
// path has routes for other methods, else 404 not_found (never the mux's
// plain text). A path not in its canonical form (noroute.Canonical) is
// 404 not_found, not the mux's redirect to the cleaned path.
func (m *routeMux) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !noroute.Canonical(r.URL.Path) {
		noroute.Error(w, flashgate.ErrNotFound)
		return
	}
	if _, p := m.ServeMux.Handler(r); p == "" {
		m.noRoute(w, r)
		return
	}
	m.ServeMux.ServeHTTP(w, r)
}

// noRoute answers a request no route takes (the dashboard's catch-all
// counts only for its files): 405 with Allow, or 404.
func (m *routeMux) noRoute(w http.ResponseWriter, r *http.Request) {
	allow := noroute.Allowed(m.ServeMux, r, dashPattern)
	if dashFile(r.URL.Path) && !slices.Contains(allow, http.MethodGet) {
		allow = append([]string{http.MethodGet, http.MethodHead}, allow...)
	}
	noroute.Answer(w, allow)
}
