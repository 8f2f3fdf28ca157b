package main

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// fasthttp refreshes its cached Date header once a second on a
		// goroutine it starts with the first server and never stops.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		// fasthttp's default dialer (HostClient) cleans its DNS cache on a
		// goroutine it starts with the first dial and never stops.
		goleak.IgnoreTopFunction("github.com/valyala/fasthttp.(*TCPDialer).tcpAddrsClean"),
		// A fasthttp server's worker-pool cleaner sees Shutdown only when it
		// wakes, up to MaxIdleWorkerDuration (10 s) later.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		// go-redis's NewFailoverClusterClient (the Sentinel read-only client,
		// and the inventory's Sentinel primary) subscribes to its Sentinel
		// and its Close never ends that subscription: the listener and the
		// PubSub's two goroutines stay (redis/go-redis#3999, fix proposed in
		// #4000). Nothing else here subscribes.
		goleak.IgnoreTopFunction("github.com/redis/go-redis/v9.(*sentinelFailover).listen"),
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9.(*channel).initHealthCheck.func1"),
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9.(*channel).initMsgChan.func1"),
		// A HostClient's idle-connection cleaner ends only when it wakes
		// (MaxIdleConnDuration, 10 to 30 s) and finds no connection left,
		// and fasthttp.Client's cleaner of idle HostClients likewise.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*Client).mCleaner"),
	)
}
