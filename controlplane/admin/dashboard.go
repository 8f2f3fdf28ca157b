package admin

import (
	"io/fs"
	"net/http"
	"strings"

	"github.com/flashgate/flashgate/static"
)

// dashPattern is the catch-all route of the dashboard's files.
const dashPattern = "GET /admin/"

// dashboard serves the dashboard's files under /admin/; any other path
// there is answered by mux as a request no route takes.
func (s *server) dashboard(mux *routeMux) http.HandlerFunc {
	files := http.StripPrefix("/admin/", http.FileServerFS(dashFS))
	return func(w http.ResponseWriter, r *http.Request) {
		if !dashFile(r.URL.Path) {
			// Not a file: a route of another method (405) or nothing (404).
			mux.noRoute(w, r)
			return
		}
		h := w.Header()
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'")
		files.ServeHTTP(w, r)
	}
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
