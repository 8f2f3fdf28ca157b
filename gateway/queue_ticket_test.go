package gateway

import (
	"context"
	"encoding/hex"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/flashgate/flashgate/fairqueue"
	"github.com/flashgate/flashgate/gateway/queueedge"
	"github.com/flashgate/flashgate/internal/testenv/testclock"
	"github.com/flashgate/flashgate/lua"
)

// setFrontier writes a fair queue's admitted and expired frontiers into the
// sale hash (as the leader's QueueAdvance does) and refreshes the cache.
func setFrontier(t *testing.T, e *env, k int64, theta string, exp int64, etheta string) {
	t.Helper()
	ctx := context.Background()
	if err := e.primary.HSet(ctx, lua.SaleKey("fq"), lua.FieldQueueAdmitted, k, lua.FieldQueueThreshold, theta,
		lua.FieldQueueExpired, exp, lua.FieldQueueExpiredThreshold, etheta).Err(); err != nil {
		t.Fatal(err)
	}
	e.s.refreshState(ctx)
}

// nudge returns a rank key (hex) just above or below rank in its last
// byte: equal to it in every byte a "k" ticket carries.
func nudge(rank string, up bool) string {
	b, _ := hex.DecodeString(rank)
	if up {
		b[len(b)-1]++
	} else {
		b[len(b)-1]--
	}
	return hex.EncodeToString(b)
}

// TestQueueRankTicket: once the seed is revealed, a poll with the entry's
// ticket answers its "k" form in X-Queue-Ticket; with it the status is the
// same (judged from the rank key it carries, so no new ticket is issued),
// also where the carried prefix equals a threshold's; it is bound to its
// user and its seed; the old ticket keeps working.
func TestQueueRankTicket(t *testing.T) {
	e, tok, p := waitingEnv(t)
	h := e.s.Handler()
	poll := func(tok, ticket string) (int, string, string) {
		r := do(h, req{method: "GET", path: "/api/sales/fq/queue", token: tok, header: map[string]string{"X-Queue-Ticket": ticket}})
		body := string(r.Body())
		if i := strings.Index(body, `,"poll_after_ms"`); i >= 0 {
			body = body[:i] // jittered
		}
		return r.StatusCode(), body, string(r.Header.Peek("X-Queue-Ticket"))
	}
	code, pBody, k := poll(tok, p)
	if tt, ok := ticketFields(k); code != 200 || !ok || len(tt.entry) != 1+28+1+queueedge.TagLen || tt.entry[0] != 'k' {
		t.Fatalf("first poll: got %d %s, ticket %q; want 200 and a k ticket", code, pBody, k)
	}
	if code, body, again := poll(tok, k); code != 200 || body != pBody || again != "" {
		t.Errorf("poll with the k ticket: got %d %s, new ticket %q; want 200 %s and no new ticket", code, body, again, pBody)
	}
	if code, _, _ := poll(token(t, "carol"), k); code != 404 {
		t.Errorf("carol with bob's k ticket: got %d, want 404", code)
	}
	forged := []byte(k)
	forged[5] ^= 1 // a rank byte
	if code, _, _ := poll(tok, string(forged)); code != 404 {
		t.Errorf("bob's k ticket with another rank: got %d, want 404", code)
	}
	if code, body, _ := poll(tok, p); code != 200 || body != pBody {
		t.Errorf("poll with the entry's ticket: got %d %s, want 200 %s", code, body, pBody)
	}

	seed, _ := hex.DecodeString(strings.Repeat("ab", 32))
	rank := fairqueue.Rank(seed, "fq", "bob")
	cases := []struct {
		name      string
		k         int64
		theta     string
		e         int64
		etheta    string
		wantState string
	}{
		{"threshold below, same prefix", 1, nudge(rank, false), 0, "", `"state":"waiting"`},
		{"threshold his own rank key", 1, rank, 0, "", `"state":"admitted"`},
		{"threshold above, same prefix", 1, nudge(rank, true), 0, "", `"state":"admitted"`},
		{"threshold far above", 1, strings.Repeat("f", 64), 0, "", `"state":"admitted"`},
		{"expired threshold his own rank key", 1, strings.Repeat("f", 64), 1, rank, `"state":"expired"`},
		{"expired threshold below, same prefix", 1, strings.Repeat("f", 64), 1, nudge(rank, false), `"state":"admitted"`},
	}
	for _, c := range cases {
		setFrontier(t, e, c.k, c.theta, c.e, c.etheta)
		_, want, _ := poll(tok, p) // the full rank key's verdict
		if !strings.Contains(want, c.wantState) {
			t.Errorf("%s: with the entry's ticket got %s, want %s", c.name, want, c.wantState)
		}
		if code, got, _ := poll(tok, k); code != 200 || got != want {
			t.Errorf("%s: with the k ticket got %d %s, want 200 %s", c.name, code, got, want)
		}
	}

	// A queue opened again (its keys lost) has a new seed: a k ticket of
	// the old one is judged from the new rank key and reissued.
	ctx := context.Background()
	newSeed := strings.Repeat("cd", 32)
	if err := e.primary.HSet(ctx, lua.SaleKey("fq"), lua.FieldQueueSeed, newSeed, lua.FieldQueueAdmitted, 0, lua.FieldQueueThreshold, "",
		lua.FieldQueueExpired, 0, lua.FieldQueueExpiredThreshold, "").Err(); err != nil {
		t.Fatal(err)
	}
	e.s.refreshState(ctx)
	code, body, k2 := poll(tok, k)
	if code != 200 || !strings.HasPrefix(k2, "k") || k2 == k {
		t.Errorf("old seed's k ticket: got %d %s, new ticket %q; want 200 and another k ticket", code, body, k2)
	}
	if _, want, _ := poll(tok, p); body != want {
		t.Errorf("old seed's k ticket: got %s, want %s (the entry ticket's)", body, want)
	}
}

