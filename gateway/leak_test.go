package gateway

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
		// A HostClient's idle-connection cleaner ends only when it wakes
		// (MaxIdleConnDuration, 10 to 30 s) and finds no connection left,
		// and fasthttp.Client's cleaner of idle HostClients likewise.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*Client).mCleaner"),
		// A server's idle-worker cleaner sees Shutdown only when it wakes,
		// MaxIdleWorkerDuration (10 s) after its last pass: a test run
		// shorter than that (one test alone) would find it still asleep.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
	)
}
