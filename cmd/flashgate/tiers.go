package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/gateway"
	"github.com/flashgate/flashgate/internal/buildinfo"
	"github.com/flashgate/flashgate/internal/noroute"
	"github.com/flashgate/flashgate/internal/replwait"
	"github.com/flashgate/flashgate/sqldb"
)

// stack holds what a command opened, so that it closes all of it in reverse.
type stack struct {
	log     *slog.Logger
	reg     *prometheus.Registry
	closers []func()
	// embedded is set by the demo, whose store is the embedded one, in
	// this process: its clients wait embeddedReadTimeout for an answer.
	embedded bool
}

// embeddedReadTimeout is how long a client of the demo's embedded store
// waits for an answer. The store runs one command at a time and each
// script in a new interpreter, far slower than Redis: a draw close's
// pipelines of moves (16 batches of 128 scripts in flight) waited past
// the request path's 1 s for their answers on a loaded machine, failed,
// and were sent again, and a 20,000-entry close took minutes. Nothing
// else in the process can answer sooner when it does not.
const embeddedReadTimeout = 15 * time.Second

func newStack(cfg *Config, stderr io.Writer) *stack {
	lvl := slog.LevelInfo
	switch cfg.LogLevel {
	case "debug":
		lvl = slog.LevelDebug
	case "warn":
		lvl = slog.LevelWarn
	case "error":
		lvl = slog.LevelError
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildinfo.Collector())
	return &stack{
		log: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl})),
		reg: reg,
	}
}

func (s *stack) onClose(f func()) { s.closers = append(s.closers, f) }

func (s *stack) close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	s.closers = nil
}

// redisTune is what each use of Redis sets on its client, whatever the
// kind of deployment.
type redisTune struct {
	poolSize, minIdle int
	readTimeout       time.Duration
	readOnly          bool // route reads to replicas (cluster, Sentinel)
	// followPrimary makes a Sentinel client's failed dial wait for the
	// primary (see sentinelDialEvery) instead of failing at once.
	followPrimary bool
	// poolPerPrimary makes a Sentinel client keep a pool per address of
	// the primary (see inventoryPrimary).
	poolPerPrimary bool
}

// A Sentinel client made with followPrimary retries a dial that fails
// every sentinelDialEvery for up to sentinelDialPatience, and go-redis's
// Sentinel dialer asks the Sentinel for the primary again at each try.
// While the Sentinel still names a primary that was killed, each try is
// refused; once it names the replica it promoted, the next try, within
// sentinelDialEvery, reaches it. Failing at once instead (one try) counts a
// failed dial each time, and after the pool's size of them go-redis stops
// dialing: every call fails at once with the last dial error, and a probe
// in the background dials once a second, which kept the order sink and the
// control plane off the promoted replica for up to a second after the
// Sentinel named it (and the count of failed dials is only cleared by that
// probe, so it grows from one failover to the next). The order sink's and
// the control plane's calls wait; nothing but Redis has work for them while
// Redis is out of reach. A caller whose context ends stops waiting, but
// go-redis dials on a goroutine of its own, which goes on trying (its
// connection, once made, waits idle in the pool) for up to
// sentinelDialPatience, until Close (its tries then fail at once, without
// a pause between them); a dial that fails for that long is counted. At
// most sentinelDialsAtOnce such dials run at a time (a caller beyond them
// waits for one to end), and such a client keeps no idle connections of
// its own (go-redis refills those with dials of their own, beyond that
// bound), so a client probes a dead primary at most sentinelDialsAtOnce
// times every sentinelDialEvery, however many calls wait. The request
// path's clients keep failing a dial at once: a buyer hears 503 rather
// than waits.
const (
	sentinelDialEvery    = 50 * time.Millisecond
	sentinelDialPatience = time.Minute
	sentinelDialsAtOnce  = 2
)

