package main

import (
	"bytes"
	"net"
	"regexp"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

func TestHTTPURL(t *testing.T) {
	tests := []struct {
		addr net.Addr
		want string
	}{
		{&net.TCPAddr{IP: net.IPv6unspecified, Port: 8080}, "http://127.0.0.1:8080"},
		{&net.TCPAddr{IP: net.IPv4zero, Port: 8080}, "http://127.0.0.1:8080"},
		{&net.TCPAddr{Port: 8081}, "http://127.0.0.1:8081"},
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 41783}, "http://127.0.0.1:41783"},
		{&net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 80}, "http://10.1.2.3:80"},
		{&net.TCPAddr{IP: net.IPv6loopback, Port: 9000}, "http://[::1]:9000"},
	}
	for _, tt := range tests {
		if got := httpURL(tt.addr); got != tt.want {
			t.Errorf("httpURL(%v) = %q, want %q", tt.addr, got, tt.want)
		}
	}
}

// TestHTTPURLDials listens the way the default --listen does (":0", every
// address) and dials the URL httpURL makes of it.
func TestHTTPURLDials(t *testing.T) {
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
		}
	}()
	u := httpURL(ln.Addr())
	c, err := net.DialTimeout("tcp", u[len("http://"):], 2*time.Second)
	if err != nil {
		t.Fatalf("dialing %s (listener %s): %v", u, ln.Addr(), err)
	}
	c.Close()
}

// TestProgressFirstFrameRate checks that the rate on the crowd's progress
// bar never exceeds what was done over the time that passed since the bar
// started (its first frame used to show hundreds of millions of req/s).
func TestProgressFirstFrameRate(t *testing.T) {
	var buf bytes.Buffer
	var done atomic.Int64
	began := time.Now()
	stop := startBar(&buf, 10000, &done)
	done.Store(5000)
	// Not a synchronisation: the bar's rate is work over elapsed time, and
	// 250 ms (two or three frames) with half the work done is the input.
	time.Sleep(250 * time.Millisecond)
	done.Store(10000)
	stop()
	elapsed := time.Since(began)
	rates := regexp.MustCompile(`(\d+) req/s`).FindAllStringSubmatch(buf.String(), -1)
	if len(rates) == 0 {
		t.Fatalf("no rate on the bar:\n%q", buf.String())
	}
	// At most 10,000 done, and no frame before the first tick (100 ms).
	limit := 10000/0.1 + 1
	for _, m := range rates {
		got, _ := strconv.ParseFloat(m[1], 64)
		if got > limit {
			t.Errorf("bar showed %v req/s after at most 10000 requests in %v, want at most %v", got, elapsed, limit)
		}
	}
}
