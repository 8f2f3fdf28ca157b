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