// redisClient opens a client for rawURL (any form parseRedisURL takes) and
// checks that the server answers. The request path wants short deadlines on
// the client itself (not on request contexts); blocking readers pass their
// own read timeout. With readOnly, a cluster client sends read-only commands
// to replicas (falling back to primaries while a replica fails or loads) and
// a Sentinel client reads from the master's replicas.
func (s *stack) redisClient(ctx context.Context, what, rawURL string, t redisTune) (redis.UniversalClient, error) {
	tgt, err := parseRedisURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%s %q: %v", what, rawURL, err)
	}
	if t.readTimeout == 0 {
		t.readTimeout = time.Second
	}
	if s.embedded {
		t.readTimeout = max(t.readTimeout, embeddedReadTimeout)
	}
	var c redis.UniversalClient
	switch tgt.kind {
	case redisCluster:
		o := tgt.cluster
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.PoolTimeout = 2*time.Second, t.readTimeout, time.Second, 2*time.Second
		o.MaxRetries = 1 // a retried reserve is safe: the script answers with the same order
		o.DialerRetries = 1
		o.PoolSize, o.MinIdleConns = t.poolSize, t.minIdle
		o.ReadOnly = t.readOnly
		// A dead primary answers nothing, so no MOVED tells the client about
		// its replica's promotion: reload the slot map every second rather
		// than go-redis's default minute.
		if o.ClusterStateReloadInterval == 0 {
			o.ClusterStateReloadInterval = time.Second
		}
		c = redis.NewClusterClient(o)
	case redisSentinel:
		o := tgt.failover
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.PoolTimeout = 2*time.Second, t.readTimeout, time.Second, 2*time.Second
		o.MaxRetries = 1
		o.DialerRetries = 1
		if t.followPrimary {
			o.DialerRetries = int(sentinelDialPatience / sentinelDialEvery)
			o.MaxConcurrentDials = sentinelDialsAtOnce
			t.minIdle = 0
			log := s.log
			closed := new(atomic.Bool)
			s.onClose(func() { closed.Store(true) })
			o.DialerRetryBackoff = func(attempt int) time.Duration {
				if closed.Load() {
					// Each try fails at once after Close: the dial's
					// goroutine ends now rather than a minute later.
					return 0
				}
				if attempt == 0 {
					log.Warn("redis: a dial of the Sentinel's primary failed; dialling again, asking the Sentinel each time",
						"client", what, "every", sentinelDialEvery, "for", sentinelDialPatience)
				}
				return sentinelDialEvery
			}
		}
		o.PoolSize, o.MinIdleConns = t.poolSize, t.minIdle
		switch {
		case t.readOnly:
			// A cluster client over the master and its replicas: read-only
			// commands go to replicas, to the master when none answers.
			o.ReplicaOnly = true
			c = redis.NewFailoverClusterClient(o)
		case t.poolPerPrimary:
			// The same over the master alone: every command goes to it.
			cc := redis.NewFailoverClusterClient(o)
			h := newReloadOnFailure(cc)
			cc.AddHook(h)
			// The reserves' WAIT goes on a connection of the master's own
			// node client.
			cc.OnNewNode(func(n *redis.Client) { n.AddHook(h) })
			c = cc
		default:
			c = redis.NewFailoverClient(o)
		}
	default:
		o := tgt.single
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.PoolTimeout = 2*time.Second, t.readTimeout, time.Second, 2*time.Second
		o.MaxRetries = 1
		o.DialerRetries = 1
		o.PoolSize, o.MinIdleConns = t.poolSize, t.minIdle
		c = redis.NewClient(o)
	}
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := c.Ping(pctx).Err(); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("cannot reach Redis %s at %s: %v", what, tgt.addrs(), err)
	}
	s.onClose(func() { _ = c.Close() })
	return c, nil
}

