package gateway

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/flashgate/flashgate/internal/testenv/testwait"
)

// TestPurchaseJudgedInContractOrder: a token of the right shape but a bad
// signature is answered by the sale's cached state when that turns the
// purchase away (409, no rate-limit token spent), and is 401 only for a
// sale that is open; a header of the wrong shape is 401 before anything.
func TestPurchaseJudgedInContractOrder(t *testing.T) {
	fr := &fakeReserver{}
	e := newEnv(t, func(c *Config) {
		c.Reserver = fr
		c.UserRate = 0.001 // one try per user, ever
		c.UserBurst = 1
		c.SaleRate = 0.001 // one try for the whole sale
		c.SaleBurst = 1
	})
	e.sale(t, "soon", 10, 15, false)
	e.sale(t, "gone", 10, 15, true)
	e.setState(t, "gone", "closed")
	h := e.s.Handler()
	good := token(t, "u1")
	forged := good[:len(good)-4] + "AAAA"
	tests := []struct {
		name, path, token, header string
		status                    int
		code                      string
	}{
		{"not started, forged", "/api/sales/soon/orders", forged, "", 409, "not_started"},
		{"closed, forged", "/api/sales/gone/orders", forged, "", 409, "closed"},
		{"unknown sale, forged", "/api/sales/nope/orders", forged, "", 404, "not_found"},
		{"not started, no token", "/api/sales/soon/orders", "", "", 401, "unauthorized"},
		{"not started, two segments", "/api/sales/soon/orders", "", "Bearer abc.def", 401, "unauthorized"},
		{"not started, short signature", "/api/sales/soon/orders", "", "Bearer " + good[:len(good)-1], 401, "unauthorized"},
		{"not started, four segments", "/api/sales/soon/orders", "", "Bearer a." + good, 401, "unauthorized"},
		{"not started, empty segment", "/api/sales/soon/orders", "", "Bearer ." + good[strings.IndexByte(good, '.'):], 401, "unauthorized"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := req{method: "POST", path: tc.path, token: tc.token}
			if tc.header != "" {
				r.header = map[string]string{"Authorization": tc.header}
			}
			for i := 0; i < 3; i++ {
				resp := do(h, r)
				if resp.StatusCode() != tc.status || errCode(resp) != tc.code {
					t.Fatalf("try %d: got %d %s, want %d %s", i, resp.StatusCode(), resp.Body(), tc.status, tc.code)
				}
			}
		})
	}
	// The sale opens: a forged token is now judged on its signature, and
	// the first good try of u1 finds both its own and the sale's token
	// unspent by all of the above.
	e.setState(t, "soon", "open")
	e.s.refreshState(context.Background())
	if r := do(h, req{method: "POST", path: "/api/sales/soon/orders", token: forged}); r.StatusCode() != 401 || errCode(r) != "unauthorized" {
		t.Fatalf("open sale, forged token: got %d %s, want 401 unauthorized", r.StatusCode(), r.Body())
	}
	if r := do(h, req{method: "POST", path: "/api/sales/soon/orders", token: good}); r.StatusCode() != 201 {
		t.Fatalf("open sale, good token: got %d %s, want 201", r.StatusCode(), r.Body())
	}
	if n := fr.n.Load(); n != 1 {
		t.Fatalf("got %d reserves, want 1", n)
	}
}

// TestIdleConnectionClosedSilently: a connection that sends nothing until
// the read or idle timeout fires is closed without an answer (an
// unsolicited 400 would be taken as the answer to a request racing onto
// it); a malformed request is still answered 400.
func TestIdleConnectionClosedSilently(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.ReadTimeout = 150 * time.Millisecond
		c.IdleTimeout = 150 * time.Millisecond
	})
	addr := e.serveLoopback(t)
	dial := func(t *testing.T) net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		return c
	}
	// wantEOF waits (up to the 5 s deadline of dial) for the timeouts to
	// close the connection and expects nothing written.
	wantEOF := func(t *testing.T, r io.Reader) {
		t.Helper()
		b, err := io.ReadAll(r)
		if err != nil && !errors.Is(err, io.EOF) {
			t.Fatalf("got %v, want EOF", err)
		}
		if len(b) > 0 {
			t.Fatalf("got %q, want EOF and nothing written", b)
		}
	}
	t.Run("new connection", func(t *testing.T) {
		wantEOF(t, dial(t))
	})
	t.Run("after a request", func(t *testing.T) {
		c := dial(t)
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		line, err := br.ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "HTTP/1.1 200") {
			t.Fatalf("got %q %v, want 200", line, err)
		}
		for line != "\r\n" { // the headers
			if line, err = br.ReadString('\n'); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := br.Discard(3); err != nil { // "ok\n"
			t.Fatal(err)
		}
		wantEOF(t, br)
	})
	t.Run("half a request", func(t *testing.T) {
		c := dial(t)
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHo"); err != nil {
			t.Fatal(err)
		}
		wantEOF(t, c)
	})
	t.Run("malformed request", func(t *testing.T) {
		c := dial(t)
		if _, err := io.WriteString(c, "GARBAGE\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(c)
		if !strings.HasPrefix(string(b), "HTTP/1.1 400") || !strings.Contains(string(b), `{"error":"bad_request"}`) {
			t.Fatalf("got %q, want 400 bad_request", b)
		}
	})
}

// TestConnSplit: past FastConns, connections go to the lean server and are
// served all the same; a closed fast connection frees its place.
func TestConnSplit(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.FastConns = 2 })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- e.s.Serve(ln) }()
	get := func(c net.Conn, br *bufio.Reader) {
		t.Helper()
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		line, err := br.ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "HTTP/1.1 200") {
			t.Fatalf("got %q %v, want 200", line, err)
		}
		for line != "\r\n" {
			if line, err = br.ReadString('\n'); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := br.Discard(3); err != nil {
			t.Fatal(err)
		}
	}
	var conns []net.Conn
	open := func() net.Conn {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		br := bufio.NewReader(c)
		get(c, br)
		get(c, br) // keep-alive
		conns = append(conns, c)
		return c
	}
	counts := func() (int32, int32) {
		return e.s.srv.GetOpenConnectionsCount(), e.s.lean.GetOpenConnectionsCount()
	}
	for i := 0; i < 4; i++ {
		open()
	}
	if f, l := counts(); f != 2 || l != 2 {
		t.Fatalf("got %d fast and %d lean connections, want 2 and 2", f, l)
	}
	conns[0].Close()
	testwait.Eventually(t, 5*time.Second, func() bool { f, _ := counts(); return f == 1 },
		"the fast server to count the closed connection")
	open()
	if f, l := counts(); f != 2 || l != 2 {
		t.Fatalf("after one fast connection closed: got %d fast and %d lean, want 2 and 2", f, l)
	}
	for _, c := range conns[1:] {
		c.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("Serve did not return after Shutdown")
	}
}
