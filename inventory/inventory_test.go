package inventory_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/inventory"
	"github.com/flashgate/flashgate/lua"
)

// reserver has the shape of the gateway's Reserver plus the control plane's
// Releaser; both the Service and the Client must satisfy it.
type reserver interface {
	Reserve(ctx context.Context, saleID, userID, variant string, qty int64) (orderID string, err error)
	Release(ctx context.Context, o flashgate.Order) (released bool, err error)
}

var (
	_ reserver = (*inventory.Service)(nil)
	_ reserver = (*inventory.Client)(nil)
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newRedis starts a redis-server and returns it with a client sized for the
// concurrency tests.
func newRedis(tb testing.TB) (*redistest.Server, *redis.Client) {
	tb.Helper()
	srv := redistest.Start(tb)
	rdb := redis.NewClient(&redis.Options{
		Addr: srv.Addr, PoolSize: 128, DialTimeout: time.Second,
		ReadTimeout: 3 * time.Second, MaxRetries: 1,
	})
	tb.Cleanup(func() { _ = rdb.Close() })
	return srv, rdb
}

// prepSale creates sale id in Redis with total units and per-user limit and,
// unless state is "", sets it ("open" or "close").
func prepSale(tb testing.TB, rdb redis.UniversalClient, id string, total, perUser int64, state string) {
	tb.Helper()
	ctx := context.Background()
	if perUser == 0 {
		perUser = 1
	}
	n, err := lua.Prepare.Run(ctx, rdb, lua.SaleKeys(id),
		total, flashgate.AdmitCap(total, 0), perUser, 500).Int64()
	if err != nil || n != 1 {
		tb.Fatalf("Prepare %s: got %d, %v; want 1", id, n, err)
	}
	if state != "" {
		if n, err := lua.SetState.Run(ctx, rdb, lua.SaleKeys(id), state).Int64(); err != nil || n != 1 {
			tb.Fatalf("SetState %s %s: got %d, %v; want 1", id, state, n, err)
		}
	}
}

func booked(tb testing.TB, rdb redis.UniversalClient, id string) int64 {
	tb.Helper()
	n, err := rdb.HGet(context.Background(), lua.SaleKey(id), lua.FieldBooked).Int64()
	if err != nil {
		tb.Fatalf("HGET booked: %v", err)
	}
	return n
}

// serve serves svc's handler on an in-memory listener and returns a Client
// for it.
func serve(tb testing.TB, svc *inventory.Service) (*inventory.Client, *fasthttputil.InmemoryListener) {
	tb.Helper()
	ln := fasthttputil.NewInmemoryListener()
	srv := &fasthttp.Server{
		Handler:            inventory.NewHandler(svc, inventory.HandlerConfig{Logger: quiet(), Token: "tier-token"}),
		MaxRequestBodySize: inventory.MaxBodySize,
		ErrorHandler:       inventory.ServerErrorHandler,
	}
	done := make(chan struct{})
	go func() { _ = srv.Serve(ln); close(done) }()
	tb.Cleanup(func() {
		_ = srv.Shutdown()
		_ = ln.Close()
		<-done
	})
	c, err := inventory.NewClient([]string{"http://inventory.test:8080"}, inventory.ClientConfig{
		Dial:  func(string) (net.Conn, error) { return ln.Dial() },
		Token: "tier-token",
	})
	if err != nil {
		tb.Fatalf("NewClient: %v", err)
	}
	return c, ln
}

func TestContractService(t *testing.T) {
	_, rdb := newRedis(t)
	testContract(t, rdb, inventory.New(rdb, inventory.Config{Logger: quiet()}))
}

func TestContractClient(t *testing.T) {
	_, rdb := newRedis(t)
	c, _ := serve(t, inventory.New(rdb, inventory.Config{Logger: quiet()}))
	testContract(t, rdb, c)
}

// testContract is the one suite every reserver passes.
func testContract(t *testing.T, rdb redis.UniversalClient, r reserver) {
	ctx := context.Background()
	prepSale(t, rdb, "upcoming", 5, 1, "")
	prepSale(t, rdb, "closed", 5, 1, "close")
	prepSale(t, rdb, "one", 1, 1, "open")
	prepSale(t, rdb, "open", 100, 2, "open")

	t.Run("errors", func(t *testing.T) {
		cases := []struct {
			name       string
			sale, user string
			qty        int64
			want       error
		}{
			{"no sale", "nosuch", "u1", 1, flashgate.ErrNotFound},
			{"malformed sale id", "bad id!", "u1", 1, flashgate.ErrNotFound},
			{"empty sale id", "", "u1", 1, flashgate.ErrNotFound},
			{"not started", "upcoming", "u1", 1, flashgate.ErrNotStarted},
			{"closed", "closed", "u1", 1, flashgate.ErrClosed},
			{"quantity zero", "open", "u1", 0, flashgate.ErrBadRequest},
			{"quantity negative", "open", "u1", -3, flashgate.ErrBadRequest},
			{"quantity over per_user", "open", "u1", 3, flashgate.ErrBadRequest},
			{"empty user", "open", "", 1, flashgate.ErrBadRequest},
			{"user too long", "open", strings.Repeat("u", 129), 1, flashgate.ErrBadRequest},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				id, err := r.Reserve(ctx, tc.sale, tc.user, "", tc.qty)
				if !errors.Is(err, tc.want) || id != "" {
					t.Errorf("Reserve: got %q, %v; want \"\", %v", id, err, tc.want)
				}
			})
		}
		if got := booked(t, rdb, "open"); got != 0 {
			t.Errorf("booked after rejected calls: got %d, want 0", got)
		}
	})

	t.Run("happy path", func(t *testing.T) {
		id, err := r.Reserve(ctx, "open", "alice", "", 2)
		if err != nil || !flashgate.ValidOrderID(id) {
			t.Fatalf("Reserve: got %q, %v; want a valid order id", id, err)
		}
		if got := booked(t, rdb, "open"); got != 2 {
			t.Errorf("booked: got %d, want 2", got)
		}
		if got, _ := rdb.HGet(ctx, lua.BuyersKey("open"), "alice").Result(); got != id {
			t.Errorf("buyer: got %q, want %q", got, id)
		}
		msgs, err := rdb.XRange(ctx, lua.OrdersKey("open"), "-", "+").Result()
		if err != nil || len(msgs) != 1 || entry(msgs[0]).Order != id || entry(msgs[0]).Quantity != "2" {
			t.Errorf("stream: got %v, %v; want one entry for %s qty 2", msgs, err, id)
		}
	})

	t.Run("already purchased carries order id", func(t *testing.T) {
		first, err := r.Reserve(ctx, "open", "bob", "", 1)
		if err != nil {
			t.Fatalf("first Reserve: %v", err)
		}
		id, err := r.Reserve(ctx, "open", "bob", "", 1)
		var pe *flashgate.PurchasedError
		if !errors.As(err, &pe) || pe.OrderID != first || id != "" {
			t.Fatalf("second Reserve: got %q, %v; want PurchasedError{%s}", id, err, first)
		}
		if !errors.Is(err, flashgate.ErrAlreadyPurchased) {
			t.Errorf("errors.Is(%v, ErrAlreadyPurchased): got false, want true", err)
		}
	})

	t.Run("sold out", func(t *testing.T) {
		if _, err := r.Reserve(ctx, "one", "u1", "", 1); err != nil {
			t.Fatalf("first Reserve: %v", err)
		}
		if _, err := r.Reserve(ctx, "one", "u2", "", 1); !errors.Is(err, flashgate.ErrSoldOut) {
			t.Errorf("second Reserve: got %v, want %v", err, flashgate.ErrSoldOut)
		}
	})

	t.Run("release", func(t *testing.T) {
		prepSale(t, rdb, "rel", 1, 1, "open")
		id, err := r.Reserve(ctx, "rel", "carol", "", 1)
		if err != nil {
			t.Fatalf("Reserve: %v", err)
		}
		o := flashgate.Order{ID: id, SaleID: "rel", UserID: "carol", Quantity: 1}
		if ok, err := r.Release(ctx, o); !ok || err != nil {
			t.Fatalf("first Release: got %v, %v; want true, nil", ok, err)
		}
		if ok, err := r.Release(ctx, o); ok || err != nil {
			t.Fatalf("second Release: got %v, %v; want false, nil", ok, err)
		}
		if got := booked(t, rdb, "rel"); got != 0 {
			t.Errorf("booked after two releases: got %d, want 0", got)
		}
		if _, err := r.Reserve(ctx, "rel", "dave", "", 1); err != nil {
			t.Errorf("Reserve of the released unit by another user: %v", err)
		}
		if _, err := r.Reserve(ctx, "rel", "erin", "", 1); !errors.Is(err, flashgate.ErrSoldOut) {
			t.Errorf("Reserve after the unit went again: got %v, want %v", err, flashgate.ErrSoldOut)
		}
		gone := flashgate.Order{ID: "x1", SaleID: "gone", UserID: "u", Quantity: 1}
		if ok, err := r.Release(ctx, gone); ok || err != nil {
			t.Errorf("Release in a sale Redis lacks: got %v, %v; want false, nil", ok, err)
		}
		bad := flashgate.Order{ID: "x1", SaleID: "rel", UserID: "u", Quantity: 0}
		if ok, err := r.Release(ctx, bad); ok || !errors.Is(err, flashgate.ErrBadRequest) {
			t.Errorf("Release of quantity 0: got %v, %v; want false, ErrBadRequest", ok, err)
		}
	})

	t.Run("variants", func(t *testing.T) { testVariants(t, rdb, r) })
}

