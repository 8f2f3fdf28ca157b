package gateway

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/testclock"
	"github.com/flashgate/flashgate/lua"
)

// TestChallengeBeforeOpening: no challenge before the queue opens, so none
// can be solved at leisure and spent at the opening.
func TestChallengeBeforeOpening(t *testing.T) {
	clock := testclock.New(time.Now())
	e := newEnv(t, func(c *Config) { c.UserRate = -1; c.Clock = clock })
	ctx := context.Background()
	if err := lua.Prepare.Run(ctx, e.primary, lua.SaleKeys("fq"), 10, 15, 1, 100, "", "fair").Err(); err != nil {
		t.Fatal(err)
	}
	starts := clock.Now().Add(time.Hour)
	e.catalog.put(flashgate.Sale{ID: "fq", Name: "Fair", PriceCents: 100, Total: 10, StartsAt: &starts,
		Queue: flashgate.QueueFair, ChallengeMaxNumber: 20000})
	e.s.refreshState(ctx)
	e.s.lookup([]byte("fq"))
	e.s.refreshState(ctx)
	r := do(e.s.Handler(), req{method: "GET", path: "/api/sales/fq/challenge"})
	if r.StatusCode() != 409 || !strings.Contains(string(r.Body()), `"not_started"`) {
		t.Fatalf("challenge before the opening: got %d %s, want 409 not_started", r.StatusCode(), r.Body())
	}
	if err := lua.QueueOpen.Run(ctx, e.primary, lua.SaleKeys("fq"), strings.Repeat("ab", 32), "00", 20000, 60).Err(); err != nil {
		t.Fatal(err)
	}
	e.s.refreshState(ctx)
	r = do(e.s.Handler(), req{method: "GET", path: "/api/sales/fq/challenge"})
	if r.StatusCode() != 200 || !strings.Contains(string(r.Body()), `"maxnumber":20000`) {
		t.Fatalf("challenge once open: got %d %s, want 200 at maxnumber 20000", r.StatusCode(), r.Body())
	}
}

// signedSolution is a payload for salt and number signed with the
// gateway's key, as the gateway's own challenge would be: what an attacker
// can reach by moving characters between a real challenge's salt and
// number, or by keeping a challenge past its terms.
func signedSolution(e *env, salt string, number int64) string {
	sum := sha256.Sum256([]byte(salt + strconv.FormatInt(number, 10)))
	chal := hex.EncodeToString(sum[:])
	pow := hmac.New(sha256.New, e.s.cfg.QueueSecret) // the proof of work's key, as queueedge.NewKeys derives it
	pow.Write([]byte("pow"))
	m := hmac.New(sha256.New, pow.Sum(nil))
	m.Write([]byte(chal))
	b, _ := json.Marshal(map[string]any{"algorithm": "SHA-256", "challenge": chal, "number": number, "salt": salt,
		"signature": hex.EncodeToString(m.Sum(nil))})
	return `{"payload":"` + base64.StdEncoding.EncodeToString(b) + `"}`
}

// TestProofOfWorkTerms: a solution is refused whose signed terms do not
// hold at entry — another sale (the digit moved from the salt into the
// number), a number above the maxnumber, a difficulty below the floor in
// force (raised by challenge_auto after the challenge), an expired
// challenge — and accepted when they do.
func TestProofOfWorkTerms(t *testing.T) {
	e, clock := fairEnv(t, 200)
	h := e.s.Handler()
	enter := func(user, body string) (int, string) {
		r := do(h, req{method: "POST", path: "/api/sales/fq/queue", token: token(t, user), body: body})
		return r.StatusCode(), string(r.Body())
	}
	exp := strconv.FormatInt(clock.Now().Add(time.Minute).Unix(), 10)
	refused := map[string]string{
		// On the old format ("…&sale=<id>", no end mark) a solution of sale
		// fq1 entered fq with its salt's last digit moved into the number.
		"sale shifted":     shifted(e, "0a?expires="+exp+"&sale=fq1", 7),
		"no end mark":      signedSolution(e, "0a?sale=fq&max=200&expires="+exp, 7),
		"number above max": signedSolution(e, "0a?sale=fq&max=200&expires="+exp+"&", 12043),
		"below the floor":  signedSolution(e, "0a?sale=fq&max=100&expires="+exp+"&", 7),
		"expired":          signedSolution(e, "0a?sale=fq&max=200&expires="+strconv.FormatInt(clock.Now().Unix()-1, 10)+"&", 7),
		"other sale":       signedSolution(e, "0a?sale=fq1&max=200&expires="+exp+"&", 7),
	}
	for name, body := range refused {
		if code, got := enter("mallory", body); code != 400 || !strings.Contains(got, "bad_request") {
			t.Errorf("%s: got %d %s, want 400 bad_request", name, code, got)
		}
	}
	if code, got := enter("alice", signedSolution(e, "0b?sale=fq&max=200&expires="+exp+"&", 7)); code != 201 {
		t.Fatalf("a solution on the terms in force: got %d %s, want 201", code, got)
	}

	// A real challenge, then challenge_auto doubles the floor: refused, and
	// a fresh challenge carries the new floor.
	weak := solution(t, e, nil)
	ctx := context.Background()
	if err := e.primary.HSet(ctx, lua.SaleKey("fq"), lua.FieldQueueMaxNumber, 400).Err(); err != nil {
		t.Fatal(err)
	}
	e.s.refreshState(ctx)
	if code, got := enter("bob", weak); code != 400 || !strings.Contains(got, "bad_request") {
		t.Errorf("a challenge below the raised floor: got %d %s, want 400 bad_request", code, got)
	}
	if r := do(h, req{method: "GET", path: "/api/sales/fq/challenge"}); !strings.Contains(string(r.Body()), `"maxnumber":400,`) ||
		!strings.Contains(string(r.Body()), `\u0026max=400\u0026`) {
		t.Errorf("a challenge after the raise: got %s, want maxnumber 400 in the answer and the salt", r.Body())
	}
	// A challenge lives minutes (5), not a whole pre-queue.
	old := solution(t, e, nil)
	clock.Add(5*time.Minute + time.Second)
	if code, got := enter("carol", old); code != 400 || !strings.Contains(got, "bad_request") {
		t.Errorf("a challenge 5m1s old: got %d %s, want 400 bad_request", code, got)
	}
	if code, got := enter("bob", solution(t, e, nil)); code != 201 {
		t.Errorf("bob with a fresh challenge: got %d %s, want 201", code, got)
	}
}

