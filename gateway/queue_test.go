package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/fairqueue"
	"github.com/flashgate/flashgate/internal/testenv/testclock"
	"github.com/flashgate/flashgate/lua"
)

// fairEnv is a gateway with one fair sale whose queue is open.
func fairEnv(t *testing.T, maxnum int64) (*env, *testclock.Clock) { return fairEnvTB(t, maxnum) }

// fairEnvTB is fairEnv for benchmarks too; mods change the gateway's
// Config further.
func fairEnvTB(t testing.TB, maxnum int64, mods ...func(*Config)) (*env, *testclock.Clock) {
	t.Helper()
	clock := testclock.New(time.Now())
	e := newEnv(t, func(c *Config) {
		c.UserRate = -1
		c.Clock = clock
		for _, m := range mods {
			m(c)
		}
	})
	ctx := context.Background()
	if err := lua.Prepare.Run(ctx, e.primary, lua.SaleKeys("fq"), 10, 15, 1, 100, "", "fair").Err(); err != nil {
		t.Fatal(err)
	}
	if err := lua.QueueOpen.Run(ctx, e.primary, lua.SaleKeys("fq"), strings.Repeat("ab", 32), "00", maxnum, 60).Err(); err != nil {
		t.Fatal(err)
	}
	starts := clock.Now().Add(time.Minute)
	e.catalog.put(flashgate.Sale{ID: "fq", Name: "Fair", PriceCents: 100, Total: 10, StartsAt: &starts,
		Queue: flashgate.QueueFair, ChallengeMaxNumber: maxnum})
	e.s.refreshState(ctx)
	e.s.lookup([]byte("fq"))
	e.s.refreshState(ctx)
	return e, clock
}

// solution fetches a challenge and solves it; edit may change the payload
// before it is encoded.
func solution(t *testing.T, e *env, edit func(map[string]any)) string {
	t.Helper()
	return solutionFor(t, e, "fq", edit)
}

// solutionFor is solution for the challenge of sale.
func solutionFor(t *testing.T, e *env, sale string, edit func(map[string]any)) string {
	t.Helper()
	r := do(e.s.Handler(), req{method: "GET", path: "/api/sales/" + sale + "/challenge"})
	var c struct {
		Algorithm, Challenge, Salt, Signature string
		MaxNumber                             int64 `json:"maxnumber"`
	}
	if r.StatusCode() != 200 || json.Unmarshal(r.Body(), &c) != nil {
		t.Fatalf("challenge: got %d %s", r.StatusCode(), r.Body())
	}
	for n := int64(0); n <= c.MaxNumber; n++ {
		sum := sha256.Sum256([]byte(c.Salt + strconv.FormatInt(n, 10)))
		if hex.EncodeToString(sum[:]) != c.Challenge {
			continue
		}
		p := map[string]any{"algorithm": c.Algorithm, "challenge": c.Challenge, "number": n, "salt": c.Salt, "signature": c.Signature}
		if edit != nil {
			edit(p)
		}
		b, _ := json.Marshal(p)
		return `{"payload":"` + base64.StdEncoding.EncodeToString(b) + `"}`
	}
	t.Fatalf("no solution in 0..%d", c.MaxNumber)
	return ""
}

func TestQueueProofOfWork(t *testing.T) {
	e, clock := fairEnv(t, 200)
	enter := func(user, body string) (int, string) {
		r := do(e.s.Handler(), req{method: "POST", path: "/api/sales/fq/queue", token: token(t, user), body: body})
		return r.StatusCode(), string(r.Body())
	}
	used := solution(t, e, nil)
	if code, body := enter("alice", used); code != 201 || !strings.Contains(body, `"state":"prequeue"`) {
		t.Fatalf("alice enters: got %d %s, want 201 prequeue", code, body)
	}
	expired := solution(t, e, nil)
	cases := []struct {
		name, body string
		before     func()
	}{
		{name: "no payload", body: ""},
		{name: "not base64", body: `{"payload":"%%%"}`},
		{name: "used by alice", body: used},
		{name: "wrong number", body: solution(t, e, func(p map[string]any) { p["number"] = p["number"].(int64) + 1 })},
		{name: "other sale in the salt", body: solution(t, e, func(p map[string]any) {
			p["salt"] = strings.Replace(p["salt"].(string), "sale=fq", "sale=other", 1)
		})},
		{name: "forged signature", body: solution(t, e, func(p map[string]any) { p["signature"] = strings.Repeat("0", 64) })},
		{name: "other algorithm", body: solution(t, e, func(p map[string]any) { p["algorithm"] = "SHA-1" })},
		{name: "expired", body: expired, before: func() { clock.Add(fairqueue.ChallengeTTL + time.Second) }},
	}
	for _, c := range cases {
		if c.before != nil {
			c.before()
		}
		if code, body := enter("bob", c.body); code != 400 || !strings.Contains(body, "bad_request") {
			t.Errorf("%s: got %d %s, want 400 bad_request", c.name, code, body)
		}
	}
	if code, body := enter("bob", solution(t, e, nil)); code != 201 {
		t.Errorf("bob with a fresh solution: got %d %s, want 201", code, body)
	}
}

