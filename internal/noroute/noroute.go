// Package noroute answers the requests a net/http ServeMux has no route for
// as flashgate answers every error: JSON from the one error table
// (flashgate.ErrorStatus), never the mux's plain text.
package noroute

import (
	"encoding/json"
	"net/http"
	"path"
	"strings"

	"github.com/flashgate/flashgate"
)

// methods are the methods probed for Allow, in the order Allow lists them.
var methods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// Allowed returns the methods mux has a route for at r's path, leaving out
// the routes whose pattern is skip (a catch-all that found nothing there).
func Allowed(mux *http.ServeMux, r *http.Request, skip string) []string {
	var out []string
	for _, m := range methods {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, p := mux.Handler(probe); p != "" && p != skip {
			out = append(out, m)
		}
	}
	return out
}

// Answer answers a request no route takes: 405 method_not_allowed with
// Allow when its path has routes for the methods allow, else 404 not_found.
func Answer(w http.ResponseWriter, allow []string) {
	if len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		Error(w, flashgate.ErrMethodNotAllowed)
		return
	}
	Error(w, flashgate.ErrNotFound)
}

// Error writes err's status and {"error":"<code>"} from the error table.
func Error(w http.ResponseWriter, err error) {
	status, code := flashgate.ErrorStatus(err)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": code})
}

// Canonical reports whether p is a path in its canonical form: rooted,
// with no empty, "." or ".." segment (a trailing slash is kept). A
// ServeMux redirects any other path to its cleaned form, with an HTML
// body and before any route's own checks (the admin token's among them);
// flashgate serves no such path, so it is a 404 like any unknown path.
func Canonical(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c == p
}

// Handler serves mux and answers what none of its routes takes with
// Answer, and a path not in its canonical form 404 not_found.
func Handler(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !Canonical(r.URL.Path) {
			Error(w, flashgate.ErrNotFound)
			return
		}
		if _, p := mux.Handler(r); p == "" {
			Answer(w, Allowed(mux, r, ""))
			return
		}
		mux.ServeHTTP(w, r)
	})
}