// primary opens the Redis primary (or the cluster's primaries) used on the
// request path of `flashgate serve` and `flashgate gateway`: the gateway's,
// the in-process inventory's and, in `serve`, the control plane's. A dial
// fails at once. On a Sentinel set-up it is, as inventoryPrimary's, a
// cluster client over the master alone (redisTune.poolPerPrimary), so that
// after a failover the first call once the client routes to the promoted
// replica is answered, where a single client's pool answered the dead
// primary's connection refused until go-redis's probe, up to a second after
// the Sentinel named the replica. Every user of it already takes a cluster
// client (a Redis Cluster's), and a transaction's or WATCH's keys share
// their sale's slot.
func (s *stack) primary(ctx context.Context, url string) (redis.UniversalClient, error) {
	return s.redisClient(ctx, "primary", url, redisTune{poolSize: 64, minIdle: 8, poolPerPrimary: true})
}

// inventoryPrimary opens the Redis primary of an inventory process
// (`flashgate inventory`), on the request path: a dial fails at once, and
// a buyer hears 503 while the primary is out of reach. On a Sentinel
// set-up it is a cluster client over the master and its replicas
// (redisTune.poolPerPrimary) that sends every command to the master, with
// a pool per address: the replica the Sentinel promotes is an address of
// its own, whose pool never failed a dial, and the client routes to it
// once it reloads its view of the master, at the Sentinel's +switch-master
// or within 200 ms of a failed call (reloadOnFailure; go-redis asks the
// Sentinel then). A
// single client's one pool, after as many failed dials to the dead primary
// as its size, answered every call with the last dial error until
// go-redis's probe, once a second, dialled again: up to a second after the
// Sentinel named the promoted replica. The dead primary's pool keeps that
// probe, once a second, until it answers again. The inventory's reserves
// already follow a cluster client (the master of the sale's slot, and a
// replica count per master address, so a promoted replica's is read anew).
func (s *stack) inventoryPrimary(ctx context.Context, url string) (redis.UniversalClient, error) {
	return s.redisClient(ctx, "primary", url, redisTune{poolSize: 64, minIdle: 8, poolPerPrimary: true})
}

// controlplanePrimary opens the Redis primary of a control plane process
// (`flashgate controlplane`): its loops and its admin API, which serves no
// buyer. On a Sentinel set-up its dials follow the primary
// (redisTune.followPrimary): after a failover the leader's next tick
// reaches the promoted replica within sentinelDialEvery of the Sentinel
// naming it, renews its lease and rebuilds the sale, where a dial that
// failed at once left it to go-redis's probe, up to a second later (and the
// leader had lost its lease meanwhile). A tick sent while the primary is out
// of reach waits for it within the tick's deadline (the lease's time to
// live); an admin call waits too (/readyz at most 2 s, then 503), where it
// failed at once before. A control plane inside `flashgate serve` shares
// the request path's client (stack.primary) and keeps failing a dial at
// once; that client routes to the promoted replica once it learns of it.
func (s *stack) controlplanePrimary(ctx context.Context, url string) (redis.UniversalClient, error) {
	return s.redisClient(ctx, "primary (control plane)", url, redisTune{poolSize: 64, followPrimary: true})
}

// blockingReader opens a second client on url for the order sink, so that
// its reads and its WAITs (each holding a connection for up to
// --sink-wait-timeout) never starve the request pool. The sink no longer
// blocks in XREADGROUP (it polls); the name stays from when it did. Its
// read timeout, waitTimeout (the sink's WAIT's own) plus replwait.Margin
// and at least a second, bounds every call of the sink: a primary gone
// silent (killed, frozen, cut off by a failover) holds it that long, not
// go-redis's 10 s margin for a blocking command. On a Sentinel set-up its
// dials follow the primary (redisTune.followPrimary): after a failover the
// sink reaches the promoted replica within sentinelDialEvery of the
// Sentinel naming it.
func (s *stack) blockingReader(ctx context.Context, url string, waitTimeout time.Duration) (redis.UniversalClient, error) {
	rt := max(time.Second, waitTimeout+replwait.Margin)
	return s.redisClient(ctx, "primary (sink)", url, redisTune{poolSize: 4, readTimeout: rt, followPrimary: true})
}

