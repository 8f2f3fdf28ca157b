package admin

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/flashgate/flashgate/controlplane"
	"github.com/flashgate/flashgate/lua"
)

// captureHandler is a slog.Handler that keeps every record.
type captureHandler struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *captureHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *captureHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.records = append(h.records, r.Clone())
	h.mu.Unlock()
	return nil
}
func (h *captureHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *captureHandler) WithGroup(string) slog.Handler      { return h }

// lines returns the records' attributes, one map per record.
func (h *captureHandler) lines() []map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []map[string]string
	for _, r := range h.records {
		m := map[string]string{"msg": r.Message}
		r.Attrs(func(a slog.Attr) bool {
			m[a.Key] = a.Value.String()
			return true
		})
		out = append(out, m)
	}
	return out
}

func TestAuditAdminActions(t *testing.T) {
	audit := &captureHandler{}
	e := newEnv(t, sqliteDSN(t), func(c *controlplane.Config) { c.AuditLogger = slog.New(audit) })
	srv := httptest.NewServer(e.handler())
	t.Cleanup(srv.Close)
	c := client{t, srv.URL}

	steps := []struct{ method, path, token, body string }{
		{"POST", "/admin/sales", testToken, `{"id":"a1","name":"A","price_cents":1,"total":3}`},
		{"POST", "/admin/sales/a1/start", testToken, ""},
		{"POST", "/admin/sales/a1/stop", "wrong", ""},
		{"POST", "/admin/sales/a1/resync", testToken, ""},
		{"GET", "/admin/sales/a1", testToken, ""}, // reads are not audited
	}
	for _, s := range steps {
		c.do(s.method, s.path, s.token, s.body)
	}
	rc, oid := e.reserve("a1", "u1")
	if rc != lua.ReserveOK {
		t.Fatalf("reserve: code %d", rc)
	}
	e.persist("a1")
	if code, _, raw := c.do("POST", "/admin/orders/"+oid+"/refund", testToken, ""); code != 200 {
		t.Fatalf("refund: got %d %s, want 200", code, raw)
	}

	type want struct{ action, sale, order, result string }
	wants := []want{
		{"create_sale", "a1", "", "ok"},
		{"start_sale", "a1", "", "ok"},
		{"stop_sale", "a1", "", "unauthorized"},
		{"resync_sale", "a1", "", "ok"},
		{"refund_order", "", oid, "ok"},
	}
	lines := audit.lines()
	if len(lines) != len(wants) {
		t.Fatalf("got %d audit lines %v, want %d", len(lines), lines, len(wants))
	}
	naming := 0
	for i, w := range wants {
		l := lines[i]
		got := want{l["action"], l["sale"], l["order"], l["result"]}
		if got != w || l["msg"] != "admin action" || l["remote"] == "" {
			t.Errorf("audit line %d: got %v, want %+v with a remote address", i, l, w)
		}
		if l["order"] == oid {
			naming++
		}
	}
	if naming != 1 {
		t.Errorf("got %d audit lines naming order %s, want exactly 1", naming, oid)
	}

	// The same actions, newest first, on GET /admin/audit.
	code, _, raw := c.do("GET", "/admin/audit", testToken, "")
	var list []AuditEntry
	if err := json.Unmarshal([]byte(raw), &list); code != 200 || err != nil || len(list) != len(wants) {
		t.Fatalf("GET /admin/audit: got %d %s (%v), want %d entries", code, raw, err, len(wants))
	}
	if list[0].Action != "refund_order" || list[0].Order != oid || list[len(list)-1].Action != "create_sale" || !list[0].Time.Equal(t0) {
		t.Errorf("GET /admin/audit: got %+v, want the refund first and the create last, at the test clock's %v", list, t0)
	}
	if code, _, _ := c.do("GET", "/admin/audit", "", ""); code != 401 {
		t.Errorf("GET /admin/audit without a token: got %d, want 401", code)
	}
}

func TestAuditRingBounded(t *testing.T) {
	a := newAuditLog(slog.New(&captureHandler{}), nil)
	for i := range auditSize + 5 {
		a.record(context.Background(), AuditEntry{Action: "x", Status: i})
	}
	got := a.recent()
	if len(got) != auditSize || got[0].Status != auditSize+4 || got[auditSize-1].Status != 5 {
		t.Errorf("got %d entries from %d to %d, want %d from %d to 5", len(got), got[0].Status, got[len(got)-1].Status, auditSize, auditSize+4)
	}
}
