package inventory_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"unicode/utf8"

	"github.com/oklog/ulid/v2"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/inventory"
	"github.com/flashgate/flashgate/lua"
)

// killable is a TCP listener whose kill drops every accepted connection
// with a reset, as the death of the inventory process does.
type killable struct {
	net.Listener
	mu    sync.Mutex
	conns []*net.TCPConn
}

func (k *killable) Accept() (net.Conn, error) {
	c, err := k.Listener.Accept()
	if err == nil {
		k.mu.Lock()
		k.conns = append(k.conns, c.(*net.TCPConn))
		k.mu.Unlock()
	}
	return c, err
}

func (k *killable) kill() {
	_ = k.Listener.Close()
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, c := range k.conns {
		_ = c.SetLinger(0)
		_ = c.Close()
	}
}

// serveTCP serves svc on addr ("127.0.0.1:0" for any port) until the
// returned listener is killed or the test ends.
func serveTCP(t *testing.T, svc *inventory.Service, addr string) *killable {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	k := &killable{Listener: ln}
	srv := &fasthttp.Server{Handler: inventory.NewHandler(svc, inventory.HandlerConfig{Logger: quiet()})}
	done := make(chan struct{})
	go func() { _ = srv.Serve(k); close(done) }()
	t.Cleanup(func() { k.kill(); _ = srv.Shutdown(); <-done })
	return k
}

// TestClientInventoryRestart kills the inventory's listener and its
// keep-alive connections between two calls, as a restart does, and starts
// another on the same address: the next reserve succeeds (it used to be
// 503 unavailable), and so do many at once.
func TestClientInventoryRestart(t *testing.T) {
	_, rdb := newRedis(t)
	prepSale(t, rdb, "r", 100, 1, "open")
	svc := inventory.New(rdb, inventory.Config{Logger: quiet()})
	k := serveTCP(t, svc, "127.0.0.1:0")
	addr := k.Addr().String()
	c, err := inventory.NewClient([]string{"http://" + addr}, inventory.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// Many calls at once leave many keep-alive connections in the pool.
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.Reserve(ctx, "r", "before"+strconv.Itoa(i), "", 1); err != nil {
				t.Errorf("reserve before the restart: %v", err)
			}
		}()
	}
	wg.Wait()
	k.kill()
	serveTCP(t, svc, addr)
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.Reserve(ctx, "r", "after"+strconv.Itoa(i), "", 1); err != nil {
				t.Errorf("reserve after the restart: %v", err)
			}
		}()
	}
	wg.Wait()
	if n := rdb.XLen(ctx, lua.OrdersKey("r")).Val(); n != 40 {
		t.Errorf("stream length: got %d, want 40", n)
	}
}

// loseFirst is a connection whose first read of an answer fails after the
// answer arrived: the inventory reserved, the client never heard.
type loseFirst struct {
	net.Conn
	lose *atomic.Bool
}

func (l loseFirst) Read(p []byte) (int, error) {
	n, err := l.Conn.Read(p)
	if n > 0 && l.lose.CompareAndSwap(true, false) {
		_ = l.Conn.Close()
		return 0, io.ErrUnexpectedEOF
	}
	return n, err
}

