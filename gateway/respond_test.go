package gateway

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/flashgate/flashgate"
)

// TestAnswersFromTable checks that every sentinel of flashgate's one error
// table, wrapped or not, is answered with the table's status and a body
// naming its code, and that an unknown error is a 500 "internal".
func TestAnswersFromTable(t *testing.T) {
	for _, err := range append(flashgate.Errors(), errInternal) {
		status, code := flashgate.ErrorStatus(err)
		for _, e := range []error{err, fmt.Errorf("wrapped: %w", err)} {
			a := answerFor(e)
			var got struct{ Error string }
			if jerr := json.Unmarshal(a.body, &got); jerr != nil || a.status != status || got.Error != code {
				t.Errorf("answerFor(%v) = %d %s, want %d {\"error\":%q}", e, a.status, a.body, status, code)
			}
		}
	}
	if a := ansNoMethod; a.status != 405 || string(a.body) != `{"error":"method_not_allowed"}` {
		t.Errorf("ansNoMethod = %d %s, want 405 {\"error\":\"method_not_allowed\"}", a.status, a.body)
	}
	for v := verdictUnavailable; v <= verdictSoldOut; v++ {
		if verdictErrs[v] == nil || verdictAnswers[v].body == nil {
			t.Errorf("verdict %d has no sentinel or answer", v)
		}
	}
}

// TestCannedHeads: every answer's head, whether copied from newHead or
// set header by header, is byte for byte the head its headers set one by
// one on a fresh response give, in the order the hot path set them before
// heads were copied.
func TestCannedHeads(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.UserRate = 0.001; c.UserBurst = 1; c.Reserver = &fakeReserver{} })
	e.sale(t, "soon", 10, 15, false)
	e.sale(t, "open", 10, 15, true)
	h := e.s.Handler()
	page := do(h, req{method: "GET", path: "/sales/soon"})
	gzPage := do(h, req{method: "GET", path: "/sales/soon", header: map[string]string{"Accept-Encoding": "gzip"}})
	etag, gzEtag := string(page.Header.Peek("ETag")), string(gzPage.Header.Peek("ETag"))
	tok := token(t, "u1")
	pageCC := "public, max-age=1"
	kv := func(s ...string) []string { return s }
	tests := []struct {
		name    string
		r       req
		status  int
		ct      string
		headers []string // name, value, ... in the order they were set
	}{
		{"not started", req{method: "POST", path: "/api/sales/soon/orders", token: tok}, 409, "application/json", kv("Cache-Control", "no-store")},
		{"unauthorized", req{method: "POST", path: "/api/sales/soon/orders"}, 401, "application/json", kv("Cache-Control", "no-store")},
		{"admitted", req{method: "POST", path: "/api/sales/open/orders", token: tok}, 201, "application/json", kv("Cache-Control", "no-store")},
		{"rate limited", req{method: "POST", path: "/api/sales/open/orders", token: tok}, 429, "application/json", kv("Cache-Control", "no-store", "Retry-After", "1000")},
		{"no method", req{method: "GET", path: "/api/sales/open/orders"}, 405, "application/json", kv("Cache-Control", "no-store", "Allow", "POST")},
		{"api 404", req{method: "GET", path: "/api/nothing"}, 404, "application/json", kv("Cache-Control", "no-store")},
		{"api sale", req{method: "GET", path: "/api/sales/open"}, 200, "application/json", kv("Cache-Control", "public, max-age=1")},
		{"api no sale", req{method: "GET", path: "/api/sales/ghost"}, 404, "application/json", kv("Cache-Control", "no-store")},
		{"page", req{method: "GET", path: "/sales/soon"}, 200, "text/html; charset=utf-8", kv("Cache-Control", pageCC, "Etag", etag, "Vary", "Accept-Encoding")},
		{"page head", req{method: "HEAD", path: "/sales/soon"}, 200, "text/html; charset=utf-8", kv("Cache-Control", pageCC, "Etag", etag, "Vary", "Accept-Encoding")},
		{"page gzip", req{method: "GET", path: "/sales/soon", header: map[string]string{"Accept-Encoding": "gzip"}}, 200, "text/html; charset=utf-8",
			kv("Cache-Control", pageCC, "Etag", gzEtag, "Vary", "Accept-Encoding", "Content-Encoding", "gzip")},
		{"page 304", req{method: "GET", path: "/sales/soon", header: map[string]string{"If-None-Match": etag}}, 304, "", kv("Cache-Control", pageCC, "Etag", etag, "Vary", "Accept-Encoding")},
		{"page gzip 304", req{method: "GET", path: "/sales/soon", header: map[string]string{"Accept-Encoding": "gzip", "If-None-Match": gzEtag}}, 304, "",
			kv("Cache-Control", pageCC, "Etag", gzEtag, "Vary", "Accept-Encoding")},
		{"404 page", req{method: "GET", path: "/sales/nowhere"}, 404, "text/html; charset=utf-8", kv("Cache-Control", "no-store")},
		{"404 elsewhere", req{method: "GET", path: "/nowhere"}, 404, "application/json", kv("Cache-Control", "no-store")},
	}
	var ctx fasthttp.RequestCtx
	var rq fasthttp.Request
	ctx.Init(&rq, nil, nil)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx.Request.Reset()
			ctx.Response.Reset() // as the server does between requests
			tc.r.request(&ctx.Request)
			h(&ctx)
			var ref fasthttp.ResponseHeader
			ref.SetStatusCode(tc.status)
			if tc.ct != "" {
				ref.SetContentType(tc.ct)
			}
			for i := 0; i+1 < len(tc.headers); i += 2 {
				ref.SetCanonical([]byte(tc.headers[i]), []byte(tc.headers[i+1]))
			}
			ref.SetContentLength(len(ctx.Response.Body()))
			ctx.Response.Header.SetContentLength(len(ctx.Response.Body()))
			ref.Set("Date", "x")
			ctx.Response.Header.Set("Date", "x")
			if got, want := ctx.Response.Header.String(), ref.String(); got != want {
				t.Fatalf("got head\n%s\nwant\n%s", got, want)
			}
		})
	}
}