// run calls fn(i) for i in [0, n) on workers goroutines.
func run(n, workers int, fn func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				fn(i)
			}
		}()
	}
	wg.Wait()
}

func TestConcurrentDistinctUsers(t *testing.T) {
	_, rdb := newRedis(t)
	svc := inventory.New(rdb, inventory.Config{Logger: quiet()})
	ctx := context.Background()
	cases := []struct {
		name           string
		users, workers int
		total          int64
	}{
		{"1000 goroutines 100 units", 1000, 1000, 100},
		{"100000 users 10 units", 100_000, 64, 10},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sale := "c" + strconv.Itoa(tc.users)
			prepSale(t, rdb, sale, tc.total, 1, "open")
			var ok, soldOut, other atomic.Int64
			ids := sync.Map{}
			run(tc.users, tc.workers, func(i int) {
				id, err := svc.Reserve(ctx, sale, "user-"+strconv.Itoa(i), "", 1)
				switch {
				case err == nil:
					ok.Add(1)
					if _, dup := ids.LoadOrStore(id, i); dup {
						t.Errorf("order id %s minted twice", id)
					}
				case errors.Is(err, flashgate.ErrSoldOut):
					soldOut.Add(1)
				default:
					other.Add(1)
					t.Errorf("Reserve user %d: %v", i, err)
				}
			})
			if ok.Load() != tc.total || soldOut.Load() != int64(tc.users)-tc.total || other.Load() != 0 {
				t.Errorf("outcomes: got %d ok, %d sold out, %d other; want %d, %d, 0",
					ok.Load(), soldOut.Load(), other.Load(), tc.total, int64(tc.users)-tc.total)
			}
			if got := booked(t, rdb, sale); got != tc.total {
				t.Errorf("booked: got %d, want %d", got, tc.total)
			}
			if got, err := rdb.XLen(ctx, lua.OrdersKey(sale)).Result(); err != nil || got != tc.total {
				t.Errorf("stream length: got %d, %v; want %d", got, err, tc.total)
			}
			if got, err := rdb.HLen(ctx, lua.BuyersKey(sale)).Result(); err != nil || got != tc.total {
				t.Errorf("buyers: got %d, %v; want %d", got, err, tc.total)
			}
		})
	}
}

