package gateway

import (
	"context"
	"strconv"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/lua"
)

// The benchmarks drive the handler in process on one reused RequestCtx, as
// a keep-alive connection does, so their ratios to BenchmarkBareFasthttp
// show what the gateway's own work costs.

func benchCtx(method, path, tok string, header map[string]string) *fasthttp.RequestCtx {
	var rq fasthttp.Request
	rq.Header.SetMethod(method)
	rq.SetRequestURI(path)
	if tok != "" {
		rq.Header.Set("Authorization", "Bearer "+tok)
	}
	for k, v := range header {
		rq.Header.Set(k, v)
	}
	ctx := &fasthttp.RequestCtx{}
	ctx.Init(&rq, nil, nil)
	return ctx
}

func runBench(b *testing.B, h fasthttp.RequestHandler, ctx *fasthttp.RequestCtx, want int) {
	b.Helper()
	h(ctx)
	if got := ctx.Response.StatusCode(); got != want {
		b.Fatalf("got %d %s, want %d", got, ctx.Response.Body(), want)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ctx.Response.Reset()
		h(ctx)
	}
}

// BenchmarkBareFasthttp is the floor: a handler writing a constant.
func BenchmarkBareFasthttp(b *testing.B) {
	body := []byte(`{"error":"sold_out"}`)
	h := func(ctx *fasthttp.RequestCtx) {
		ctx.SetStatusCode(409)
		ctx.SetContentType("application/json")
		ctx.Response.SetBodyRaw(body)
	}
	runBench(b, h, benchCtx("POST", "/api/sales/s1/orders", "", nil), 409)
}

// BenchmarkSoldOut is a purchase of a sold-out sale with a cached token.
func BenchmarkSoldOut(b *testing.B) {
	e := newEnv(b, func(c *Config) { c.UserRate = -1 })
	e.sale(b, "s1", 1, 2, true)
	h := e.s.Handler()
	if r := do(h, req{method: "POST", path: "/api/sales/s1/orders", token: token(b, "winner")}); r.StatusCode() != 201 {
		b.Fatalf("warm-up purchase: got %d", r.StatusCode())
	}
	e.s.refreshState(context.Background())
	runBench(b, h, benchCtx("POST", "/api/sales/s1/orders", token(b, "loser"), nil), 409)
}

// BenchmarkItemPage serves the cached gzip item page.
func BenchmarkItemPage(b *testing.B) {
	e := newEnv(b, nil)
	e.sale(b, "s1", 10, 15, true)
	runBench(b, e.s.Handler(), benchCtx("GET", "/sales/s1", "", map[string]string{"Accept-Encoding": "gzip"}), 200)
}

