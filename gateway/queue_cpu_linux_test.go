package gateway

import (
	"context"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// threadCPU is the calling thread's CPU time (Linux's RUSAGE_THREAD).
func threadCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(1, &ru); err != nil { // 1: RUSAGE_THREAD
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkQueueCPU measures the fair queue's cache-answered paths against
// the bare answer and a sold-out rejection in one run, each as CPU time
// per request of the thread serving it ("cpu-ns/op"): unlike ns/op that
// does not count the time other processes held the core, so the ratios
// hold on a shared machine. The queue paths run with the ticket of the
// entry ("first": rank key computed, ticket reissued) and with the
// reissued one (what a client sends from then on).
func BenchmarkQueueCPU(b *testing.B) {
	bare := []byte(`{"error":"sold_out"}`)
	bareH := func(ctx *fasthttp.RequestCtx) {
		ctx.SetStatusCode(409)
		ctx.SetContentType("application/json")
		ctx.Response.SetBodyRaw(bare)
	}
	sold := newEnv(b, func(c *Config) { c.UserRate = -1 })
	sold.sale(b, "s1", 1, 2, true)
	if r := do(sold.s.Handler(), req{method: "POST", path: "/api/sales/s1/orders", token: token(b, "winner")}); r.StatusCode() != 201 {
		b.Fatalf("warm-up purchase: got %d", r.StatusCode())
	}
	sold.s.refreshState(context.Background())
	e, tok, ticket := waitingEnv(b)
	k := rankTicket(b, e, tok, ticket)
	h := e.s.Handler()
	cases := []struct {
		name string
		h    fasthttp.RequestHandler
		ctx  *fasthttp.RequestCtx
		want int
	}{
		{"bare", bareH, benchCtx("POST", "/api/sales/s1/orders", "", nil), 409},
		{"soldout", sold.s.Handler(), benchCtx("POST", "/api/sales/s1/orders", token(b, "loser"), nil), 409},
		{"status", h, benchCtx("GET", "/api/sales/fq/queue", tok, map[string]string{"X-Queue-Ticket": k}), 200},
		{"status-first", h, benchCtx("GET", "/api/sales/fq/queue", tok, map[string]string{"X-Queue-Ticket": ticket}), 200},
		{"notadmitted", h, benchCtx("POST", "/api/sales/fq/orders", tok, map[string]string{"X-Queue-Ticket": k}), 409},
		{"notadmitted-first", h, benchCtx("POST", "/api/sales/fq/orders", tok, map[string]string{"X-Queue-Ticket": ticket}), 409},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			c.h(c.ctx)
			if got := c.ctx.Response.StatusCode(); got != c.want {
				b.Fatalf("got %d %s, want %d", got, c.ctx.Response.Body(), c.want)
			}
			b.ReportAllocs()
			b.ResetTimer()
			t0 := threadCPU(b)
			for i := 0; i < b.N; i++ {
				c.ctx.Response.Reset()
				c.h(c.ctx)
			}
			b.ReportMetric(float64(threadCPU(b)-t0)/float64(b.N), "cpu-ns/op")
		})
	}
}