// replica opens one of the replicas for gateway reads. Gateways pick among
// several by their process id, so that a fleet spreads over the replicas;
// if the chosen one cannot be reached the next is tried. With none given, a
// cluster or Sentinel --redis reads from its replicas through a read-only
// client of its own, and a single primary serves reads itself.
func (s *stack) replica(ctx context.Context, urls []string, primaryURL string, primary redis.UniversalClient) (redis.UniversalClient, error) {
	if len(urls) == 0 {
		if tgt, err := parseRedisURL(primaryURL); err == nil && tgt.kind != redisSingle {
			return s.redisClient(ctx, "replicas", primaryURL, redisTune{poolSize: 8, readOnly: true})
		}
		return primary, nil
	}
	first := os.Getpid() % len(urls)
	var errs []error
	for i := range urls {
		u := urls[(first+i)%len(urls)]
		c, err := s.redisClient(ctx, "replica", u, redisTune{poolSize: 8, readOnly: true})
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// database opens the system of record and migrates its schema.
func (s *stack) database(ctx context.Context, dsn string) (*sqldb.DB, error) {
	octx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	db, err := sqldb.Open(octx, dsn)
	if err != nil {
		return nil, fmt.Errorf("opening database: %v", err)
	}
	s.onClose(func() { _ = db.Close() })
	return db, nil
}

// listen opens a TCP listener with a clear error.
func listen(what, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %v", what, addr, err)
	}
	return ln, nil
}

// httpURL is the base URL a client on this machine dials to reach a listener
// at a: an unspecified host (":8080", "0.0.0.0", "[::]") is not an address a
// browser or a client can use, so it becomes the loopback address.
func httpURL(a net.Addr) string {
	host, port, err := net.SplitHostPort(a.String())
	if err != nil {
		return "http://" + a.String()
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// metricsMux serves /metrics, /healthz and /readyz for tiers without an
// admin API of their own; anything else is a JSON 404 or 405 like every
// error.
func (s *stack) metricsMux(ready func(context.Context) error) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set(buildinfo.Header, buildinfo.Get().Version)
		_ = json.NewEncoder(w).Encode(map[string]string{"status": "ok", "version": buildinfo.Get().Version})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := ready(ctx); err != nil {
			s.log.Warn("readyz", "err", err)
			noroute.Error(w, flashgate.ErrUnavailable)
			return
		}
		_, _ = io.WriteString(w, flashgate.ReadyBody)
	})
	return noroute.Handler(mux)
}

