package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestAdminListenerRefusesSmuggling sends the admin listener's server
// (serveHTTP) a request whose body is framed by both Content-Length and
// Transfer-Encoding, with a second request behind the chunked body: it
// answers 400 once and closes, as the public listener does, and never
// answers the request hidden behind the body.
func TestAdminListenerRefusesSmuggling(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- serveHTTP(ctx, ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			_, _ = io.WriteString(w, "answered "+r.URL.Path)
		}))
	}()
	defer func() {
		cancel()
		if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serveHTTP: %v", err)
		}
	}()

	raw := "POST /admin/sales HTTP/1.1\r\nHost: admin\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n" +
		"0\r\n\r\n" +
		"GET /smuggled HTTP/1.1\r\nHost: admin\r\n\r\n"
	tests := []struct{ name, raw string }{
		{"content-length and chunked", raw},
		{"chunked then content-length", strings.Replace(raw, "Content-Length: 5\r\nTransfer-Encoding: chunked", "Transfer-Encoding: chunked\r\nContent-Length: 5", 1)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.WriteString(c, tc.raw); err != nil {
				t.Fatal(err)
			}
			// The server closes the connection after its answer; a read
			// deadline ends the read if it does not.
			got, err := io.ReadAll(c)
			if err != nil {
				t.Errorf("the connection stayed open after the answer: %v", err)
			}
			answers := strings.Count(string(got), "HTTP/1.1 ")
			if answers != 1 || !strings.HasPrefix(string(got), "HTTP/1.1 400 ") {
				t.Errorf("got %d answers %q, want one 400 and the connection closed", answers, got)
			}
			if strings.Contains(string(got), "smuggled") {
				t.Errorf("the request behind the body was answered: %q", got)
			}
		})
	}
}