func TestConcurrentSameUser(t *testing.T) {
	_, rdb := newRedis(t)
	svc := inventory.New(rdb, inventory.Config{Logger: quiet()})
	prepSale(t, rdb, "same", 100, 1, "open")
	const n = 50
	ids := make([]string, n)
	errs := make([]error, n)
	run(n, n, func(i int) { ids[i], errs[i] = svc.Reserve(context.Background(), "same", "mallory", "", 1) })
	var winner string
	for i := range n {
		if errs[i] == nil {
			if winner != "" {
				t.Fatalf("two reserves succeeded: %s and %s", winner, ids[i])
			}
			winner = ids[i]
		}
	}
	if winner == "" {
		t.Fatal("no reserve succeeded")
	}
	for i := range n {
		if errs[i] == nil {
			continue
		}
		var pe *flashgate.PurchasedError
		if !errors.As(errs[i], &pe) || pe.OrderID != winner {
			t.Errorf("loser %d: got %v, want PurchasedError{%s}", i, errs[i], winner)
		}
	}
	if got := booked(t, rdb, "same"); got != 1 {
		t.Errorf("booked: got %d, want 1", got)
	}
}

func TestReserveAfterScriptFlush(t *testing.T) {
	srv, rdb := newRedis(t)
	// A replica, so that WAIT 1 is answered.
	redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(srv.Port)).WaitReplica(t)
	ctx := context.Background()
	prepSale(t, rdb, "flush", 10, 1, "open")
	cases := []struct {
		name string
		cfg  inventory.Config
	}{
		{"plain", inventory.Config{}},
		// The timeout is generous: this case is about the script cache, and a
		// WAIT that falls short answers 503.
		{"with WAIT", inventory.Config{WaitReplicas: 1, WaitTimeout: 2 * time.Second}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Logger = quiet()
			svc := inventory.New(rdb, tc.cfg)
			for j := range 2 {
				if err := rdb.ScriptFlush(ctx).Err(); err != nil {
					t.Fatalf("SCRIPT FLUSH: %v", err)
				}
				if _, err := svc.Reserve(ctx, "flush", "u"+strconv.Itoa(i*10+j), "", 1); err != nil {
					t.Fatalf("Reserve after SCRIPT FLUSH: %v", err)
				}
			}
		})
	}
	if got := booked(t, rdb, "flush"); got != 4 {
		t.Errorf("booked: got %d, want 4", got)
	}
}

