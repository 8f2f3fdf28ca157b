package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/lua"
)

var testSecret = []byte("test-secret-for-the-gateway")

// luaReserver is a tiny Reserver that runs lua.Reserve on the primary, as
// the inventory tier does.
type luaReserver struct {
	c     redis.UniversalClient
	n     atomic.Int64
	calls atomic.Int64
}

func (r *luaReserver) Reserve(ctx context.Context, saleID, userID, variant string, qty int64) (string, error) {
	r.calls.Add(1)
	id := "o" + strconv.FormatInt(r.n.Add(1), 10)
	args := []any{id, userID, qty, time.Now().UnixMilli(), saleID}
	if variant != "" {
		// No bucket, no spill ('' each), then the variant.
		args = append(args, "", "", variant)
	}
	res, err := lua.Reserve.Run(ctx, r.c, lua.ReserveKeys(saleID), args...).Slice()
	if err != nil {
		return "", fmt.Errorf("reserving: %w: %v", flashgate.ErrUnavailable, err)
	}
	code, _ := res[0].(int64)
	oid, _ := res[1].(string)
	switch code {
	case lua.ReserveOK:
		return oid, nil
	case lua.ReserveNoSale:
		return "", flashgate.ErrNotFound
	case lua.ReserveNotStarted:
		return "", flashgate.ErrNotStarted
	case lua.ReserveClosed:
		return "", flashgate.ErrClosed
	case lua.ReserveSoldOut:
		return "", flashgate.ErrSoldOut
	case lua.ReservePurchased:
		return "", &flashgate.PurchasedError{OrderID: oid}
	case lua.ReserveBadVariant:
		return "", &flashgate.FieldError{Field: "variant", Reason: "not a variant of the sale"}
	default:
		return "", flashgate.ErrBadRequest
	}
}

// fakeReserver admits everything without Redis, or answers err.
type fakeReserver struct {
	n       atomic.Int64
	err     error
	variant atomic.Pointer[string] // the last call's
}

func (r *fakeReserver) Reserve(ctx context.Context, saleID, userID, variant string, qty int64) (string, error) {
	n := r.n.Add(1)
	r.variant.Store(&variant)
	if r.err != nil {
		return "", r.err
	}
	return "f" + strconv.FormatInt(n, 10), nil
}

// fakeCatalog is a Catalog in a map.
type fakeCatalog struct {
	mu    sync.Mutex
	sales map[string]flashgate.Sale
	calls atomic.Int64
}

func (c *fakeCatalog) Sale(ctx context.Context, id string) (flashgate.Sale, error) {
	c.calls.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.sales[id]
	if !ok {
		return flashgate.Sale{}, flashgate.ErrNotFound
	}
	return s, nil
}

func (c *fakeCatalog) put(s flashgate.Sale) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sales == nil {
		c.sales = map[string]flashgate.Sale{}
	}
	c.sales[s.ID] = s
}

// fakeOrders is an Orders service in a map.
type fakeOrders struct {
	mu     sync.Mutex
	orders map[string]flashgate.Order
}

func (o *fakeOrders) get(id, user string) (flashgate.Order, error) {
	ord, ok := o.orders[id]
	if !ok || ord.UserID != user {
		return flashgate.Order{}, fmt.Errorf("order %s: %w", id, flashgate.ErrNotFound)
	}
	return ord, nil
}

func (o *fakeOrders) Order(ctx context.Context, id, user string) (flashgate.Order, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.get(id, user)
}

func (o *fakeOrders) Pay(ctx context.Context, id, user string) (flashgate.Order, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	ord, err := o.get(id, user)
	if err != nil {
		return ord, err
	}
	if !ord.Status.Live() {
		return ord, fmt.Errorf("paying: %w", flashgate.ErrNotPayable)
	}
	ord.Status = flashgate.StatusPaid
	o.orders[id] = ord
	return ord, nil
}

func (o *fakeOrders) Cancel(ctx context.Context, id, user string) (flashgate.Order, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	ord, err := o.get(id, user)
	if err != nil {
		return ord, err
	}
	ord.Status = flashgate.StatusCancelled
	o.orders[id] = ord
	return ord, nil
}

// counter is a go-redis hook counting the commands a client sends, less
// the handshake of new connections (HELLO, CLIENT SETINFO).
type counter struct{ n atomic.Int64 }