// shifted is the payload of a solution of salt and number with the salt's
// last character moved to the front of the number, the signature kept.
func shifted(e *env, salt string, number int64) string {
	n, err := strconv.ParseInt(salt[len(salt)-1:]+strconv.FormatInt(number, 10), 10, 64)
	if err != nil {
		return signedSolution(e, salt, number) // no digit to move
	}
	var p map[string]any
	raw := signedSolution(e, salt, number)
	b, _ := base64.StdEncoding.DecodeString(raw[len(`{"payload":"`) : len(raw)-2])
	_ = json.Unmarshal(b, &p)
	p["salt"], p["number"] = salt[:len(salt)-1], n
	b, _ = json.Marshal(p)
	return `{"payload":"` + base64.StdEncoding.EncodeToString(b) + `"}`
}

// TestTicketNamesItsQueue: a ticket carries its queue's commitment; once
// the sale's commitment differs (the queue is gone and opened anew) its
// status and its purchase answer 409 queue_reset, in every form, never a
// place; entering again gives a ticket of the new queue.
func TestTicketNamesItsQueue(t *testing.T) {
	e, tok, ticket := waitingEnv(t)
	h := e.s.Handler()
	k := rankTicket(t, e, tok, ticket)
	if !strings.Contains(ticket, ":00000000.") {
		t.Fatalf("entry ticket %q does not name its queue (want \":00000000.\")", ticket)
	}
	ctx := context.Background()
	commit := strings.Repeat("9f", 32)
	if err := e.primary.HSet(ctx, lua.SaleKey("fq"), lua.FieldQueueSeedSHA, commit).Err(); err != nil {
		t.Fatal(err)
	}
	e.s.refreshState(ctx)
	for _, c := range []struct{ name, method, path, ticket string }{
		{"status", "GET", "/api/sales/fq/queue", ticket},
		{"status, bound k ticket", "GET", "/api/sales/fq/queue", k},
		{"purchase", "POST", "/api/sales/fq/orders", ticket},
		{"purchase, bound k ticket", "POST", "/api/sales/fq/orders", k},
	} {
		r := do(h, req{method: c.method, path: c.path, token: tok, header: map[string]string{"X-Queue-Ticket": c.ticket}})
		if r.StatusCode() != 409 || string(r.Body()) != `{"error":"queue_reset"}` || len(r.Header.Peek("X-Queue-Ticket")) != 0 {
			t.Errorf("%s with the old queue's ticket: got %d %s (ticket %q), want 409 queue_reset and no ticket",
				c.name, r.StatusCode(), r.Body(), r.Header.Peek("X-Queue-Ticket"))
		}
	}
	r := do(h, req{method: "POST", path: "/api/sales/fq/queue", token: tok})
	var st struct{ Ticket string }
	if r.StatusCode() != 200 || json.Unmarshal(r.Body(), &st) != nil || !strings.Contains(st.Ticket, ":"+commit[:8]+".") {
		t.Fatalf("entering again: got %d %s, want 200 and a ticket naming %s", r.StatusCode(), r.Body(), commit[:8])
	}
	r = do(h, req{method: "GET", path: "/api/sales/fq/queue", token: tok, header: map[string]string{"X-Queue-Ticket": st.Ticket}})
	if r.StatusCode() != 200 || !strings.Contains(string(r.Body()), `"state":"waiting"`) {
		t.Errorf("status with the new ticket: got %d %s, want 200 waiting", r.StatusCode(), r.Body())
	}

	// A cache with no commitment (the sale's hash was lost and rebuilt,
	// its queue not restored yet) judges no ticket: 503, retry, never
	// queue_reset, since the restored queue keeps its commitment.
	if err := e.primary.HDel(ctx, lua.SaleKey("fq"), lua.FieldQueueSeedSHA).Err(); err != nil {
		t.Fatal(err)
	}
	e.s.refreshState(ctx)
	for _, c := range []struct{ method, path string }{{"GET", "/api/sales/fq/queue"}, {"POST", "/api/sales/fq/orders"}} {
		r = do(h, req{method: c.method, path: c.path, token: tok, header: map[string]string{"X-Queue-Ticket": st.Ticket}})
		if r.StatusCode() != 503 || string(r.Body()) != `{"error":"unavailable"}` || len(r.Header.Peek("X-Queue-Ticket")) != 0 {
			t.Errorf("%s %s while the queue is restored: got %d %s, want 503 unavailable and no ticket", c.method, c.path, r.StatusCode(), r.Body())
		}
	}
}