// TestQueueRankTicketPurchase: a not-admitted answer reissues the k ticket
// too, and an admitted buyer buys with it and gets its purchased form (the
// Reserver admits everything: the gateway's judgement is under test).
func TestQueueRankTicketPurchase(t *testing.T) {
	e, tok, p := waitingEnv(t, func(c *Config) { c.Reserver = constReserver{} })
	h := e.s.Handler()
	buy := func(ticket string) (int, string, string) {
		r := do(h, req{method: "POST", path: "/api/sales/fq/orders", token: tok, header: map[string]string{"X-Queue-Ticket": ticket}})
		return r.StatusCode(), string(r.Body()), string(r.Header.Peek("X-Queue-Ticket"))
	}
	code, body, k := buy(p)
	if code != 409 || !strings.Contains(body, "not_admitted") || !strings.HasPrefix(k, "k") {
		t.Fatalf("bob buys before admission: got %d %s, ticket %q; want 409 not_admitted and a k ticket", code, body, k)
	}
	if code, _, again := buy(k); code != 409 || again != "" {
		t.Errorf("again with the k ticket: got %d, new ticket %q; want 409 and none", code, again)
	}
	seed, _ := hex.DecodeString(strings.Repeat("ab", 32))
	setFrontier(t, e, 1, fairqueue.Rank(seed, "fq", "bob"), 0, "")
	code, body, bought := buy(k)
	if code != 201 || !strings.HasPrefix(bought, "bo-1~k") {
		t.Fatalf("bob buys when admitted: got %d %s, ticket %q; want 201 and a bo-1~k ticket", code, body, bought)
	}
	r := do(h, req{method: "GET", path: "/api/sales/fq/queue", token: tok, header: map[string]string{"X-Queue-Ticket": bought}})
	if r.StatusCode() != 200 || !strings.Contains(string(r.Body()), `"state":"purchased"`) || !strings.HasSuffix(string(r.Body()), `,"order_id":"o-1"}`) {
		t.Errorf("status with the purchased ticket: got %d %s, want purchased with order_id o-1", r.StatusCode(), r.Body())
	}
}

// ticketText is a ticket's entry and, in its bound form, exp.
type ticketText struct{ entry, exp string }

// ticketFields splits a ticket the gateway issued: "<entry>.<user MAC>",
// or bound, "<entry>.<user MAC>.<exp>.<token MAC>" (a MAC is 22 base64url
// characters; the "k" entry's rank key, 28).
func ticketFields(t string) (ticketText, bool) {
	f := strings.Split(t, ".")
	switch {
	case len(f) == 2 && len(f[1]) == 22:
		return ticketText{entry: f[0]}, f[0] != ""
	case len(f) == 4 && len(f[1]) == 22 && len(f[3]) == 22:
		return ticketText{entry: f[0], exp: f[2]}, f[0] != "" && f[2] != ""
	}
	return ticketText{}, false
}

