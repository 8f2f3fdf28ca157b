package systemtest

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/gateway"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/inventory"
	"github.com/flashgate/flashgate/lua"
)

// capCatalog is the gateway's catalog of one open sale.
type capCatalog struct{ sale flashgate.Sale }

func (c capCatalog) Sale(_ context.Context, id string) (flashgate.Sale, error) {
	if id != c.sale.ID {
		return flashgate.Sale{}, flashgate.ErrNotFound
	}
	return c.sale, nil
}

// TestFencedAttemptsLeaveTheAdmissionCap (issue 35, part 3): after a
// failover, before the control plane has rebuilt the sale, the reserve
// script's failover fence refuses every attempt the gateway admitted
// (503, retried). Those attempts took nothing, so they must not use up the
// admission cap (the access counter the gateway counts toward count):
// once the sale is rebuilt, as many buyers as there are units must get
// 201, not sold_out with units free. Through the inventory in the process
// and over HTTP.
func TestFencedAttemptsLeaveTheAdmissionCap(t *testing.T) {
	for _, over := range []string{"in-process", "http"} {
		t.Run(over, func(t *testing.T) { testFencedAttemptsLeaveTheCap(t, over) })
	}
}

func testFencedAttemptsLeaveTheCap(t *testing.T, over string) {
	ctx := context.Background()
	const sale, total = "capped", 6
	rdb, buy := capGateway(t, over, sale, total)
	// A failover the control plane has not rebuilt yet: the marker names
	// another primary, so the fence pauses the sale and refuses.
	if err := rdb.Set(ctx, lua.PrimaryKey(sale), "an-older-primary", 0).Err(); err != nil {
		t.Fatal(err)
	}
	for i := range 2 * total {
		if code, body := buy("early"+strconv.Itoa(i), `{"quantity":1}`); code != 503 {
			t.Fatalf("attempt %d during the failover: %d %s, want 503", i, code, body)
		}
	}
	// The rebuild, as the failover watch and the next re-sync leave it:
	// the marker names this primary, the sale open again, no unit sold.
	if err := rdb.Del(ctx, lua.PrimaryKey(sale)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, lua.SaleKey(sale), lua.FieldStart, 1).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HDel(ctx, lua.SaleKey(sale), lua.FieldResume).Err(); err != nil {
		t.Fatal(err)
	}
	got := map[int]int{}
	for i := range total {
		code, _ := buy("late"+strconv.Itoa(i), `{"quantity":1}`)
		got[code]++
	}
	if got[201] != total {
		t.Errorf("after the rebuild, %d buyers for %d free units: answers %v, want %d × 201 (the fenced attempts used up the admission cap)", total, total, got, total)
	}
}

// TestRefusedAttemptsLeaveTheAdmissionCap (issue 35, part 3; found by a
// scalper's attack on a running server): buyers who hold an order already
// keep sending purchases (409 already_purchased), or ask for more than
// per_user (400 bad_request), or one user sends many purchases at once.
// Those attempts could not buy, so they must
// not use up the admission cap and keep the last unit from a new buyer.
// Through the inventory in the process and over HTTP.
func TestRefusedAttemptsLeaveTheAdmissionCap(t *testing.T) {
	for _, over := range []string{"in-process", "http"} {
		t.Run(over, func(t *testing.T) { testRefusedAttemptsLeaveTheCap(t, over) })
	}
}

func testRefusedAttemptsLeaveTheCap(t *testing.T, over string) {
	const sale, total, resends = "refused", 6, 4
	_, buy := capGateway(t, over, sale, total)
	// One user sends many purchases at once: one buys, the others are
	// refused (already_purchased, or sold_out while the cap is full of
	// the user's own attempts in flight).
	const rush = 24
	codes := make(chan int, rush)
	var wg sync.WaitGroup
	for range rush {
		wg.Go(func() {
			code, _ := buy("rusher", `{"quantity":1}`)
			codes <- code
		})
	}
	wg.Wait()
	close(codes)
	got := map[int]int{}
	for c := range codes {
		got[c]++
	}
	if got[201] != 1 || got[409] != rush-1 {
		t.Fatalf("%d parallel purchases of one user: answers %v, want one 201 and the rest 409", rush, got)
	}
	// All units but one sold, one to each holder (the rusher holds one).
	for i := range total - 2 {
		if code, body := buy("holder"+strconv.Itoa(i), `{"quantity":1}`); code != 201 {
			t.Fatalf("holder %d's purchase: %d %s, want 201", i, code, body)
		}
	}
	// The holders send again: each attempt reaches the reserve and is
	// refused, as is one asking for more than per_user.
	for r := range resends {
		for i := range total - 2 {
			if code, body := buy("holder"+strconv.Itoa(i), `{"quantity":1}`); code != 409 {
				t.Fatalf("holder %d's resend %d: %d %s, want 409 already_purchased", i, r, code, body)
			}
		}
		if code, body := buy("greedy", `{"quantity":2}`); code != 400 {
			t.Fatalf("a purchase over per_user: %d %s, want 400 bad_request", code, body)
		}
	}
	// The last unit goes to the first new buyer.
	if code, body := buy("newcomer", `{"quantity":1}`); code != 201 {
		t.Errorf("a new buyer for the last unit: %d %s, want 201 (the refused attempts used up the admission cap)", code, body)
	}
}

// TestUnavailableAttemptsLeaveTheAdmissionCap (issue 35, part 3): while
// the inventory cannot reach Redis, every attempt the gateway admitted is
// answered 503 unavailable (neither the fence's pause nor a refusal: the
// reserve never ran). Those attempts did not buy, so they must not use up
// the admission cap: once Redis is reachable again, as many buyers as there
// are units must get 201, not sold_out with units free. Through the
// inventory in the process and over HTTP.
func TestUnavailableAttemptsLeaveTheAdmissionCap(t *testing.T) {
	for _, over := range []string{"in-process", "http"} {
		t.Run(over, func(t *testing.T) { testUnavailableAttemptsLeaveTheCap(t, over) })
	}
}

