package queueedge

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/dchest/siphash"

	"github.com/flashgate/flashgate/gateway/bearer"
	"github.com/flashgate/flashgate/internal/testenv/testclock"
)

// The tests of the gateway's queue routes, through its handler, are the
// gateway root's queue_*_test.go; these are the pieces alone.

// TestTicketParts: the shapes of a short and a bound ticket, and nothing
// else.
func TestTicketParts(t *testing.T) {
	mac := strings.Repeat("A", ticketMACB64)
	for _, c := range []struct {
		ticket     string
		ok, bound  bool
		entry, exp string
	}{
		{"p." + mac, true, false, "p", ""},
		{"kXYZ." + mac + ".1796388727." + mac, true, true, "kXYZ", "1796388727"},
		{"l12." + mac + ".1." + mac, true, true, "l12", "1"},
		{"." + mac, false, false, "", ""},
		{"p." + mac[1:], false, false, "", ""},
		{"p." + mac + ".", false, false, "", ""},
		{"p." + mac + "x", false, false, "", ""},
		{"p." + mac + ".12", false, false, "", ""},
		{"p." + mac + "..", false, false, "", ""},
		{"p." + mac + ".." + mac, false, false, "", ""},
		{"p." + mac + ".0123." + mac, false, false, "", ""},
		{"p." + mac + ".0." + mac, false, false, "", ""},
		{"p." + mac + ".-5." + mac, false, false, "", ""},
		{"p." + mac + ".1x." + mac, false, false, "", ""},
		{"p." + mac + ".1." + mac[1:], false, false, "", ""},
		{"p." + mac + ".1." + mac + "A", false, false, "", ""},
		{"p." + mac + ".99999999999999." + mac, false, false, "", ""},
	} {
		tt, ok := ticketParts([]byte(c.ticket))
		entry, exp := tt.entry, tt.exp
		if ok != c.ok || ok && (string(entry) != c.entry || (exp != nil) != c.bound || string(exp) != c.exp) {
			t.Errorf("ticketParts(%q): got %q %q %v, want %q %q %v", c.ticket, entry, exp, ok, c.entry, c.exp, c.ok)
		}
	}
}

// TestTokenMAC: a bound ticket's token MAC is SipHash-2-4-128 under the
// first 16 bytes of the sale's token key over the signature prefix, entry
// and exp (checked with the library's streaming form, which shares no code
// path with Hash128).
func TestTokenMAC(t *testing.T) {
	k := NewKeys([]byte("queue secret"))
	var e Cache
	e.Init(k, "fq")
	m := hmac.New(sha256.New, k.token)
	m.Write([]byte("fq"))
	key := m.Sum(nil)
	sig := []byte(strings.Repeat("s", bearer.SigLen))
	for i, c := range []struct{ entry, exp string }{
		{"p", "1796388727"}, {"kABCDEFGHIJKLMNOPQRSTUVWXYZ01", "1796388727"}, {"l7", "1"},
		{"p", "1796388727"}, {"bkABCDEFGHIJKLMNOPQRSTUVWXYZ01", "68719476736"},
		{strings.Repeat("l9", 60), "1"}, // longer than the stack buffer
	} {
		h := siphash.New128(key[:16])
		h.Write([]byte(string(sig[:boundSigLen]) + c.entry + "." + c.exp))
		want := base64.RawURLEncoding.EncodeToString(h.Sum(nil))
		got := e.tokenMAC(sig, []byte(c.entry), []byte(c.exp))
		if string(got[:]) != want {
			t.Errorf("round %d, %s %s: got %s, want %s", i, c.entry, c.exp, got, want)
		}
	}
	var other Cache
	other.Init(k, "fq2")
	if a, b := e.tokenMAC(sig, []byte("p"), []byte("1")), other.tokenMAC(sig, []byte("p"), []byte("1")); a == b {
		t.Errorf("two sales, one token MAC %s", a)
	}
}