// TestWaitReplicas proves that with WaitReplicas the reservation is on the
// replica when Reserve returns.
func TestWaitReplicas(t *testing.T) {
	primary := redistest.Start(t, "--repl-diskless-sync-delay", "0")
	rdb := primary.Client(t)
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port))
	replica.WaitReplica(t)
	rc := replica.Client(t)
	ctx := context.Background()
	prepSale(t, rdb, "wait", 100, 1, "open")
	svc := inventory.New(rdb, inventory.Config{Logger: quiet(), WaitReplicas: 1, WaitTimeout: 5 * time.Second})
	for i := range 20 {
		user := "u" + strconv.Itoa(i)
		id, err := svc.Reserve(ctx, "wait", user, "", 1)
		if err != nil {
			t.Fatalf("Reserve: %v", err)
		}
		if got, err := rc.HGet(ctx, lua.BuyersKey("wait"), user).Result(); err != nil || got != id {
			t.Fatalf("replica buyer %s right after Reserve: got %q, %v; want %q", user, got, err, id)
		}
	}
	// Asking for more replicas than exist answers ErrUnavailable (503, never
	// 201), and so does a retry that asks as much (it would confirm the
	// order); the reservation stands, and a retry whose WAIT is met finds
	// the order.
	svc2 := inventory.New(rdb, inventory.Config{Logger: quiet(), WaitReplicas: 2, WaitTimeout: 20 * time.Millisecond})
	if id, err := svc2.Reserve(ctx, "wait", "late", "", 1); id != "" || !errors.Is(err, flashgate.ErrUnavailable) {
		t.Fatalf("Reserve waiting for a missing replica: got %q, %v; want \"\", ErrUnavailable", id, err)
	}
	stored, err := rdb.HGet(ctx, lua.BuyersKey("wait"), "late").Result()
	if err != nil || !flashgate.ValidOrderID(stored) {
		t.Fatalf("buyer entry after the short WAIT: got %q, %v; want an order id", stored, err)
	}
	if _, err := svc2.Reserve(ctx, "wait", "late", "", 1); !errors.Is(err, flashgate.ErrUnavailable) {
		t.Fatalf("retry still short of replicas: got %v; want ErrUnavailable", err)
	}
	_, err = svc.Reserve(ctx, "wait", "late", "", 1)
	var pe *flashgate.PurchasedError
	if !errors.As(err, &pe) || pe.OrderID != stored {
		t.Errorf("retry after the short WAIT: got %v; want PurchasedError{%s}", err, stored)
	}
}

func TestRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	// Few retries, so that a dead Redis is reported at once.
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialerRetries: 1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	svc := inventory.New(rdb, inventory.Config{Logger: quiet()})
	ctx := context.Background()
	prepSale(t, rdb, "down", 10, 1, "open")
	c, ln := serve(t, svc)
	srv.Stop()

	if _, err := svc.Reserve(ctx, "down", "u1", "", 1); !errors.Is(err, flashgate.ErrUnavailable) {
		t.Errorf("Service.Reserve: got %v, want %v", err, flashgate.ErrUnavailable)
	}
	if _, err := svc.Release(ctx, flashgate.Order{ID: "o", SaleID: "down", UserID: "u", Quantity: 1}); !errors.Is(err, flashgate.ErrUnavailable) {
		t.Errorf("Service.Release: got %v, want %v", err, flashgate.ErrUnavailable)
	}
	if err := svc.Ping(ctx); !errors.Is(err, flashgate.ErrUnavailable) {
		t.Errorf("Ping: got %v, want %v", err, flashgate.ErrUnavailable)
	}
	if _, err := c.Reserve(ctx, "down", "u1", "", 1); !errors.Is(err, flashgate.ErrUnavailable) {
		t.Errorf("Client.Reserve: got %v, want %v", err, flashgate.ErrUnavailable)
	}
	// What reaches HTTP is the code alone, never Redis's message.
	status, body := do(t, ln, "POST", inventory.PathReserve, `{"sale_id":"down","user_id":"u1","quantity":1}`)
	if status != 503 || body != `{"error":"unavailable"}` {
		t.Errorf("POST /v1/reserve: got %d %s, want 503 {\"error\":\"unavailable\"}", status, body)
	}
	if status, body := do(t, ln, "GET", inventory.PathReadyz, ""); status != 503 || body != `{"error":"unavailable"}` {
		t.Errorf("GET /readyz: got %d %s, want 503", status, body)
	}
}

