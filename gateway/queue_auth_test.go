package gateway

import (
	"bufio"
	"encoding/hex"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/valyala/fasthttp"

	"github.com/flashgate/flashgate/fairqueue"
	"github.com/flashgate/flashgate/gateway/bearer"
)

// forged is tok with its signature replaced: same header and claims, a
// signature no secret made.
func forged(tok string) string {
	return tok[:strings.LastIndexByte(tok, '.')+1] + strings.Repeat("A", bearer.SigLen)
}

// TestQueueTicketVouches: on the fair queue's cache-answered paths (status
// poll, not-admitted purchase) a valid ticket stands for the token's
// signature, which is checked only where no valid ticket comes or the
// buyer is admitted. A forged token with bob's ticket gets bob's own place
// and never a unit; a forged token without a ticket, or with another
// user's, is 401; a header no verified token had is verified in full.
func TestQueueTicketVouches(t *testing.T) {
	e, tok, p := waitingEnv(t, func(c *Config) { c.Reserver = constReserver{} })
	h := e.s.Handler()
	k := rankTicket(t, e, tok, p)
	bad := forged(tok)
	call := func(method, path, token, ticket string) (int, string) {
		hdr := map[string]string{}
		if ticket != "" {
			hdr["X-Queue-Ticket"] = ticket
		}
		r := do(h, req{method: method, path: path, token: token, header: hdr})
		return r.StatusCode(), string(r.Body())
	}
	const status, buy = "/api/sales/fq/queue", "/api/sales/fq/orders"
	otherTok := token(t, "carol")
	// A header no verified token had: HS256 spelled with another key order.
	odd, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "bob", "exp": 4102444800}).SignedString(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	oddHead := "eyJ0eXAiOiJKV1QiLCJhbGciOiJIUzI1NiJ9" // {"typ":"JWT","alg":"HS256"}
	oddForged := forged(oddHead + odd[strings.IndexByte(odd, '.'):])
	for _, c := range []struct {
		name, method, path, token, ticket string
		code                              int
		body                              string
	}{
		{"poll, forged token, bob's ticket", "GET", status, bad, k, 200, `"state":"waiting"`},
		{"poll, forged token, no ticket", "GET", status, bad, "", 401, "unauthorized"},
		{"poll, carol's forged token, bob's ticket", "GET", status, forged(otherTok), k, 401, "unauthorized"},
		{"buy, carol's forged token, bob's ticket", "POST", buy, forged(otherTok), k, 401, "unauthorized"},
		{"poll, forged token of an unseen header, bob's ticket", "GET", status, oddForged, k, 401, "unauthorized"},
		{"poll, bob's token, no ticket", "GET", status, tok, "", 404, "not_found"},
		{"buy, forged token, bob's ticket, waiting", "POST", buy, bad, k, 409, "not_admitted"},
		{"buy, forged token, no ticket", "POST", buy, bad, "", 401, "unauthorized"},
	} {
		if code, body := call(c.method, c.path, c.token, c.ticket); code != c.code || !strings.Contains(body, c.body) {
			t.Errorf("%s: got %d %s, want %d %s", c.name, code, body, c.code, c.body)
		}
	}

	// Admitted, bob's ticket takes the purchase to the signature check: a
	// forged token never reserves.
	seed, _ := hex.DecodeString(strings.Repeat("ab", 32))
	setFrontier(t, e, 1, fairqueue.Rank(seed, "fq", "bob"), 0, "")
	if code, body := call("POST", buy, bad, k); code != 401 {
		t.Errorf("admitted bob's ticket with a forged token: got %d %s, want 401", code, body)
	}
	if code, body := call("POST", buy, tok, k); code != 201 {
		t.Errorf("admitted bob with his token: got %d %s, want 201", code, body)
	}
}

// TestHeaderNamesAnyCase: through the gateway's own server, the token and
// the ticket are found whatever case the client spelled their header names
// in (the gateway looks them up by their canonical names, which the
// server's parser normalizes to), as a proxy speaking HTTP/2 sends them:
// lower case.
func TestHeaderNamesAnyCase(t *testing.T) {
	e, tok, p := waitingEnv(t)
	k := rankTicket(t, e, tok, p)
	addr := e.serveLoopback(t)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	for _, n := range []struct{ auth, ticket string }{
		{"authorization", "x-queue-ticket"},
		{"AUTHORIZATION", "X-QUEUE-TICKET"},
		{"Authorization", "X-Queue-Ticket"},
	} {
		raw := "GET /api/sales/fq/queue HTTP/1.1\r\nHost: x\r\n" +
			n.auth + ": Bearer " + tok + "\r\n" + n.ticket + ": " + k + "\r\n\r\n"
		if _, err := io.WriteString(c, raw); err != nil {
			t.Fatal(err)
		}
		var r fasthttp.Response
		if err := r.Read(br); err != nil {
			t.Fatal(err)
		}
		if got := r.StatusCode(); got != 200 || !strings.Contains(string(r.Body()), `"state":"waiting"`) {
			t.Errorf("%s, %s: got %d %s, want 200 waiting", n.auth, n.ticket, got, r.Body())
		}
	}
}
