package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/flashgate/flashgate/lua"
)

// waitingEnv is a started fair queue with one pre-start entrant, bob, not
// admitted; it returns bob's token and ticket. mods change the Config
// further. No rate limit applies: a benchmark's millions of purchases a
// second would otherwise measure 429s.
func waitingEnv(b testing.TB, mods ...func(*Config)) (*env, string, string) {
	e, _ := fairEnvTB(b, 0, append([]func(*Config){func(c *Config) { c.SaleRate = -1 }}, mods...)...)
	tok := token(b, "bob")
	r := do(e.s.Handler(), req{method: "POST", path: "/api/sales/fq/queue", token: tok})
	var st struct{ Ticket string }
	if r.StatusCode() != 201 || json.Unmarshal(r.Body(), &st) != nil {
		b.Fatalf("bob enters: got %d %s", r.StatusCode(), r.Body())
	}
	ctx := context.Background()
	if err := lua.QueueStart.Run(ctx, e.primary, lua.SaleKeys("fq"), strings.Repeat("ab", 32)).Err(); err != nil {
		b.Fatal(err)
	}
	e.setState(b, "fq", "open")
	e.s.refreshState(ctx)
	return e, tok, st.Ticket
}

// rankTicket is the ticket a status poll with ticket reissues (its "k"
// form, carrying the rank key), as a client uses it from then on.
func rankTicket(b testing.TB, e *env, tok, ticket string) string {
	b.Helper()
	r := do(e.s.Handler(), req{method: "GET", path: "/api/sales/fq/queue", token: tok, header: map[string]string{"X-Queue-Ticket": ticket}})
	k := string(r.Header.Peek("X-Queue-Ticket"))
	if r.StatusCode() != 200 || len(k) < 2 || k[0] != 'k' {
		b.Fatalf("first poll: got %d %s with ticket %q, want 200 and a k ticket", r.StatusCode(), r.Body(), k)
	}
	return k
}

// BenchmarkQueueStatus is a waiting buyer's status poll with the ticket
// the first poll after the start reissued: token and ticket checked,
// answered from the cache.
func BenchmarkQueueStatus(b *testing.B) {
	e, tok, ticket := waitingEnv(b)
	ctx := benchCtx("GET", "/api/sales/fq/queue", tok, map[string]string{"X-Queue-Ticket": rankTicket(b, e, tok, ticket)})
	runBench(b, e.s.Handler(), ctx, 200)
	wantLast(b, ctx, 200, `"state":"waiting"`)
}

// BenchmarkQueueStatusShort is BenchmarkQueueStatus with the short form of
// the same ticket ("<entry>.<user MAC>", the rank key carried, not bound to
// the token): the token's claims read and the user MAC checked, the bound
// form reissued. Its ratio to BenchmarkQueueStatus is what the bound form
// saves, its ratio to BenchmarkQueueStatusFirst what carrying the rank key
// saves (queueedge/ticket.go's header).
func BenchmarkQueueStatusShort(b *testing.B) {
	e, tok, ticket := waitingEnv(b)
	bound := rankTicket(b, e, tok, ticket)
	parts := strings.Split(bound, ".")
	if len(parts) != 4 {
		b.Fatalf("reissued ticket %q: got %d parts, want the bound form's 4", bound, len(parts))
	}
	ctx := benchCtx("GET", "/api/sales/fq/queue", tok, map[string]string{"X-Queue-Ticket": parts[0] + "." + parts[1]})
	runBench(b, e.s.Handler(), ctx, 200)
	wantLast(b, ctx, 200, `"state":"waiting"`)
}

// BenchmarkQueueStatusFirst is a waiting buyer's status poll with the
// ticket of their entry: token, ticket and rank key checked, and the
// ticket reissued with the rank key.
func BenchmarkQueueStatusFirst(b *testing.B) {
	e, tok, ticket := waitingEnv(b)
	ctx := benchCtx("GET", "/api/sales/fq/queue", tok, map[string]string{"X-Queue-Ticket": ticket})
	runBench(b, e.s.Handler(), ctx, 200)
	wantLast(b, ctx, 200, `"state":"waiting"`)
}

// BenchmarkNotAdmitted is a purchase by a buyer not yet admitted, answered
// 409 not_admitted from the cache, with the reissued ticket.
func BenchmarkNotAdmitted(b *testing.B) {
	e, tok, ticket := waitingEnv(b)
	ctx := benchCtx("POST", "/api/sales/fq/orders", tok, map[string]string{"X-Queue-Ticket": rankTicket(b, e, tok, ticket)})
	runBench(b, e.s.Handler(), ctx, 409)
	wantLast(b, ctx, 409, `"error":"not_admitted"`)
}

// BenchmarkNotAdmittedFirst is BenchmarkNotAdmitted with the ticket of the
// entry (the rank key computed, the ticket reissued).
func BenchmarkNotAdmittedFirst(b *testing.B) {
	e, tok, ticket := waitingEnv(b)
	ctx := benchCtx("POST", "/api/sales/fq/orders", tok, map[string]string{"X-Queue-Ticket": ticket})
	runBench(b, e.s.Handler(), ctx, 409)
	wantLast(b, ctx, 409, `"error":"not_admitted"`)
}

// wantLast fails a benchmark whose last answer was not the one measured.
func wantLast(b *testing.B, ctx *fasthttp.RequestCtx, status int, body string) {
	b.Helper()
	if got := ctx.Response.StatusCode(); got != status || !bytes.Contains(ctx.Response.Body(), []byte(body)) {
		b.Fatalf("last answer: got %d %s, want %d with %s", got, ctx.Response.Body(), status, body)
	}
}
