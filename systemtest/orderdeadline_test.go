package systemtest

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane"
	"github.com/flashgate/flashgate/gateway"
	"github.com/flashgate/flashgate/internal/testenv/pgtest"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/inventory"
	"github.com/flashgate/flashgate/sqldb"
)

// TestOrderRoutesStalledDatabase: the gateway's order routes over a real
// control plane and PostgreSQL, reached through a TCP proxy. While the
// proxy holds every byte back (a database that stopped answering, with its
// connections open), GET, pay and cancel of an order are answered 503
// unavailable once the order timeout passed, instead of holding their
// handlers; once it answers again, so do they.
func TestOrderRoutesStalledDatabase(t *testing.T) {
	dsn := pgtest.New(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy := redistest.StartProxy(t, u.Host)
	u.Host = proxy.Addr
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, err := sqldb.Open(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	rs := redistest.Start(t)
	rdb := rs.Client(t)
	inv := inventory.New(rdb, inventory.Config{Logger: quiet})
	cp, err := controlplane.New(controlplane.Config{Redis: rdb, Store: db, Releaser: inv, AdminToken: "admin-token", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	const orderTimeout = 3 * time.Second
	secret := []byte(randomHex(t, 32))
	gw, err := gateway.New(gateway.Config{
		Primary: rdb, Replica: rdb, Reserver: inv, Catalog: db, Orders: cp,
		JWTSecret: secret, Logger: quiet, ShutdownDelay: -1, OrderTimeout: orderTimeout,
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gw.Serve(ln) }()
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = gw.Shutdown(sctx)
	})
	base := "http://" + ln.Addr().String()

	if _, err := cp.CreateSale(ctx, flashgate.Sale{ID: "stall", Name: "Stall", PriceCents: 100, Total: 5}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if _, err := db.InsertOrders(ctx, []flashgate.Order{{ID: "stalled-order", SaleID: "stall", UserID: "buyer",
		Quantity: 1, PriceCents: 100, Status: flashgate.StatusPendingPayment, CreatedAt: now, UpdatedAt: now}}); err != nil {
		t.Fatal(err)
	}
	tok := (&pageSystem{jwtS: secret}).token(t, "buyer")
	client := &http.Client{Timeout: 30 * time.Second}
	call := func(method, path string) (int, string, time.Duration) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, base+path, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		start := time.Now()
		res, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer res.Body.Close()
		raw, _ := io.ReadAll(res.Body)
		var m map[string]any
		_ = json.Unmarshal(raw, &m)
		code, _ := m["error"].(string)
		if code == "" {
			code, _ = m["status"].(string)
		}
		return res.StatusCode, code, time.Since(start)
	}
	if status, code, _ := call("GET", "/api/orders/stalled-order"); status != 200 || code != "pending_payment" {
		t.Fatalf("before the stall: got %d %s, want 200 pending_payment", status, code)
	}

	proxy.Pause()
	for _, r := range []struct{ method, path string }{
		{"GET", "/api/orders/stalled-order"},
		{"POST", "/api/orders/stalled-order/pay"},
		{"POST", "/api/orders/stalled-order/cancel"},
		{"GET", "/api/orders/not-stored-order"},
	} {
		status, code, took := call(r.method, r.path)
		t.Logf("%s %s with the database stalled: %d %s in %v", r.method, r.path, status, code, took.Round(time.Millisecond))
		if status != 503 || code != "unavailable" {
			t.Errorf("%s %s with the database stalled: got %d %s, want 503 unavailable", r.method, r.path, status, code)
		}
		// The bound is the deadline itself, with room for a loaded machine.
		if took > orderTimeout+10*time.Second {
			t.Errorf("%s %s: answered after %v, past the order timeout %v", r.method, r.path, took, orderTimeout)
		}
	}
	proxy.Resume()
	var status int
	var code string
	if _, ok := testwait.For(30*time.Second, func() bool {
		status, code, _ = call("POST", "/api/orders/stalled-order/pay")
		return status == 200 && code == "paid"
	}); !ok {
		t.Fatalf("after the stall: pay got %d %s, want 200 paid", status, code)
	}
}