// do sends one raw request, with the tier token serve sets up, to the
// handler behind ln.
func do(t *testing.T, ln *fasthttputil.InmemoryListener, method, path, body string) (int, string) {
	t.Helper()
	return doAuth(t, ln, "Bearer tier-token", method, path, body)
}

// doAuth is do with the given Authorization header ("" = none).
func doAuth(t *testing.T, ln *fasthttputil.InmemoryListener, auth, method, path, body string) (int, string) {
	t.Helper()
	// The whole request goes in one write: a request past the server's body
	// limit is answered 413 and the connection closed after its headers,
	// and a second write would fail before the answer is read.
	hc := &fasthttp.HostClient{Addr: "inventory.test", Dial: func(string) (net.Conn, error) { return ln.Dial() }, WriteBufferSize: 64 << 10}
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("http://inventory.test" + path)
	req.Header.SetMethod(method)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if body != "" {
		req.SetBodyString(body)
	}
	if err := hc.DoTimeout(req, resp, 10*time.Second); err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp.StatusCode(), string(resp.Body())
}

func TestHandler(t *testing.T) {
	_, rdb := newRedis(t)
	prepSale(t, rdb, "h", 10, 1, "open")
	_, ln := serve(t, inventory.New(rdb, inventory.Config{Logger: quiet()}))
	cases := []struct {
		name, method, path, body string
		wantStatus               int
		wantBody                 string // "" = don't check
	}{
		{"healthz", "GET", "/healthz", "", 200, `{"status":"ok"}`},
		{"readyz", "GET", "/readyz", "", 200, `{"status":"ready"}`},
		{"unknown path", "GET", "/nope", "", 404, `{"error":"not_found"}`},
		{"wrong method", "GET", "/v1/reserve", "", 405, `{"error":"method_not_allowed"}`},
		{"bad json", "POST", "/v1/reserve", `{"sale_id":`, 400, `{"error":"bad_request"}`},
		{"too large", "POST", "/v1/reserve", `{"sale_id":"h","user_id":"` + strings.Repeat("u", 5000) + `"}`, 413, `{"error":"too_large"}`},
		{"no sale", "POST", "/v1/reserve", `{"sale_id":"zz","user_id":"u","quantity":1}`, 404, `{"error":"not_found"}`},
		{"user id with a NUL", "POST", "/v1/reserve", `{"sale_id":"h","user_id":"a\u0000b","quantity":1}`, 400, ""},
		{"user id with a control character", "POST", "/v1/reserve", `{"sale_id":"h","user_id":"a\u001bb","quantity":1}`, 400, ""},
		{"empty user id", "POST", "/v1/reserve", `{"sale_id":"h","user_id":"","quantity":1}`, 400, ""},
		{"user id too long", "POST", "/v1/reserve", `{"sale_id":"h","user_id":"` + strings.Repeat("u", 129) + `","quantity":1}`, 400, ""},
		{"bad release", "POST", "/v1/release", `[]`, 400, `{"error":"bad_request"}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, body := do(t, ln, tc.method, tc.path, tc.body)
			if status != tc.wantStatus || tc.wantBody != "" && body != tc.wantBody {
				t.Errorf("got %d %s, want %d %s", status, body, tc.wantStatus, tc.wantBody)
			}
		})
	}
	t.Run("already purchased body", func(t *testing.T) {
		status, body := do(t, ln, "POST", "/v1/reserve", `{"sale_id":"h","user_id":"zed","quantity":1}`)
		if status != 200 || !strings.HasPrefix(body, `{"order_id":"`) {
			t.Fatalf("first: got %d %s, want 200 {\"order_id\":…}", status, body)
		}
		id := strings.TrimSuffix(strings.TrimPrefix(body, `{"order_id":"`), `"}`)
		status, body = do(t, ln, "POST", "/v1/reserve", `{"sale_id":"h","user_id":"zed","quantity":1}`)
		if want := `{"error":"already_purchased","order_id":"` + id + `"}`; status != 409 || body != want {
			t.Errorf("second: got %d %s, want 409 %s", status, body, want)
		}
	})
}