func counted(cmd redis.Cmder) bool {
	name := cmd.Name()
	return name != "hello" && name != "client"
}

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if counted(cmd) {
			c.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if counted(cmd) {
				c.n.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

// env is one gateway under test with its Redis and fakes.
type env struct {
	s        *Server
	primary  *redis.Client
	redis    *redistest.Server
	catalog  *fakeCatalog
	orders   *fakeOrders
	reserver *luaReserver
	reg      *prometheus.Registry
}

// newEnv starts a redis-server and builds a gateway on it; mod adjusts the
// config. The background goroutines are not started: tests drive
// refreshState and flush themselves.
func newEnv(t testing.TB, mod func(*Config)) *env {
	t.Helper()
	rs := redistest.Start(t)
	c := rs.Client(t)
	e := &env{
		primary:  c,
		redis:    rs,
		catalog:  &fakeCatalog{},
		orders:   &fakeOrders{orders: map[string]flashgate.Order{}},
		reserver: &luaReserver{c: c},
		reg:      prometheus.NewRegistry(),
	}
	cfg := Config{
		Primary:       c,
		Reserver:      e.reserver,
		Catalog:       e.catalog,
		Orders:        e.orders,
		JWTSecret:     testSecret,
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
		Metrics:       e.reg,
		ShutdownDelay: -1,
	}
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	e.s = s
	return e
}

// sale prepares a sale in Redis (and the catalog): total units, cap count,
// open or not.
func (e *env) sale(t testing.TB, id string, total, count int64, open bool) {
	t.Helper()
	ctx := context.Background()
	if err := lua.Prepare.Run(ctx, e.primary, lua.SaleKeys(id),
		total, count, 1, 1999).Err(); err != nil {
		t.Fatalf("prepare: %v", err)
	}
	if open {
		e.setState(t, id, "open")
	}
	starts := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	e.catalog.put(flashgate.Sale{ID: id, Name: "Widget <" + id + ">", PriceCents: 1999, Total: total, StartsAt: &starts})
}

func (e *env) setState(t testing.TB, id, state string) {
	t.Helper()
	if err := lua.SetState.Run(context.Background(), e.primary, lua.SaleKeys(id), state).Err(); err != nil {
		t.Fatalf("set state: %v", err)
	}
}

// token mints an HS256 buyer token for user.
func token(t testing.TB, user string) string {
	t.Helper()
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.RegisteredClaims{
		Subject:   user,
		ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour)),
	}).SignedString(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// req is one request for do.
type req struct {
	method, path, body string
	token              string // sent as a bearer token when set
	header             map[string]string
}

// request fills rq from r.
func (r req) request(rq *fasthttp.Request) {
	rq.Header.SetMethod(r.method)
	rq.SetRequestURI(r.path)
	if r.token != "" {
		rq.Header.Set("Authorization", "Bearer "+r.token)
	}
	for k, v := range r.header {
		rq.Header.Set(k, v)
	}
	if r.body != "" {
		rq.SetBodyString(r.body)
	}
}

// do runs r through h and returns a copy of the response.
func do(h fasthttp.RequestHandler, r req) *fasthttp.Response {
	var rq fasthttp.Request
	r.request(&rq)
	var ctx fasthttp.RequestCtx
	ctx.Init(&rq, nil, nil)
	h(&ctx)
	resp := &fasthttp.Response{}
	ctx.Response.CopyTo(resp)
	return resp
}

func errCode(r *fasthttp.Response) string {
	b := r.Body()
	const p = `{"error":"`
	if len(b) < len(p) || string(b[:len(p)]) != p {
		return ""
	}
	b = b[len(p):]
	for i, c := range b {
		if c == '"' {
			return string(b[:i])
		}
	}
	return ""
}

var errTest = errors.New("test: boom")

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// cmdStats returns INFO commandstats as command → calls.
func cmdStats(t testing.TB, c *redis.Client) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for cmd, st := range redistest.Commands(t, c) {
		out[cmd] = st.Calls
	}
	return out
}

// serveLoopback serves e's gateway on a free loopback port until the test
// ends and returns the address.
func (e *env) serveLoopback(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = e.s.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = e.s.Shutdown(ctx)
	})
	return ln.Addr().String()
}
