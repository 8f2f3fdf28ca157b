// Package noroute answers the requests a net/http ServeMux has no route for
// as flashgate answers every error: JSON from the one error table
// (flashgate.ErrorStatus), never the mux's plain text.
package noroute

import (
	"encoding/json"
	"net/http"
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

// Handler serves mux and answers what none of its routes takes with
// Answer.
func Handler(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, p := mux.Handler(r); p == "" {
			Answer(w, Allowed(mux, r, ""))
			return
		}
		mux.ServeHTTP(w, r)
	})
}