// TestHandlerToken: with a token set, /v1/ calls without it are 401 and
// change nothing, health stays open, and a Client holding the wrong token
// reports the tier unavailable (a deployment fault), never unauthorized.
func TestHandlerToken(t *testing.T) {
	_, rdb := newRedis(t)
	prepSale(t, rdb, "tok", 10, 1, "open")
	_, ln := serve(t, inventory.New(rdb, inventory.Config{Logger: quiet()}))
	for _, auth := range []string{"", "Bearer wrong", "Bearer tier-token2", "Basic tier-token", "bearer tier-token "} {
		status, body := doAuth(t, ln, auth, "POST", inventory.PathReserve, `{"sale_id":"tok","user_id":"u1","quantity":1}`)
		if status != 401 || body != `{"error":"unauthorized"}` {
			t.Errorf("Authorization %q: got %d %s, want 401 unauthorized", auth, status, body)
		}
	}
	if booked, _ := rdb.HGet(context.Background(), lua.SaleKey("tok"), lua.FieldBooked).Int(); booked != 0 {
		t.Fatalf("booked = %d after refused calls, want 0", booked)
	}
	if status, _ := doAuth(t, ln, "", "GET", inventory.PathHealthz, ""); status != 200 {
		t.Errorf("healthz without token: got %d, want 200", status)
	}
	c, err := inventory.NewClient([]string{"http://inventory.test:8080"}, inventory.ClientConfig{
		Dial:  func(string) (net.Conn, error) { return ln.Dial() },
		Token: "not-the-token",
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Reserve(context.Background(), "tok", "u1", "", 1)
	if !errors.Is(err, flashgate.ErrUnavailable) || errors.Is(err, flashgate.ErrUnauthorized) {
		t.Fatalf("Reserve with the wrong token: got %v, want ErrUnavailable and not ErrUnauthorized", err)
	}
}

// TestHandlerBodyLimit proves the handler itself refuses large bodies when
// the server lets them through.
func TestHandlerBodyLimit(t *testing.T) {
	_, rdb := newRedis(t)
	ln := fasthttputil.NewInmemoryListener()
	srv := &fasthttp.Server{Handler: inventory.NewHandler(inventory.New(rdb, inventory.Config{}), inventory.HandlerConfig{})}
	done := make(chan struct{})
	go func() { _ = srv.Serve(ln); close(done) }()
	defer func() { _ = srv.Shutdown(); _ = ln.Close(); <-done }()
	for _, path := range []string{inventory.PathReserve, inventory.PathRelease} {
		status, body := do(t, ln, "POST", path, `{"order_id":"`+strings.Repeat("x", inventory.MaxBodySize)+`"}`)
		if status != 413 || body != `{"error":"too_large"}` {
			t.Errorf("POST %s: got %d %s, want 413 {\"error\":\"too_large\"}", path, status, body)
		}
	}
}

func TestNewClientAddrs(t *testing.T) {
	cases := []struct {
		addrs []string
		ok    bool
	}{
		{[]string{"http://127.0.0.1:8080"}, true},
		{[]string{"http://inventory-0:9000/", "http://[::1]:9000"}, true},
		{[]string{"https://inventory:443"}, true},
		{nil, false},
		{[]string{""}, false},
		{[]string{"127.0.0.1:8080"}, false},
		{[]string{"ftp://h:21"}, false},
		{[]string{"http://h"}, false},
		{[]string{"http://h:1/v1"}, false},
		{[]string{"http://user@h:1"}, false},
		{[]string{"http://h:1?x=1"}, false},
		{[]string{"http://127.0.0.1:8080", "http//x:1"}, false},
	}
	for _, tc := range cases {
		c, err := inventory.NewClient(tc.addrs, inventory.ClientConfig{})
		if got := err == nil; got != tc.ok || (err == nil) != (c != nil) {
			t.Errorf("NewClient(%q): got %v, %v; want ok=%v", tc.addrs, c, err, tc.ok)
		}
		if err != nil && !errors.Is(err, flashgate.ErrBadRequest) {
			t.Errorf("NewClient(%q): got %v, want ErrBadRequest", tc.addrs, err)
		}
	}
}

func TestClientTransportFailure(t *testing.T) {
	ln := fasthttputil.NewInmemoryListener()
	_ = ln.Close() // nothing listens
	c, err := inventory.NewClient([]string{"http://inventory.test:1"}, inventory.ClientConfig{
		Timeout: time.Second,
		Dial:    func(string) (net.Conn, error) { return ln.Dial() },
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Reserve(context.Background(), "s", "u", "", 1); !errors.Is(err, flashgate.ErrUnavailable) {
		t.Errorf("Reserve: got %v, want %v", err, flashgate.ErrUnavailable)
	}
	if _, err := c.Release(context.Background(), flashgate.Order{ID: "o", SaleID: "s", UserID: "u", Quantity: 1}); !errors.Is(err, flashgate.ErrUnavailable) {
		t.Errorf("Release: got %v, want %v", err, flashgate.ErrUnavailable)
	}
}

func TestMetrics(t *testing.T) {
	_, rdb := newRedis(t)
	prepSale(t, rdb, "m", 1, 1, "open")
	reg := prometheus.NewRegistry()
	svc := inventory.New(rdb, inventory.Config{Logger: quiet(), Metrics: reg})
	_ = inventory.New(rdb, inventory.Config{Logger: quiet(), Metrics: reg}) // sharing a registry is fine
	ctx := context.Background()
	_, _ = svc.Reserve(ctx, "m", "u1", "", 1)
	_, _ = svc.Reserve(ctx, "m", "u2", "", 1)
	_, _ = svc.Reserve(ctx, "m", "u1", "", 1)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	var calls uint64
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "user" || strings.Contains(l.GetValue(), "u1") {
					t.Errorf("%s carries a user label %v", mf.GetName(), l)
				}
			}
			switch mf.GetName() {
			case "flashgate_reserve_total":
				got[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
			case "flashgate_redis_call_seconds":
				if m.GetLabel()[0].GetValue() == "reserve" {
					calls = m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	for outcome, want := range map[string]float64{"ok": 1, "sold_out": 1, "already_purchased": 1, "closed": 0} {
		if got[outcome] != want {
			t.Errorf("flashgate_reserve_total{outcome=%q}: got %v, want %v", outcome, got[outcome], want)
		}
	}
	if calls != 3 {
		t.Errorf("flashgate_redis_call_seconds{op=\"reserve\"} count: got %d, want 3", calls)
	}
}

func TestOrderIDsMonotonic(t *testing.T) {
	_, rdb := newRedis(t)
	prepSale(t, rdb, "ids", 1000, 1, "open")
	svc := inventory.New(rdb, inventory.Config{Logger: quiet()})
	prev := ""
	for i := range 200 {
		id, err := svc.Reserve(context.Background(), "ids", "u"+strconv.Itoa(i), "", 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(id) != 26 || id <= prev {
			t.Fatalf("order id %d: got %q after %q, want a larger 26-character ULID", i, id, prev)
		}
		prev = id
	}
}

// BenchmarkReserve reserves from a large stock with 32 goroutines per core:
// one call at a time, auto-pipelined, and batched (lua.ReserveMany, the
// default), to be read as ratios, and batched on a sale of 20 variants
// (each buyer the next one), to be read against batched on one stock.
// redis-µs/op is redis-server's CPU per reserve (INFO cpu).
func BenchmarkReserve(b *testing.B) {
	for _, bc := range []struct {
		name     string
		cfg      inventory.Config
		variants int
	}{
		{"one-at-a-time", inventory.Config{NoAutoPipeline: true, MaxReserveBatch: 1}, 0},
		{"autopipeline", inventory.Config{MaxReserveBatch: 1}, 0},
		{"batched", inventory.Config{}, 0},
		{"batched-20-variants", inventory.Config{}, 20},
	} {
		b.Run(bc.name, func(b *testing.B) {
			_, rdb := newRedis(b)
			ids := []string{""}
			if bc.variants > 0 {
				ids = make([]string, bc.variants)
				totals := make([]int64, bc.variants)
				for i := range ids {
					ids[i], totals[i] = "v"+strconv.Itoa(i), 1<<45
				}
				prepVariants(b, rdb, "bench", 1, ids, totals)
			} else {
				prepSale(b, rdb, "bench", 1<<50, 1, "open")
			}
			bc.cfg.Logger = quiet()
			svc := inventory.New(rdb, bc.cfg)
			var n atomic.Int64
			ctx := context.Background()
			cpu0 := redisCPU(b, rdb)
			b.ReportAllocs()
			b.SetParallelism(32)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := n.Add(1)
					if _, err := svc.Reserve(ctx, "bench", "u"+strconv.FormatInt(i, 10), ids[i%int64(len(ids))], 1); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric((redisCPU(b, rdb)-cpu0)*1e6/float64(b.N), "redis-µs/op")
		})
	}
}

// redisCPU returns the CPU seconds (user + system) redis-server has used.
func redisCPU(tb testing.TB, rdb *redis.Client) float64 {
	tb.Helper()
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		tb.Fatalf("INFO cpu: %v", err)
	}
	return redistest.CPUSeconds(info)
}

func BenchmarkReserveSoldOut(b *testing.B) {
	_, rdb := newRedis(b)
	prepSale(b, rdb, "gone", 1, 1, "open")
	svc := inventory.New(rdb, inventory.Config{Logger: quiet()})
	ctx := context.Background()
	if _, err := svc.Reserve(ctx, "gone", "first", "", 1); err != nil {
		b.Fatal(err)
	}
	var n atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := svc.Reserve(ctx, "gone", "u"+strconv.FormatInt(n.Add(1), 10), "", 1); !errors.Is(err, flashgate.ErrSoldOut) {
				b.Errorf("got %v, want %v", err, flashgate.ErrSoldOut)
				return
			}
		}
	})
}

// TestReserveBatches sends a crowd — some buyers twice — with one script
// call of the sale out at a time, so that reserves wait and go in batches
// (lua.ReserveMany), and wants what one call per reserve gives: the stock
// sold exactly, to distinct buyers, a repeat buyer told their order, and
// fewer script calls than reserves.
func TestReserveBatches(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     inventory.Config
		batched bool
	}{
		{"one call at a time", inventory.Config{ReserveCallsInFlight: 1}, true},
		{"two calls, batches of 8", inventory.Config{MaxReserveBatch: 8}, true},
		{"no batching", inventory.Config{MaxReserveBatch: 1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, rdb := newRedis(t)
			tc.cfg.Logger = quiet()
			svc := inventory.New(rdb, tc.cfg)
			ctx := context.Background()
			const attempts, buyers, total = 3000, 2000, 500
			prepSale(t, rdb, "b", total, 1, "open")
			before := redistest.Commands(t, rdb)["evalsha"].Calls
			var mu sync.Mutex
			won := map[string]string{} // user → order
			var sold, soldOut, again atomic.Int64
			var repeat []error
			run(attempts, 128, func(i int) {
				user := "user-" + strconv.Itoa(i%buyers)
				id, err := svc.Reserve(ctx, "b", user, "", 1)
				var pe *flashgate.PurchasedError
				switch {
				case err == nil:
					sold.Add(1)
					mu.Lock()
					if prev, ok := won[user]; ok {
						t.Errorf("user %s bought twice: %s and %s", user, prev, id)
					}
					won[user] = id
					mu.Unlock()
				case errors.Is(err, flashgate.ErrSoldOut):
					soldOut.Add(1)
				case errors.As(err, &pe):
					again.Add(1)
					mu.Lock()
					repeat = append(repeat, pe)
					mu.Unlock()
				default:
					t.Errorf("Reserve %s: %v", user, err)
				}
			})
			if sold.Load() != total || sold.Load()+soldOut.Load()+again.Load() != attempts {
				t.Errorf("outcomes: got %d sold, %d sold out, %d already purchased; want %d sold of %d", sold.Load(), soldOut.Load(), again.Load(), total, attempts)
			}
			for _, err := range repeat {
				pe := err.(*flashgate.PurchasedError)
				found := false
				for _, id := range won {
					found = found || id == pe.OrderID
				}
				if !found {
					t.Errorf("already purchased names order %s, which no buyer was given", pe.OrderID)
				}
			}
			if got := booked(t, rdb, "b"); got != total {
				t.Errorf("booked: got %d, want %d", got, total)
			}
			if n, _ := rdb.XLen(ctx, lua.OrdersKey("b")).Result(); n != total {
				t.Errorf("stream entries: got %d, want %d", n, total)
			}
			if n, _ := rdb.HLen(ctx, lua.BuyersKey("b")).Result(); n != total {
				t.Errorf("buyers: got %d, want %d", n, total)
			}
			scripts := redistest.Commands(t, rdb)["evalsha"].Calls - before
			t.Logf("%d reserves in %d script calls", attempts, scripts)
			if tc.batched && scripts >= attempts/2 {
				t.Errorf("script calls: got %d for %d reserves, want fewer than half (batches)", scripts, attempts)
			}
			if !tc.batched && scripts < attempts {
				t.Errorf("script calls: got %d for %d reserves, want one each", scripts, attempts)
			}
		})
	}
}

// entry reads a stream entry's fields (either form).
func entry(m redis.XMessage) lua.Entry {
	e, _ := lua.ReadEntry(m.Values)
	return e
}