// BenchmarkPurchase is an admitted purchase by a new user each time: token
// verification, rate limiters, admission and the Reserve script on a real
// redis-server.
func BenchmarkPurchase(b *testing.B) {
	e := newEnv(b, func(c *Config) { c.UserRate = -1; c.SaleRate = -1 })
	e.sale(b, "s1", 1<<40, 1<<41, true)
	h := e.s.Handler()
	toks := make([]string, b.N+1)
	for i := range toks {
		toks[i] = token(b, "u"+strconv.Itoa(i))
	}
	ctx := benchCtx("POST", "/api/sales/s1/orders", toks[0], nil)
	h(ctx)
	if got := ctx.Response.StatusCode(); got != 201 {
		b.Fatalf("got %d %s, want 201", got, ctx.Response.Body())
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ctx.Request.Header.Set("Authorization", "Bearer "+toks[i+1])
		ctx.Response.Reset()
		h(ctx)
		if ctx.Response.StatusCode() != 201 {
			b.Fatalf("purchase %d: got %d %s", i, ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
}

// constReserver admits everything with one order id: it allocates nothing,
// so a benchmark's allocations are the gateway's own.
type constReserver struct{}

func (constReserver) Reserve(ctx context.Context, saleID, userID, variant string, qty int64) (string, error) {
	return "o-1", nil
}

// benchBuyers is how many distinct buyers BenchmarkPurchaseGateway cycles
// through (its per-user limiter then holds that many buckets).
const benchBuyers = 1 << 16

// BenchmarkPurchaseGateway is the gateway's own share of an admitted
// purchase by a new buyer each time, with the default per-user and per-sale
// limits and a Reserver that does nothing: bearer check, cached state,
// token verification, both limiters, admission, the 201 and the metrics.
func BenchmarkPurchaseGateway(b *testing.B) {
	e := newEnv(b, func(c *Config) { c.Reserver = constReserver{}; c.SaleRate = 1e12 })
	e.sale(b, "s1", 1<<40, 1<<41, true)
	h := e.s.Handler()
	auth := make([]string, benchBuyers)
	for i := range auth {
		auth[i] = "Bearer " + token(b, "buyer-"+strconv.Itoa(i))
	}
	ctx := benchCtx("POST", "/api/sales/s1/orders", "", nil)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ctx.Request.Header.Set("Authorization", auth[i%benchBuyers])
		ctx.Response.Reset()
		h(ctx)
		if ctx.Response.StatusCode() != 201 && ctx.Response.StatusCode() != 429 {
			b.Fatalf("purchase %d: got %d %s", i, ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
}

// twentyVariants is a 20-variant sale's variants of n units each.
func twentyVariants(n int64) []flashgate.Variant {
	vs := make([]flashgate.Variant, 20)
	for i := range vs {
		id := "V" + strconv.Itoa(10+i)
		vs[i] = flashgate.Variant{ID: id, Name: "Size " + id, Total: n}
	}
	return vs
}

// BenchmarkVariantPaths runs the sold-out and purchase paths of a sale of
// one stock and of a 20-variant sale in one run, so their ratios hold on a
// noisy machine: the whole sale sold out, the last variant sold out while
// the others sell (answered from the cache), and an admitted purchase
// naming the last variant (Reserver doing nothing, as in
// BenchmarkPurchaseGateway).
func BenchmarkVariantPaths(b *testing.B) {
	e := newEnv(b, func(c *Config) { c.Reserver = constReserver{}; c.SaleRate = 1e12; c.UserRate = -1 })
	e.sale(b, "one-out", 1, 2, true)
	e.variantSale(b, "v20-out", twentyVariants(1), map[string]int64{})
	e.sale(b, "one", 1<<40, 1<<41, true)
	vs := twentyVariants(1 << 30)
	e.variantSale(b, "v20", vs, map[string]int64{"V29": 1 << 30})
	e.variantSale(b, "v20-buy", vs, map[string]int64{})
	ctx := context.Background()
	for _, id := range []string{"one-out", "v20-out"} {
		if err := e.primary.HSet(ctx, lua.SaleKey(id), lua.FieldBooked, 1<<30).Err(); err != nil {
			b.Fatal(err)
		}
	}
	e.s.refreshState(ctx)
	h := e.s.Handler()
	tok := token(b, "loser")
	bodyCtx := func(path, body string) *fasthttp.RequestCtx {
		c := benchCtx("POST", path, tok, nil)
		c.Request.SetBodyString(body)
		return c
	}
	b.Run("sold-out/one-stock", func(b *testing.B) {
		runBench(b, h, bodyCtx("/api/sales/one-out/orders", ``), 409)
	})
	b.Run("sold-out/20-variants", func(b *testing.B) {
		runBench(b, h, bodyCtx("/api/sales/v20-out/orders", `{"variant":"V29"}`), 409)
	})
	b.Run("variant-sold-out/20-variants", func(b *testing.B) {
		runBench(b, h, bodyCtx("/api/sales/v20/orders", `{"variant":"V29"}`), 409)
	})
	auth := make([]string, benchBuyers/16)
	for i := range auth {
		auth[i] = "Bearer " + token(b, "buyer-"+strconv.Itoa(i))
	}
	buy := func(b *testing.B, path, body string) {
		c := bodyCtx(path, body)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			c.Request.Header.Set("Authorization", auth[i%len(auth)])
			c.Response.Reset()
			h(c)
			if c.Response.StatusCode() != 201 {
				b.Fatalf("purchase %d: got %d %s", i, c.Response.StatusCode(), c.Response.Body())
			}
		}
	}
	b.Run("purchase/one-stock", func(b *testing.B) { buy(b, "/api/sales/one/orders", `{"quantity":1}`) })
	b.Run("purchase/20-variants", func(b *testing.B) { buy(b, "/api/sales/v20-buy/orders", `{"quantity":1,"variant":"V29"}`) })
}