// TestParseEntry: every entry names its queue (":<8 characters>" at its
// end), a purchased one its order ("b<order id>~"), and appendEntry
// writes back what parseEntry read.
func TestParseEntry(t *testing.T) {
	k := "k" + strings.Repeat("A", rankEntryB64)
	for _, c := range []struct {
		entry     string
		ok        bool
		kind      byte
		purchased bool
		order     string
	}{
		{"p:3f9a0c1e", true, 'p', false, ""},
		{"l42:3f9a0c1e", true, 'l', false, ""},
		{k + ":3f9a0c1e", true, 'p', false, ""},
		{"bo-1~p:3f9a0c1e", true, 'p', true, "o-1"},
		{"b01J9ZQ7Y3M8K2V5T6W4X1N0PQR~" + k + ":3f9a0c1e", true, 'p', true, "01J9ZQ7Y3M8K2V5T6W4X1N0PQR"},
		{"p", false, 0, false, ""},                    // no queue tag (issued before tickets named their queue)
		{"bp:3f9a0c1e", false, 0, false, ""},          // purchased without its order
		{"b~p:3f9a0c1e", false, 0, false, ""},         // an empty order id
		{"bo.1~p:3f9a0c1e", false, 0, false, ""},      // not an id
		{"bo-1~:3f9a0c1e", false, 0, false, ""},       // no entry after the order
		{"p:3f9a0c1", false, 0, false, ""},            // a short tag
		{"p;3f9a0c1e", false, 0, false, ""},           // no separator
		{"l0:3f9a0c1e", false, 0, false, ""},          // no such arrival
		{"x:3f9a0c1e", false, 0, false, ""},           // no such kind
		{":3f9a0c1e", false, 0, false, ""},            // no entry
		{"bo-1~bo-2~p:3f9a0c1e", false, 0, false, ""}, // twice purchased
	} {
		tk, ok := parseEntry([]byte(c.entry))
		if ok != c.ok || ok && (tk.kind != c.kind || tk.purchased != c.purchased || string(tk.order) != c.order || string(tk.queue[:]) != "3f9a0c1e") {
			t.Errorf("parseEntry(%q): got %v kind %q purchased %v order %q queue %q, want %v kind %q purchased %v order %q queue 3f9a0c1e",
				c.entry, ok, tk.kind, tk.purchased, tk.order, tk.queue[:], c.ok, c.kind, c.purchased, c.order)
			continue
		}
		if ok {
			if got := string(appendEntry(nil, &tk)); got != c.entry {
				t.Errorf("appendEntry(parseEntry(%q)): got %q", c.entry, got)
			}
		}
	}
}

// TestPollAfterBounds: poll_after_ms stays within 1–30 s however far from
// the frontier or the start, jitter included (docs/api.md).
func TestPollAfterBounds(t *testing.T) {
	clock := testclock.New(time.Now())
	soon, late := clock.Now().Add(time.Minute), clock.Now().Add(time.Hour)
	for _, startsAt := range []*time.Time{nil, &soon, &late} {
		for _, p := range []Place{
			{state: qsWaiting, eta: 100000},       // far: 30 s before the jitter
			{state: qsWaiting, eta: 0},            // at the frontier: 1 s before it
			{state: qsWaiting, eta: -1, ahead: 0}, // no rate
			{state: qsAdmitted, eta: -1},
			{state: qsPrequeue, eta: -1},
		} {
			for range 500 {
				if ms := pollAfter(p, startsAt, clock); ms < 1000 || ms > 30000 {
					t.Fatalf("%s (eta %d, starts %v): got poll_after_ms %d, want 1000..30000", p.state, p.eta, startsAt, ms)
				}
			}
		}
	}
}

// TestLocate: where a ticket stands in a cached queue, from the queue's
// figures alone: a closed sale, a ticket of a queue gone or being
// restored, a purchased ticket, before the start, a late arrival on each
// side of the frontiers.
func TestLocate(t *testing.T) {
	clock := testclock.New(time.Now())
	var c Cache
	c.Init(NewKeys([]byte("queue secret")), "fq")
	sha := strings.Repeat("3f", 32)
	started := &View{qtag: Tag(sha)}
	started.SeedSHA, started.Started, started.Prequeued, started.Admitted, started.Expired, started.Rate = sha, true, 10, 15, 12, 60
	restoring := &View{qtag: Tag("")}
	before := &View{qtag: Tag(sha)}
	before.SeedSHA = sha
	late := func(n int64) Ticket { return Ticket{kind: 'l', n: n, queue: Tag(sha)} }
	for _, tc := range []struct {
		name     string
		q        *View
		closed   bool
		tk       Ticket
		state    string
		position int64
		noPlace  bool
		admitted bool
	}{
		{"closed", started, true, late(1), qsClosed, 0, false, false},
		{"queue being restored", restoring, false, late(1), qsRestoring, 0, true, false},
		{"queue gone", started, false, Ticket{kind: 'l', n: 1, queue: Tag(strings.Repeat("cd", 32))}, qsReset, 0, true, false},
		{"purchased", started, false, Ticket{kind: 'l', n: 1, queue: Tag(sha), purchased: true, order: []byte("o-1")}, qsBought, 0, false, true},
		{"before the start", before, false, late(1), qsPrequeue, 0, false, false},
		{"late, expired", started, false, late(2), qsExpired, 12, false, false},
		{"late, admitted", started, false, late(5), qsAdmitted, 15, false, true},
		{"late, waiting", started, false, late(6), qsWaiting, 16, false, false},
	} {
		tk := tc.tk
		p := Locate(&c, tc.q, tc.closed, nil, clock, &tk, "bob")
		if p.state != tc.state || p.position != tc.position || p.NoPlace() != tc.noPlace || p.Admitted() != tc.admitted {
			t.Errorf("%s: got %s at %d (no place %v, admitted %v), want %s at %d (%v, %v)",
				tc.name, p.state, p.position, p.NoPlace(), p.Admitted(), tc.state, tc.position, tc.noPlace, tc.admitted)
		}
	}
}
