package systemtest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flashgate/flashgate/controlplane"
	"github.com/flashgate/flashgate/controlplane/admin"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
)

// syncBuffer is a bytes.Buffer safe for the audit logger's concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestAdminRefundAudited runs every tier: a buyer buys through the
// gateway's HTTP port, the sink stores the order, and an admin refunds it
// through the admin API. The audit log (JSON lines) holds exactly one line
// naming the order: the refund, with the admin's address and result ok.
func TestAdminRefundAudited(t *testing.T) {
	var audit syncBuffer
	ps := startPageSystem(t, func(c *controlplane.Config) {
		c.AuditLogger = slog.New(slog.NewJSONHandler(&audit, nil))
	})
	ctx, cancel := context.WithTimeout(ps.ctx, 60*time.Second)
	defer cancel()
	public, adminToken := ps.url, ps.adminToken
	adminSrv := httptest.NewServer(admin.Handler(ps.cp))
	t.Cleanup(adminSrv.Close)

	call := func(method, url, token, body string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		raw, _ := io.ReadAll(res.Body)
		var m map[string]any
		_ = json.Unmarshal(raw, &m)
		return res.StatusCode, m
	}
	if code, m := call("POST", adminSrv.URL+"/admin/sales", adminToken, `{"id":"audited","name":"A","price_cents":100,"total":5}`); code != 201 {
		t.Fatalf("create sale: %d %v", code, m)
	}
	if code, m := call("POST", adminSrv.URL+"/admin/sales/audited/start", adminToken, ""); code != 200 {
		t.Fatalf("start sale: %d %v", code, m)
	}
	buyer := ps.token(t, "buyer-1")
	var orderID string
	testwait.Eventually(t, 10*time.Second, func() bool {
		code, m := call("POST", public+"/api/sales/audited/orders", buyer, "")
		if code == 201 {
			orderID, _ = m["order_id"].(string)
		}
		return orderID != ""
	}, "the purchase to get a 201")
	// The order is stored once the buyer sees it pending payment.
	testwait.Eventually(t, 10*time.Second, func() bool {
		_, m := call("GET", public+"/api/orders/"+orderID, buyer, "")
		return m["status"] == "pending_payment"
	}, "order %s to reach the database", orderID)
	code, order := call("POST", adminSrv.URL+"/admin/orders/"+orderID+"/refund", adminToken, "")
	if code != 200 || order["status"] != "refunded" {
		t.Fatalf("refund %s: got %d %v, want 200 refunded", orderID, code, order)
	}

	var naming []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(audit.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		if m["order"] == orderID {
			naming = append(naming, m)
		}
	}
	if len(naming) != 1 {
		t.Fatalf("got %d audit lines naming order %s, want exactly 1; the log:\n%s", len(naming), orderID, audit.String())
	}
	l := naming[0]
	if l["msg"] != "admin action" || l["action"] != "refund_order" || l["result"] != "ok" || !strings.HasPrefix(l["remote"].(string), "127.0.0.1:") {
		t.Errorf("the refund's audit line: got %v, want admin action refund_order, result ok, from 127.0.0.1", l)
	}
}