// TestClientLostAnswer loses the answer of a reserve that succeeded: the
// client's retry gets the same order id back, and the stream holds that
// order exactly once. A second reserve of the same user is still refused.
func TestClientLostAnswer(t *testing.T) {
	_, rdb := newRedis(t)
	prepSale(t, rdb, "l", 10, 1, "open")
	svc := inventory.New(rdb, inventory.Config{Logger: quiet()})
	k := serveTCP(t, svc, "127.0.0.1:0")
	var lose atomic.Bool
	lose.Store(true)
	minted := ""
	c, err := inventory.NewClient([]string{"http://" + k.Addr().String()}, inventory.ClientConfig{
		Dial: func(addr string) (net.Conn, error) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				return nil, err
			}
			return loseFirst{conn, &lose}, nil
		},
		NewOrderID: func() string { minted = ulidNow(); return minted },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id, err := c.Reserve(ctx, "l", "u1", "", 1)
	if err != nil {
		t.Fatalf("Reserve with its first answer lost: %v", err)
	}
	if lose.Load() {
		t.Fatal("the first answer was not lost: the test proves nothing")
	}
	if id != minted {
		t.Errorf("order id: got %q, want the minted %q", id, minted)
	}
	msgs, err := rdb.XRange(ctx, lua.OrdersKey("l"), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 1 || entry(msgs[0]).Order != id {
		t.Errorf("stream: got %v, want order %s once", msgs, id)
	}
	var pe *flashgate.PurchasedError
	if _, err := c.Reserve(ctx, "l", "u1", "", 1); !errors.As(err, &pe) || pe.OrderID != id {
		t.Errorf("second reserve of u1: got %v, want already purchased with %s", err, id)
	}
}

// TestReserveOrderID checks the handler's order_id field: a malformed one
// is 400, and the same one twice is one reservation.
func TestReserveOrderID(t *testing.T) {
	_, rdb := newRedis(t)
	prepSale(t, rdb, "o", 10, 1, "open")
	svc := inventory.New(rdb, inventory.Config{Logger: quiet()})
	ctx := context.Background()
	if _, err := svc.ReserveOrder(ctx, "bad id!", "o", "u", "", 1); !errors.Is(err, flashgate.ErrBadRequest) {
		t.Errorf("ReserveOrder(bad id): got %v, want ErrBadRequest", err)
	}
	id := ulidNow()
	for i := 0; i < 2; i++ {
		got, err := svc.ReserveOrder(ctx, id, "o", "u", "", 1)
		if err != nil || got != id {
			t.Errorf("ReserveOrder #%d: got %q, %v, want %q", i+1, got, err, id)
		}
	}
	if n := rdb.XLen(ctx, lua.OrdersKey("o")).Val(); n != 1 {
		t.Errorf("stream length: got %d, want 1", n)
	}
}

func ulidNow() string { return ulid.Make().String() }

// TestClientBodyValidUTF8: a user id that is not valid UTF-8 (a JWT subject
// is any bytes) still goes out as valid JSON, the bad byte as U+FFFD, as
// encoding/json writes it; the client used to copy the byte raw.
func TestClientBodyValidUTF8(t *testing.T) {
	ln := fasthttputil.NewInmemoryListener()
	bodies := make(chan []byte, 8)
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		select {
		case bodies <- append([]byte(nil), ctx.PostBody()...):
		default:
		}
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"order_id":"o1"}`)
	}}
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Shutdown(); _ = ln.Close() }()
	c, err := inventory.NewClient([]string{"http://inventory.test:8080"}, inventory.ClientConfig{
		Dial: func(string) (net.Conn, error) { return ln.Dial() },
	})
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	_, _ = c.Reserve(context.Background(), "s1", "u\xff<", "", 1)
	b := <-bodies
	var req struct {
		UserID string `json:"user_id"`
	}
	if !utf8.Valid(b) || json.Unmarshal(b, &req) != nil || req.UserID != "u\ufffd<" {
		t.Errorf("request body: got %q, want valid UTF-8 JSON with user_id %q", b, "u\ufffd<")
	}
}

// TestClientRetriesOtherAddress: with one of two inventories down (its
// port refuses), every call succeeds with a single retry, because the
// retry goes to the address after the one that failed. The retry used to
// take its address from a counter shared by all calls, so it could go to
// the same dead inventory again (503 unavailable for the buyer).
func TestClientRetriesOtherAddress(t *testing.T) {
	_, rdb := newRedis(t)
	prepSale(t, rdb, "o", 100, 1, "open")
	svc := inventory.New(rdb, inventory.Config{Logger: quiet()})
	dead := serveTCP(t, svc, "127.0.0.1:0")
	live := serveTCP(t, svc, "127.0.0.1:0")
	dead.kill()
	c, err := inventory.NewClient([]string{"http://" + dead.Addr().String(), "http://" + live.Addr().String()},
		inventory.ClientConfig{Retries: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 10 {
		if _, err := c.Reserve(ctx, "o", "u"+strconv.Itoa(i), "", 1); err != nil {
			t.Errorf("reserve %d with one inventory down: %v", i, err)
		}
	}
	if n := rdb.XLen(ctx, lua.OrdersKey("o")).Val(); n != 10 {
		t.Errorf("stream length: got %d, want 10", n)
	}
}
