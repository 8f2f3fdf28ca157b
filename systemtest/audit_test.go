package systemtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flashgate/flashgate/controlplane"
	"github.com/flashgate/flashgate/gateway"
	"github.com/flashgate/flashgate/internal/redistest"
	"github.com/flashgate/flashgate/inventory"
	"github.com/flashgate/flashgate/ordersink"
	"github.com/flashgate/flashgate/sqldb"
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
	rs := redistest.Start(t)
	rdb, sinkReader := rs.Client(t), rs.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db, err := sqldb.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "fg.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })

	var audit syncBuffer
	adminToken := randomHex(t, 32)
	inv := inventory.New(rdb, inventory.Config{Logger: quiet})
	cp, err := controlplane.New(controlplane.Config{
		Redis: rdb, Store: db, Releaser: inv, AdminToken: adminToken, Logger: quiet,
		AuditLogger: slog.New(slog.NewJSONHandler(&audit, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ps := &pageSystem{jwtS: []byte(randomHex(t, 32))}
	gw, err := gateway.New(gateway.Config{
		Primary: rdb, Replica: rdb, Reserver: inv, Catalog: db, Orders: cp,
		JWTSecret: ps.jwtS, Logger: quiet, ShutdownDelay: -1, StateRefresh: 5 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	sink := ordersink.New(sinkReader, db, ordersink.Config{Logger: quiet})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	public := "http://" + ln.Addr().String()
	admin := httptest.NewServer(cp.Handler())
	t.Cleanup(admin.Close)
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := gw.Serve(ln); err != nil {
			t.Errorf("gateway: %v", err)
		}
	}()
	go func() {
		defer wg.Done()
		if err := sink.Run(runCtx); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("ordersink: %v", err)
		}
	}()
	t.Cleanup(func() {
		sctx, c := context.WithTimeout(context.Background(), 5*time.Second)
		defer c()
		_ = gw.Shutdown(sctx)
		stop()
		wg.Wait()
	})

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
	if code, m := call("POST", admin.URL+"/admin/sales", adminToken, `{"id":"audited","name":"A","price_cents":100,"total":5}`); code != 201 {
		t.Fatalf("create sale: %d %v", code, m)
	}
	if code, m := call("POST", admin.URL+"/admin/sales/audited/start", adminToken, ""); code != 200 {
		t.Fatalf("start sale: %d %v", code, m)
	}
	buyer := ps.token(t, "buyer-1")
	var orderID string
	for deadline := time.Now().Add(10 * time.Second); orderID == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		code, m := call("POST", public+"/api/sales/audited/orders", buyer, "")
		if code == 201 {
			orderID, _ = m["order_id"].(string)
		}
	}
	if orderID == "" {
		t.Fatal("the purchase never got a 201")
	}
	// The order is stored once the buyer sees it pending payment.
	stored := false
	for deadline := time.Now().Add(10 * time.Second); !stored && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		_, m := call("GET", public+"/api/orders/"+orderID, buyer, "")
		stored = m["status"] == "pending_payment"
	}
	if !stored {
		t.Fatalf("order %s never reached the database", orderID)
	}
	code, order := call("POST", admin.URL+"/admin/orders/"+orderID+"/refund", adminToken, "")
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
