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
	// A HostClient's idle-connection cleaner ends only when it wakes
	// (MaxIdleConnDuration, 10 to 30 s) and finds no connection left.
	goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
	// fasthttp.Client's cleaner of idle HostClients ends only when it
	// wakes and finds none left.
	goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*Client).mCleaner"),
}
