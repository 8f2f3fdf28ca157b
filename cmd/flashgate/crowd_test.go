package main

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// TestCrowdRateCountsQueueing checks that with --rate a request's latency
// counts from when it was due, not from when a connection was free: one
// connection to a server taking 40 ms per answer, five arrivals 5 ms apart,
// so the last is answered about 200 ms after it was due.
func TestCrowdRateCountsQueueing(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		time.Sleep(40 * time.Millisecond) // not a synchronisation: the slow server under test
		ctx.SetStatusCode(fasthttp.StatusConflict)
		ctx.SetBodyString(`{"error":"sold_out"}`)
	}}
	go srv.Serve(ln)
	defer srv.Shutdown()

	r, err := runCrowdSpec(context.Background(), crowdSpec{
		Target: "http://" + ln.Addr().String(), Sale: "s", Secret: []byte("k"), UserPrefix: "u",
		Users: 5, Concurrency: 1, Rate: 200, Quantity: 1, Timeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := r.ByAnswer["409 sold_out"]; got != 5 {
		t.Fatalf("got %d sold_out answers, want 5 (%v)", got, r.ByAnswer)
	}
	// The fifth was due at 20 ms and could start only after four answers
	// of 40 ms each: at least 160 ms + 40 ms - 20 ms late.
	if got, want := r.Latencies[len(r.Latencies)-1], 150*time.Millisecond; got < want {
		t.Errorf("got slowest latency %v, want at least %v (queueing behind the one connection)", got, want)
	}
}

// TestCrowdSourceAddrsNoFreeConns: a closed-loop crowd from several source
// addresses never reports "no free connections available to host" (each
// address had concurrency/n+1 connections while request i went to address i
// mod n, so an address could be asked for more at once: 518 such errors
// with 19 addresses and concurrency 64).
func TestCrowdSourceAddrsNoFreeConns(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		time.Sleep(time.Millisecond) // not a synchronisation: a server's work, so that requests overlap
		ctx.SetStatusCode(fasthttp.StatusConflict)
		ctx.SetBodyString(`{"error":"sold_out"}`)
	}}
	go srv.Serve(ln)
	defer srv.Shutdown()

	for _, tt := range []struct {
		sources     string
		concurrency int
	}{
		{"127.0.0.2-127.0.0.20", 64},
		{"127.0.0.2-127.0.0.3", 64},
		{"127.0.0.2-127.0.0.20", 5}, // fewer workers than addresses
	} {
		const users = 1500
		r, err := runCrowdSpec(context.Background(), crowdSpec{
			Target: "http://" + ln.Addr().String(), Sale: "s", Secret: []byte("k"), UserPrefix: "u",
			Users: users, Concurrency: tt.concurrency, Quantity: 1, Timeout: 10 * time.Second, SourceAddrs: tt.sources,
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := r.ByAnswer["409 sold_out"]; got != users || r.Errors != 0 {
			t.Errorf("--source-addrs %s --concurrency %d: got %d sold_out of %d, %d errors (first: %v), want every answer and no error",
				tt.sources, tt.concurrency, got, users, r.Errors, r.FirstErr)
		}
	}
}
