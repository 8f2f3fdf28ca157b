package gateway

import (
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// fuzzStatuses are the only answers the router may give; 500 is absent on
// purpose: it would mean a recovered panic.
var fuzzStatuses = map[int]bool{
	200: true, 201: true, 304: true, 400: true, 401: true, 404: true,
	405: true, 409: true, 413: true, 429: true, 503: true,
}

// FuzzRouter feeds arbitrary methods, paths, headers and bodies to the
// handler: it must never panic and must answer one of fuzzStatuses.
func FuzzRouter(f *testing.F) {
	e := newEnv(f, func(c *Config) { c.Reserver = &fakeReserver{}; c.MaxSales = 500 })
	e.sale(f, "s1", 10, 15, true)
	e.sale(f, "s2", 10, 15, false)
	tok := token(f, "fuzzer")
	h := e.s.Handler()
	f.Add("GET", "/sales/s1", "Accept-Encoding: gzip\nIf-None-Match: *", []byte(nil), false)
	f.Add("POST", "/api/sales/s1/orders", "", []byte(`{"quantity":1}`), true)
	f.Add("POST", "/api/orders/abc/pay", "", []byte(nil), true)
	f.Add("GET", "/sales/..%2fadmin", "", []byte(nil), false)
	f.Fuzz(func(t *testing.T, method, path, headers string, body []byte, auth bool) {
		var rq fasthttp.Request
		rq.Header.SetMethod(method)
		rq.SetRequestURI(path)
		for _, line := range strings.Split(headers, "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && k != "" {
				rq.Header.Set(strings.TrimSpace(k), strings.TrimSpace(v))
			}
		}
		if auth {
			rq.Header.Set("Authorization", "Bearer "+tok)
		}
		rq.SetBody(body)
		var ctx fasthttp.RequestCtx
		ctx.Init(&rq, nil, nil)
		h(&ctx)
		if st := ctx.Response.StatusCode(); !fuzzStatuses[st] {
			t.Fatalf("%q %q: got status %d (%s)", method, path, st, ctx.Response.Body())
		}
	})
}