func testUnavailableAttemptsLeaveTheCap(t *testing.T, over string) {
	const sale, total = "unreachable", 6
	// The inventory's connections to Redis are refused while down is set;
	// its pool is empty until the first reserve, which comes while down.
	var down atomic.Bool
	down.Store(true)
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		if down.Load() {
			return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	_, buy := capGatewayDial(t, over, sale, total, dial)
	for i := range 2 * total {
		if code, body := buy("early"+strconv.Itoa(i), `{"quantity":1}`); code != 503 {
			t.Fatalf("attempt %d while Redis is unreachable: %d %s, want 503 (a sold_out: the unavailable attempts used up the admission cap)", i, code, body)
		}
	}
	down.Store(false)
	got := map[int]int{}
	for i := range total {
		code, _ := buy("late"+strconv.Itoa(i), `{"quantity":1}`)
		got[code]++
	}
	if got[201] != total {
		t.Errorf("with Redis back, %d buyers for %d free units: answers %v, want %d × 201 (the unavailable attempts used up the admission cap)", total, total, got, total)
	}
}

// capGateway starts a gateway over a fresh Redis selling sale, prepared
// with total units, an admission cap of total (ratio 1) and per_user 1,
// open; the reserver is the inventory in the process or over HTTP (over).
// It returns the Redis client and a buyer: buy(user, body) answers the
// purchase's status and body.
func capGateway(t *testing.T, over, sale string, total int64) (*redis.Client, func(user, body string) (int, string)) {
	t.Helper()
	return capGatewayDial(t, over, sale, total, nil)
}

// capGatewayDial is capGateway whose inventory reaches Redis through its
// own client dialling with dial (nil: the test's client).
func capGatewayDial(t *testing.T, over, sale string, total int64, dial func(ctx context.Context, network, addr string) (net.Conn, error)) (*redis.Client, func(user, body string) (int, string)) {
	t.Helper()
	return capGatewayWith(t, over, sale, total, dial, nil)
}

// capGatewayWith is capGatewayDial whose gateway reserves through
// wrap(reserver) (nil: the reserver itself).
func capGatewayWith(t *testing.T, over, sale string, total int64, dial func(ctx context.Context, network, addr string) (net.Conn, error), wrap func(gateway.Reserver) gateway.Reserver) (*redis.Client, func(user, body string) (int, string)) {
	t.Helper()
	ctx := context.Background()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	invRDB := rdb
	if dial != nil {
		// No retries: each reserve is answered from one try, one dial.
		invRDB = redis.NewClient(&redis.Options{Addr: srv.Addr, Dialer: dial, MaxRetries: -1, DialerRetries: 1})
		t.Cleanup(func() { _ = invRDB.Close() })
	}
	quietLog := slog.New(slog.NewTextHandler(io.Discard, nil))
	inv := inventory.New(invRDB, inventory.Config{Logger: quietLog, MaxReserveBatch: 1})
	var reserver gateway.Reserver = inv
	if over == "http" {
		ln := fasthttputil.NewInmemoryListener()
		srv := &fasthttp.Server{Handler: inventory.NewHandler(inv, inventory.HandlerConfig{Logger: quietLog}),
			MaxRequestBodySize: inventory.MaxBodySize, ErrorHandler: inventory.ServerErrorHandler}
		done := make(chan struct{})
		go func() { _ = srv.Serve(ln); close(done) }()
		t.Cleanup(func() { _ = srv.Shutdown(); _ = ln.Close(); <-done })
		c, err := inventory.NewClient([]string{"http://inventory.test:8080"}, inventory.ClientConfig{
			Dial: func(string) (net.Conn, error) { return ln.Dial() }})
		if err != nil {
			t.Fatal(err)
		}
		reserver = c
	}
	if wrap != nil {
		reserver = wrap(reserver)
	}
	// Prepared with an admission cap of total (ratio 1), open.
	if err := lua.Prepare.Run(ctx, rdb, lua.SaleKeys(sale), total, total, 1, 100).Err(); err != nil {
		t.Fatal(err)
	}
	if err := lua.SetState.Run(ctx, rdb, lua.SaleKeys(sale), "open").Err(); err != nil {
		t.Fatal(err)
	}
	secret := []byte("0123456789abcdef0123456789abcdef")
	gw, err := gateway.New(gateway.Config{
		Primary: rdb, Replica: rdb, Reserver: reserver, Catalog: capCatalog{flashgate.Sale{ID: sale, Name: "Capped", PriceCents: 100, Total: total, State: flashgate.StateOpen}},
		JWTSecret: secret, Logger: quietLog, Metrics: prometheus.NewRegistry(), ShutdownDelay: -1,
		StateRefresh: time.Hour, // the cached state stays "open": the Reserver, not the cache, refuses
		UserRate:     -1,        // no per-user limit: every attempt reaches admission
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.Close() })
	buy := func(user, body string) (int, string) {
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": user, "exp": time.Now().Add(time.Hour).Unix()}).SignedString(secret)
		if err != nil {
			t.Fatal(err)
		}
		var rq fasthttp.Request
		rq.Header.SetMethod("POST")
		rq.SetRequestURI("/api/sales/" + sale + "/orders")
		rq.Header.Set("Authorization", "Bearer "+tok)
		rq.SetBodyString(body)
		var rc fasthttp.RequestCtx
		rc.Init(&rq, nil, nil)
		gw.Handler()(&rc)
		return rc.Response.StatusCode(), string(rc.Response.Body())
	}
	return rdb, buy
}
