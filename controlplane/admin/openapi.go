package admin

import (
	"io/fs"
	"net/http"

	"github.com/flashgate/flashgate/static"
)

// handleOpenAPI answers GET /admin/openapi.json with the OpenAPI 3
// description of the admin routes (static/admin/openapi.json; docs/api.md in
// prose). It needs no token: the description is no secret, and the admin
// listener is internal.
func (s *server) handleOpenAPI(w http.ResponseWriter, r *http.Request) {
	b, err := fs.ReadFile(static.Admin, "admin/openapi.json")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(b)
}
