package admin

import (
	"net/http"
	"strconv"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/deadletter"
)

// limitParam reads the optional ?limit= of a dead-letter call.
func limitParam(r *http.Request) (int, error) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > deadletter.MaxDeadLetters {
		return 0, &flashgate.FieldError{Field: "limit", Reason: "must be 1-1000"}
	}
	return n, nil
}

// handleDeadLetters answers GET /admin/sales/{id}/dead-letters[?limit=n].
func (s *server) handleDeadLetters(w http.ResponseWriter, r *http.Request) {
	limit, err := limitParam(r)
	if err != nil {
		writeError(w, err)
		return
	}
	dl, err := s.svc.DeadLetters(r.Context(), r.PathValue("id"), limit)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, dl)
}

// handleReplayDeadLetters answers POST
// /admin/sales/{id}/dead-letters/replay[?limit=n] with {"replayed","left"}.
func (s *server) handleReplayDeadLetters(w http.ResponseWriter, r *http.Request) {
	limit, err := limitParam(r)
	if err != nil {
		writeError(w, err)
		return
	}
	n, left, err := s.svc.ReplayDeadLetters(r.Context(), r.PathValue("id"), limit)
	if err != nil {
		if n > 0 {
			s.log.Warn("replaying dead letters stopped part way", "sale", r.PathValue("id"), "replayed", n)
		}
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"replayed": n, "left": left})
}
