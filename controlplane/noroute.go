package controlplane

import (
	"io/fs"
	"net/http"
	"slices"
	"strings"

	"github.com/flashgate/flashgate/internal/noroute"
	"github.com/flashgate/flashgate/static"
)

// dashPattern is the catch-all route of the dashboard's files.
const dashPattern = "GET /admin/"

// ServeHTTP serves the routes and answers every request none takes as the
// contract answers errors: JSON, 405 method_not_allowed with Allow when the
// path has routes for other methods, else 404 not_found (never the mux's
// plain text).
func (m *routeMux) ServeHTTP(w http.ResponseWriter, r *http.Request) {
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

// dashFS holds the dashboard's files at its root.
var dashFS = func() fs.FS {
	if sub, err := fs.Sub(static.Admin, "admin"); err == nil {
		return sub
	}
	return static.Admin
}()

// dashFile reports whether path (under /admin/) names one of the
// dashboard's files; "/admin/" itself is its index.html.
func dashFile(path string) bool {
	name, ok := strings.CutPrefix(path, "/admin/")
	if !ok {
		return false
	}
	if name == "" {
		return true
	}
	st, err := fs.Stat(dashFS, name)
	return err == nil && !st.IsDir()
}