// withPprof adds /debug/pprof/ in front of h when on.
func withPprof(on bool, h http.Handler) http.Handler {
	if !on {
		return h
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.Handle("/", h)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !noroute.Canonical(r.URL.Path) { // not the mux's redirect: 404, as behind it
			noroute.Error(w, flashgate.ErrNotFound)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// metricsListener opens --metrics-listen, or returns nil when it is unset.
func metricsListener(addr string) (net.Listener, error) {
	if addr == "" {
		return nil, nil
	}
	return listen("--metrics-listen", addr)
}

// serveMetrics serves metricsMux on ln in g; a nil ln serves nothing.
func (s *stack) serveMetrics(g *group, ln net.Listener, ready func(context.Context) error) {
	if ln != nil {
		g.Go("metrics", func(ctx context.Context) error { return serveHTTP(ctx, ln, s.metricsMux(ready)) })
	}
}

// group runs a process's long-lived parts (servers, loops) on an errgroup:
// the first to fail or return ends them all through the shared context, and
// wait returns the first failure.
type group struct {
	ctx    context.Context
	cancel context.CancelFunc
	eg     *errgroup.Group
}

func newGroup(ctx context.Context) *group {
	g := &group{}
	ctx, g.cancel = context.WithCancel(ctx)
	g.eg, g.ctx = errgroup.WithContext(ctx)
	return g
}

// Go runs f under name. A part that returns, even without an error, stops
// the others: a process whose server or loop ended is no longer serving.
func (g *group) Go(name string, f func(ctx context.Context) error) {
	g.eg.Go(func() error {
		defer g.cancel()
		err := f(g.ctx)
		if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("%s: %w", name, err)
	})
}

func (g *group) wait() error {
	err := g.eg.Wait()
	g.cancel()
	return err
}

// serveUntil runs serve until it fails or ctx ends, then shuts the server
// down gracefully, for at most 10 seconds.
func serveUntil(ctx context.Context, serve func() error, shutdown func(context.Context) error) error {
	errc := make(chan error, 1)
	go func() { errc <- serve() }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return shutdown(sctx)
}

// serveHTTP runs an http.Server on ln until ctx ends, then shuts it down:
// a request in flight then has requestGrace to be answered before its
// context ends. It refuses any request with a Transfer-Encoding (see
// refuseChunked) or a head over headLimit (refuseLargeHead).
func serveHTTP(ctx context.Context, ln net.Listener, h http.Handler) error {
	base, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := &http.Server{
		Handler:           refuseLargeHead(refuseChunked(h)),
		MaxHeaderBytes:    maxHeaderBytes,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       60 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return base },
	}
	return serveUntil(ctx, func() error { return srv.Serve(ln) }, func(sctx context.Context) error {
		t := time.AfterFunc(requestGrace, cancel)
		defer t.Stop()
		return srv.Shutdown(sctx)
	})
}

// requestGrace is how long a request in flight when a net/http listener
// stops has before its context ends. An admin call of a `flashgate
// controlplane` on Sentinel waits for the primary for up to
// sentinelDialPatience: without it, a stop while it waited took the whole
// 10 s of serveUntil's shutdown and ended with its error, the call
// unanswered.
const requestGrace = time.Second

// headLimit is the largest request head (request line and header lines)
// the net/http listeners take: the public listener's
// (gateway.DefaultMaxRequestHeaderSize). maxHeaderBytes is net/http's own
// bound, past which it answers 431 itself, in plain text, before any
// handler: it reads at most that and 4 KB more of a head (it took 1 MB).
const (
	headLimit      = gateway.DefaultMaxRequestHeaderSize
	maxHeaderBytes = 64 << 10
)

// refuseLargeHead answers a request whose head is over headLimit 431 with
// {"error":"bad_request"} and closes its connection, as the public
// listener does.
func refuseLargeHead(h http.Handler) http.Handler {
	_, code := flashgate.ErrorStatus(flashgate.ErrBadRequest)
	body := `{"error":"` + code + `"}` + "\n"
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if headSize(r) <= headLimit {
			h.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Connection", "close")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusRequestHeaderFieldsTooLarge)
		_, _ = io.WriteString(w, body)
	})
}

// headSize is the size of r's head as sent: the request line, each
// header line (Host's among them) and the empty line.
func headSize(r *http.Request) int {
	n := len(r.Method) + 1 + len(r.RequestURI) + 1 + len(r.Proto) + 2 + len("Host: ") + len(r.Host) + 2 + 2
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + 2 + len(v) + 2
		}
	}
	return n
}

// refuseChunked answers a request sent with a Transfer-Encoding 400
// bad_request and closes its connection. net/http reads a body framed by
// both Content-Length and Transfer-Encoding as chunked and drops the
// Content-Length before a handler can see it, then answers whatever
// follows the chunks on the same connection: a request smuggled past any
// proxy that framed the body by its length. The admin and metrics
// listeners' clients send bodies with a Content-Length, so a
// Transfer-Encoding is refused whatever comes with it.
func refuseChunked(h http.Handler) http.Handler {
	status, code := flashgate.ErrorStatus(flashgate.ErrBadRequest)
	body := `{"error":"` + code + `"}` + "\n"
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.TransferEncoding) == 0 {
			h.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Connection", "close")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	})
}

// randomSecret returns n random bytes, hex-encoded.
func randomSecret(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