func TestQueueTicketAndCache(t *testing.T) {
	e, _ := fairEnv(t, 0)
	h := e.s.Handler()
	r := do(h, req{method: "POST", path: "/api/sales/fq/queue", token: token(t, "alice")})
	var st struct{ Ticket string }
	if r.StatusCode() != 201 || json.Unmarshal(r.Body(), &st) != nil || st.Ticket == "" {
		t.Fatalf("alice enters: got %d %s", r.StatusCode(), r.Body())
	}
	// The start; nobody admitted yet.
	ctx := context.Background()
	if err := lua.QueueStart.Run(ctx, e.primary, lua.SaleKeys("fq"), strings.Repeat("ab", 32)).Err(); err != nil {
		t.Fatal(err)
	}
	e.setState(t, "fq", "open")
	e.s.refreshState(ctx)

	c := &counter{}
	e.primary.AddHook(c)
	status := func(user, ticket string) (int, string) {
		r := do(h, req{method: "GET", path: "/api/sales/fq/queue", token: token(t, user), header: map[string]string{"X-Queue-Ticket": ticket}})
		return r.StatusCode(), string(r.Body())
	}
	if code, body := status("alice", st.Ticket); code != 200 || !strings.Contains(body, `"state":"waiting","position":1,"ahead":0,"admitted_position":0`) {
		t.Errorf("alice's status: got %d %s, want waiting at position 1", code, body)
	}
	if code, _ := status("bob", st.Ticket); code != 404 {
		t.Errorf("bob with alice's ticket: got %d, want 404 (a ticket is bound to its user)", code)
	}
	r = do(h, req{method: "POST", path: "/api/sales/fq/orders", token: token(t, "alice"), header: map[string]string{"X-Queue-Ticket": st.Ticket}})
	if r.StatusCode() != 409 || !strings.Contains(string(r.Body()), `{"error":"not_admitted","state":"waiting","position":1,"admitted_position":0}`) {
		t.Errorf("alice buys before admission: got %d %s, want 409 not_admitted at position 1", r.StatusCode(), r.Body())
	}
	if n := c.n.Load(); n != 0 {
		t.Errorf("status polls and a not-admitted answer sent %d Redis commands, want 0", n)
	}
}

// TestQueueAllocs: a status poll and a not-admitted answer allocate no more
// than the token's user id (as the purchase path does) with the entry's
// ticket (the rank key computed, the ticket reissued), and nothing with
// the reissued one (bound to the token: no claims read).
func TestQueueAllocs(t *testing.T) {
	e, tok, ticket := waitingEnv(t)
	h := e.s.Handler()
	k := rankTicket(t, e, tok, ticket)
	for _, c := range []struct {
		name, method, path, ticket string
		want                       int
		allocs                     float64
	}{
		{"status", "GET", "/api/sales/fq/queue", ticket, 200, 1},
		{"not admitted", "POST", "/api/sales/fq/orders", ticket, 409, 1},
		{"status, bound k ticket", "GET", "/api/sales/fq/queue", k, 200, 0},
		{"not admitted, bound k ticket", "POST", "/api/sales/fq/orders", k, 409, 0},
	} {
		ctx := benchCtx(c.method, c.path, tok, map[string]string{"X-Queue-Ticket": c.ticket})
		h(ctx)
		if ctx.Response.StatusCode() != c.want {
			t.Fatalf("%s: got %d %s", c.name, ctx.Response.StatusCode(), ctx.Response.Body())
		}
		// Under -race sync.Pool drops what it holds at random.
		if n := testing.AllocsPerRun(200, func() { ctx.Response.Reset(); h(ctx) }); n > c.allocs && !raceEnabled {
			t.Errorf("%s: %.1f allocations per request, want at most %.0f", c.name, n, c.allocs)
		}
	}
}
