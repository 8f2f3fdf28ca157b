package inventory_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"

	"github.com/flashgate/flashgate/inventory"
	"github.com/flashgate/flashgate/lua"
)

// holdEval is a go-redis hook that holds the first script call until hold
// returns. It sees the caller's context only without automatic pipelining
// (which would also end a call whose context ends while it waits for its
// batch).
type holdEval struct {
	once sync.Once
	hold func()
}

func (h *holdEval) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *holdEval) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); n == "evalsha" || n == "eval" {
			h.once.Do(h.hold)
		}
		return next(ctx, cmd)
	}
}

func (h *holdEval) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestHandlerShutdownInFlight starts the server's graceful shutdown while a
// reserve is between its request and its Redis call, as a SIGTERM of the
// inventory does mid-sale: the reserve must still happen and be answered
// 200 (it used to fail with the shutdown's cancelled context, a 503 the
// client does not retry), and the stream must hold the order.
func TestHandlerShutdownInFlight(t *testing.T) {
	srvRedis, rdb := newRedis(t)
	prepSale(t, rdb, "sd", 10, 1, "open")
	held := redis.NewClient(&redis.Options{Addr: srvRedis.Addr, ReadTimeout: 3 * time.Second})
	t.Cleanup(func() { _ = held.Close() })

	reqs := make(chan *fasthttp.RequestCtx, 1)
	holding := make(chan struct{})
	h := &holdEval{}
	h.hold = func() {
		rc := <-reqs
		close(holding)
		<-rc.Done() // closed once the server's Shutdown has begun
	}
	held.AddHook(h)
	handler := inventory.NewHandler(inventory.New(held, inventory.Config{Logger: quiet(), NoAutoPipeline: true}), inventory.HandlerConfig{Logger: quiet()})
	srv := &fasthttp.Server{Handler: func(rc *fasthttp.RequestCtx) {
		select {
		case reqs <- rc:
		default:
		}
		handler(rc)
	}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { _ = srv.Serve(ln); close(served) }()

	c, err := inventory.NewClient([]string{"http://" + ln.Addr().String()}, inventory.ClientConfig{Retries: -1})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		id  string
		err error
	}
	res := make(chan result, 1)
	go func() {
		id, err := c.Reserve(context.Background(), "sd", "u1", "", 1)
		res <- result{id, err}
	}()
	select {
	case <-holding:
	case r := <-res:
		t.Fatalf("reserve finished before it was held: %v", r.err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.ShutdownWithContext(sctx); err != nil {
		t.Errorf("shutdown: %v", err)
	}
	<-served
	r := <-res
	if r.err != nil {
		t.Fatalf("reserve in flight at shutdown: got %v, want an order", r.err)
	}
	if n := rdb.XLen(context.Background(), lua.OrdersKey("sd")).Val(); n != 1 {
		t.Errorf("stream length: got %d, want 1", n)
	}
}
