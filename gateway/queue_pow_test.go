package gateway

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/flashgate/flashgate/fairqueue"
	"github.com/flashgate/flashgate/lua"
)

// TestSolutionSingleUseAtExpiry enters three buyers with one solution in
// the last moments of its challenge's life, on a real Redis: at most one
// entry is bought, and the solution is marked used whenever one is. A
// remaining life under a millisecond once went to the entry script as
// "0", which skipped the mark: every buyer got in.
func TestSolutionSingleUseAtExpiry(t *testing.T) {
	cases := []struct {
		name   string
		before time.Duration // how long before the challenge's expiry the entries come
		want   int           // entries bought
	}{
		{name: "last half millisecond", before: 500 * time.Microsecond, want: 0},
		{name: "last millisecond", before: time.Millisecond, want: 0},
		{name: "under a second", before: fairqueue.SolutionMinLife - time.Millisecond, want: 0},
		{name: "a second", before: fairqueue.SolutionMinLife, want: 1},
		{name: "a minute", before: time.Minute, want: 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, clock := fairEnv(t, 50)
			body := solution(t, e, nil)
			clock.Set(solutionExpiry(t, body).Add(-c.before))
			got := 0
			for _, user := range []string{"alice", "bob", "carol"} {
				r := do(e.s.Handler(), req{method: "POST", path: "/api/sales/fq/queue", token: token(t, user), body: body})
				switch code := r.StatusCode(); {
				case code == 201:
					got++
				case code != 400 || !strings.Contains(string(r.Body()), "bad_request"):
					t.Errorf("%s: got %d %s, want 201 or 400 bad_request", user, code, r.Body())
				}
			}
			if got != c.want {
				t.Errorf("entries bought with one solution: got %d, want %d", got, c.want)
			}
			marks, err := e.primary.Keys(t.Context(), lua.QueuePowKey("fq", "*")).Result()
			if err != nil {
				t.Fatal(err)
			}
			if len(marks) != got {
				t.Errorf("solution marks: got %d, want %d (one per entry bought)", len(marks), got)
			}
		})
	}
}

// solutionExpiry reads the expiry of the challenge that an entry body's
// solution solves.
func solutionExpiry(t *testing.T, body string) time.Time {
	t.Helper()
	var b struct{ Payload string }
	var p struct{ Salt string }
	if err := json.Unmarshal([]byte(body), &b); err != nil {
		t.Fatal(err)
	}
	raw, err := base64.StdEncoding.DecodeString(b.Payload)
	if err != nil || json.Unmarshal(raw, &p) != nil {
		t.Fatalf("payload: %v", err)
	}
	_, _, expires, ok := fairqueue.ChallengeTerms(p.Salt)
	if !ok {
		t.Fatalf("salt %q: no terms", p.Salt)
	}
	return expires
}
