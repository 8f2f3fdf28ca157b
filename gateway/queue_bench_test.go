package gateway

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/flashgate/flashgate/lua"
)

// waitingEnv is a started fair queue with one pre-start entrant, bob, not
// admitted; it returns bob's token and ticket.
func waitingEnv(b testing.TB) (*env, string, string) {
	e, _ := fairEnvTB(b, 0)
	tok := token(b, "bob")
	r := do(e.s.Handler(), req{method: "POST", path: "/api/sales/fq/queue", token: tok})
	var st struct{ Ticket string }
	if r.StatusCode() != 201 || json.Unmarshal(r.Body(), &st) != nil {
		b.Fatalf("bob enters: got %d %s", r.StatusCode(), r.Body())
	}
	ctx := context.Background()
	if err := lua.QueueStart.Run(ctx, e.primary, lua.SaleKeys("fq")).Err(); err != nil {
		b.Fatal(err)
	}
	e.setState(b, "fq", "open")
	e.s.refreshState(ctx)
	return e, tok, st.Ticket
}

// BenchmarkQueueStatus is a waiting buyer's status poll: token, ticket and
// rank key checked, answered from the cache.
func BenchmarkQueueStatus(b *testing.B) {
	e, tok, ticket := waitingEnv(b)
	runBench(b, e.s.Handler(), benchCtx("GET", "/api/sales/fq/queue", tok, map[string]string{"X-Queue-Ticket": ticket}), 200)
}

// BenchmarkNotAdmitted is a purchase by a buyer not yet admitted, answered
// 409 not_admitted from the cache.
func BenchmarkNotAdmitted(b *testing.B) {
	e, tok, ticket := waitingEnv(b)
	runBench(b, e.s.Handler(), benchCtx("POST", "/api/sales/fq/orders", tok, map[string]string{"X-Queue-Ticket": ticket}), 409)
}
