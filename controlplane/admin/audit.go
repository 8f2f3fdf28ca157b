package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"
)

// auditSize is how many admin actions GET /admin/audit keeps.
const auditSize = 200

// auditBodyLimit is how much of an answer the audit reads to find the sale
// id of a created sale or the error code of a failure.
const auditBodyLimit = 4 << 10

// AuditEntry is one admin action as GET /admin/audit lists it and the audit
// logger writes it.
type AuditEntry struct {
	// Time is when the action was answered.
	Time time.Time `json:"time"`
	// Action names it: create_sale, start_sale, stop_sale, resync_sale,
	// refund_order, or the method and pattern of an admin route without a
	// name of its own.
	Action string `json:"action"`
	// Sale and Order are the ids the action was about, when it has them.
	Sale  string `json:"sale,omitempty"`
	Order string `json:"order,omitempty"`
	// Remote is the client's address as the listener saw it.
	Remote string `json:"remote"`
	// Status is the HTTP status of the answer.
	Status int `json:"status"`
	// Result is "ok", or the error code the client was given.
	Result string `json:"result"`
}

// auditActions names the admin routes that change something. Every other
// POST, PUT, PATCH or DELETE route is audited under its pattern.
var auditActions = map[string]string{
	"POST /admin/sales":              "create_sale",
	"POST /admin/sales/{id}/start":   "start_sale",
	"POST /admin/sales/{id}/stop":    "stop_sale",
	"POST /admin/sales/{id}/resync":  "resync_sale",
	"POST /admin/orders/{id}/refund": "refund_order",
	// The order sink's dead-letter route, once merged.
	"POST /admin/sales/{id}/dead-letters/replay": "replay_dead_letters",
}

// auditLog writes each admin action as one structured line on its own
// logger and keeps the last auditSize in memory. It is safe for concurrent
// use.
type auditLog struct {
	log  *slog.Logger
	mu   sync.Mutex
	ring [auditSize]AuditEntry
	next int // where the next entry goes
	n    int // entries held, at most auditSize
}

// newAuditLog returns an audit log writing to l, or, when l is nil, to base
// with the attribute log=audit.
func newAuditLog(l, base *slog.Logger) *auditLog {
	if l == nil {
		l = base.With("log", "audit")
	}
	return &auditLog{log: l}
}

// record logs e and keeps it.
func (a *auditLog) record(ctx context.Context, e AuditEntry) {
	a.log.LogAttrs(ctx, slog.LevelInfo, "admin action",
		slog.String("action", e.Action), slog.String("sale", e.Sale), slog.String("order", e.Order),
		slog.String("remote", e.Remote), slog.Int("status", e.Status), slog.String("result", e.Result))
	a.mu.Lock()
	a.ring[a.next] = e
	a.next = (a.next + 1) % auditSize
	a.n = min(a.n+1, auditSize)
	a.mu.Unlock()
}

// recent returns the entries held, newest first.
func (a *auditLog) recent() []AuditEntry {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]AuditEntry, 0, a.n)
	for i := 1; i <= a.n; i++ {
		out = append(out, a.ring[(a.next-i+auditSize)%auditSize])
	}
	return out
}

// auditAction names the action of an admin route that changes something.
func auditAction(pattern string) (string, bool) {
	method, path, _ := strings.Cut(pattern, " ")
	if !strings.HasPrefix(path, "/admin/") {
		return "", false
	}
	switch method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
	default:
		return "", false
	}
	if a, ok := auditActions[pattern]; ok {
		return a, true
	}
	return pattern, true
}

// audited records each request to h in the audit.
func (m *routeMux) audited(action, pattern string, h http.Handler) http.Handler {
	isOrder := strings.Contains(pattern, "/admin/orders/")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &auditRecorder{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(rec, r)
		e := AuditEntry{Time: m.clock.Now().UTC(), Action: action, Remote: r.RemoteAddr, Status: rec.status, Result: "ok"}
		var body struct {
			ID    string `json:"id"`
			Error string `json:"error"`
		}
		_ = json.Unmarshal(rec.body.Bytes(), &body)
		switch id := r.PathValue("id"); {
		case isOrder:
			e.Order = id
		case id != "":
			e.Sale = id
		case rec.status < 300:
			e.Sale = body.ID // a created sale
		}
		if rec.status >= 400 {
			e.Result = body.Error
			if e.Result == "" {
				e.Result = strings.ToLower(strings.ReplaceAll(http.StatusText(rec.status), " ", "_"))
			}
		}
		m.audit.record(r.Context(), e)
	})
}

// auditRecorder passes an answer through and keeps its status and the
// start of its body.
type auditRecorder struct {
	http.ResponseWriter
	status int
	wrote  bool
	body   bytes.Buffer
}

func (r *auditRecorder) WriteHeader(code int) {
	if !r.wrote {
		r.status, r.wrote = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *auditRecorder) Write(b []byte) (int, error) {
	r.wrote = true
	if room := auditBodyLimit - r.body.Len(); room > 0 {
		r.body.Write(b[:min(len(b), room)])
	}
	return r.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (r *auditRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// handleAudit answers GET /admin/audit: the recent admin actions, newest
// first.
func (s *server) handleAudit(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.audit.recent())
}
