package controlplane

import (
	"io/fs"
	"net/http"
	"strings"

	"github.com/flashgate/flashgate/internal/noroute"
)

// dashPattern is the catch-all route of the dashboard's files.
const dashPattern = "GET /admin/"

// ServeHTTP serves the routes and answers every request none takes as the
// contract answers errors: JSON, 405 method_not_allowed with Allow when the
// path has routes for other methods, else 404 not_found (never the mux's
// plain text).
func (m *routeMux) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, p := m.ServeMux.Handler(r); p == "" {
		noroute.Answer(w, r, m.ServeMux, "")
		return
	}
	m.ServeMux.ServeHTTP(w, r)
}

// dashFile reports whether path (under /admin/) names one of the
// dashboard's files; "/admin/" itself is its index.html.
func dashFile(dash fs.FS, path string) bool {
	name := strings.TrimPrefix(path, "/admin/")
	if name == "" {
		return true
	}
	st, err := fs.Stat(dash, name)
	return err == nil && !st.IsDir()
}
