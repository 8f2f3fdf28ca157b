package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestAdminListenerHeadLimit sends the admin listener's server (serveHTTP)
// request heads around headLimit, the public listener's: up to it they are
// served, past it the answer is 431, JSON bad_request up to net/http's own
// bound, and the connection closes. The admin listener took a 1 MB head.
func TestAdminListenerHeadLimit(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- serveHTTP(ctx, ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, "answered")
		}))
	}()
	defer func() {
		cancel()
		if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serveHTTP: %v", err)
		}
	}()
	// head is a GET whose head is n bytes in all.
	head := func(n int) string {
		const start, end = "GET /admin/sales HTTP/1.1\r\nHost: admin\r\nX-Pad: ", "\r\n\r\n"
		return start + strings.Repeat("a", n-len(start)-len(end)) + end
	}
	cases := []struct {
		name   string
		size   int
		status int
		body   string // "" for any
	}{
		{"small", 200, 200, "answered"},
		{"at the limit", headLimit, 200, "answered"},
		{"one byte over", headLimit + 1, 431, `{"error":"bad_request"}` + "\n"},
		{"under net/http's bound", maxHeaderBytes, 431, `{"error":"bad_request"}` + "\n"},
		{"a megabyte", 1 << 20, 431, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			go func() { _, _ = io.WriteString(conn, head(c.size)) }() // the server may stop reading
			res, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("reading the answer: %v", err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != c.status || c.body != "" && string(b) != c.body {
				t.Errorf("a %d-byte head: got %d %q, want %d %q", c.size, res.StatusCode, b, c.status, c.body)
			}
			if c.status == 431 && !res.Close {
				t.Errorf("a %d-byte head: the connection stays open after the 431", c.size)
			}
		})
	}
}