// tokenExp is a token of user expiring at exp.
func tokenExp(t testing.TB, user string, exp time.Time) string {
	t.Helper()
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.RegisteredClaims{
		Subject: user, ExpiresAt: jwt.NewNumericDate(exp),
	}).SignedString(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestBoundTicket: the ticket a poll reissues is bound to the poll's
// token. With that token it is judged without reading the token's claims
// (a token that kept bob's signature but not his claims gets bob's place,
// on a poll and on a purchase while he waits, never a unit); with any
// other token, by its user MAC as before, and bound anew; past the
// token's exp, which it carries, nothing.
func TestBoundTicket(t *testing.T) {
	clock := testclock.New(time.Now())
	e, tok, p := waitingEnv(t, func(c *Config) { c.Clock = clock; c.Reserver = constReserver{} })
	h := e.s.Handler()
	call := func(method, tok, ticket string) (int, string, string) {
		path := "/api/sales/fq/queue"
		if method == "POST" {
			path = "/api/sales/fq/orders"
		}
		r := do(h, req{method: method, path: path, token: tok, header: map[string]string{"X-Queue-Ticket": ticket}})
		body := string(r.Body())
		if i := strings.Index(body, `,"poll_after_ms"`); i >= 0 {
			body = body[:i] // jittered
		}
		return r.StatusCode(), body, string(r.Header.Peek("X-Queue-Ticket"))
	}
	code, want, k := call("GET", tok, p)
	tt, ok := ticketFields(k)
	if code != 200 || !ok || tt.exp == "" || tt.entry[0] != 'k' {
		t.Fatalf("first poll: got %d %s, ticket %q; want 200 and a bound k ticket", code, want, k)
	}
	expAt, _ := strconv.ParseInt(tt.exp, 10, 64)

	dot := strings.LastIndexByte(tok, '.')
	garbled := tok[:strings.IndexByte(tok, '.')] + ".bm90IGpzb24" + tok[dot:] // payload "not json", bob's signature
	carol := token(t, "carol")
	tok2 := tokenExp(t, "bob", clock.Now().Add(2*time.Hour))
	for _, c := range []struct {
		name, method, tok, ticket string
		code                      int
		body                      string
		reissued                  bool
	}{
		{"poll, bound ticket", "GET", tok, k, 200, want, false},
		{"poll, bound ticket, bob's signature without his claims", "GET", garbled, k, 200, want, false},
		{"poll, entry ticket, bob's signature without his claims", "GET", garbled, p, 401, `{"error":"unauthorized"}`, false},
		{"buy, bound ticket, bob's signature without his claims", "POST", garbled, k, 409, `{"error":"not_admitted","state":"waiting"`, false},
		{"poll, bound ticket, carol's token", "GET", carol, k, 404, `{"error":"not_found"}`, false},
		{"poll, bound ticket, bob's next token", "GET", tok2, k, 200, want, true},
		{"buy, bound ticket, bob's next token", "POST", tok2, k, 409, `{"error":"not_admitted","state":"waiting"`, true},
	} {
		code, body, again := call(c.method, c.tok, c.ticket)
		if code != c.code || !strings.HasPrefix(body, c.body) || (again != "") != c.reissued {
			t.Errorf("%s: got %d %s, new ticket %q; want %d %s, new ticket %v", c.name, code, body, again, c.code, c.body, c.reissued)
		}
		if c.reissued {
			if code, body, none := call("GET", c.tok, again); code != 200 || body != want || none != "" {
				t.Errorf("%s, then with the ticket bound to it: got %d %s, new ticket %q; want 200 %s and none", c.name, code, body, none, want)
			}
		}
	}

	// A bound ticket altered in its exp or token MAC is judged by its user
	// MAC (and bound again as it was); in its entry, it is no ticket.
	i := strings.LastIndexByte(k, '.')
	for _, c := range []struct{ name, ticket string }{
		{"exp", k[:strings.LastIndexByte(k[:i], '.')+1] + strconv.FormatInt(expAt+1, 10) + k[i:]},
		{"token MAC", k[:i+1] + strings.Repeat("A", 22)},
	} {
		if code, body, again := call("GET", tok, c.ticket); code != 200 || body != want || again != k {
			t.Errorf("%s altered: got %d %s, new ticket %q; want 200 %s and %q", c.name, code, body, again, want, k)
		}
	}
	alt := []byte(k)
	alt[3] ^= 1
	if code, _, _ := call("GET", tok, string(alt)); code != 404 {
		t.Errorf("entry altered: got %d, want 404", code)
	}

	// Admitted, the bound ticket takes a purchase on to the signature
	// check: bob's signature without his claims buys nothing.
	seed, _ := hex.DecodeString(strings.Repeat("ab", 32))
	setFrontier(t, e, 1, fairqueue.Rank(seed, "fq", "bob"), 0, "")
	if code, body, _ := call("POST", garbled, k); code != 401 {
		t.Errorf("admitted, bob's signature without his claims: got %d %s, want 401", code, body)
	}

	// Past the token's exp the ticket bound to it answers nothing either.
	clock.Set(time.Unix(expAt, 0))
	if code, body, _ := call("GET", tok, k); code != 401 {
		t.Errorf("poll at the token's exp: got %d %s, want 401", code, body)
	}
}
