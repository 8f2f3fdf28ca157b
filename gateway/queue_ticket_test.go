package gateway

import (
	"context"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/lua"
)

// setFrontier writes a fair queue's admitted and expired frontiers into the
// sale hash (as the leader's QueueAdvance does) and refreshes the cache.
func setFrontier(t *testing.T, e *env, k int64, theta string, exp int64, etheta string) {
	t.Helper()
	ctx := context.Background()
	if err := e.primary.HSet(ctx, lua.SaleKey("fq"), lua.FieldQAdmitted, k, lua.FieldQTheta, theta,
		lua.FieldQExpired, exp, lua.FieldQETheta, etheta).Err(); err != nil {
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
	if code != 200 || !strings.HasPrefix(k, "k") || len(k) != 1+rankEntryB64+1+ticketMACB64 {
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
	rank := flashgate.QueueRank(seed, "fq", "bob")
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
	if err := e.primary.HSet(ctx, lua.SaleKey("fq"), lua.FieldQSeed, newSeed, lua.FieldQAdmitted, 0, lua.FieldQTheta, "",
		lua.FieldQExpired, 0, lua.FieldQETheta, "").Err(); err != nil {
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
	setFrontier(t, e, 1, flashgate.QueueRank(seed, "fq", "bob"), 0, "")
	code, body, bought := buy(k)
	if code != 201 || !strings.HasPrefix(bought, "bk") {
		t.Fatalf("bob buys when admitted: got %d %s, ticket %q; want 201 and a bk ticket", code, body, bought)
	}
	r := do(h, req{method: "GET", path: "/api/sales/fq/queue", token: tok, header: map[string]string{"X-Queue-Ticket": bought}})
	if r.StatusCode() != 200 || !strings.Contains(string(r.Body()), `"state":"purchased"`) {
		t.Errorf("status with the purchased ticket: got %d %s, want purchased", r.StatusCode(), r.Body())
	}
}
