package systemtest

import "go.uber.org/goleak"

// leakOptions names the goroutines TestMain does not count as leaks.
var leakOptions = []goleak.Option{
	// fasthttp refreshes its cached Date header once a second on a
	// goroutine it starts with the first server and never stops.
	goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
	// A fasthttp server's worker-pool cleaner sees Shutdown only when it
	// wakes, up to MaxIdleWorkerDuration (10 s) later.
	goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
}
