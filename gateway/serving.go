package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/flashgate/flashgate/gateway/conns"
)

// Start runs the background goroutines: the state refresher (every
// StateRefresh), the counter flusher (every FlushInterval), the catalog
// refresher (every CatalogRefresh) and the coarse clock of the
// connections' timeouts. Calling it again does nothing. Close
// (or Shutdown) stops them.
func (s *Server) Start() {
	s.startOnce.Do(func() {
		s.startShare()
		s.wg.Add(4)
		go func() {
			defer s.wg.Done()
			s.coarse.Run(s.base)
		}()
		go s.loop(s.cfg.StateRefresh, s.refreshState, nil)
		go s.loop(s.cfg.CatalogRefresh, s.refreshCatalog, nil)
		// A last flush, so counts admitted just before Close reach the
		// primary.
		go s.loop(s.cfg.FlushInterval, s.flushTick, s.flush)
	})
}

// loop runs f every interval until Close; then last, when not nil, runs
// once with a fresh context bounded by RedisTimeout.
func (s *Server) loop(every time.Duration, f, last func(context.Context)) {
	defer s.wg.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.base.Done():
			if last != nil {
				ctx, cancel := context.WithTimeout(context.Background(), s.cfg.RedisTimeout)
				last(ctx)
				cancel()
			}
			return
		case <-t.C:
			f(s.base)
		}
	}
}

// Close stops the background goroutines after a last flush of the counters.
// It does not stop a serving listener; Shutdown does both.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.cancel()
		s.wg.Wait()
	})
	return nil
}

// Serve starts the background goroutines and serves ln until Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	s.Start()
	if s.lean == nil {
		return s.srv.Serve(conns.NewListener(ln, s.timeouts))
	}
	s.lnMu.Lock()
	s.lns = append(s.lns, ln)
	s.lnMu.Unlock()
	split := conns.NewSplit(ln, s.cfg.FastConns, s.timeouts)
	errc := make(chan error, 2)
	go func() { errc <- s.srv.Serve(split.Fast()) }()
	go func() { errc <- s.lean.Serve(split.Lean()) }()
	err := split.Run()
	return errors.Join(err, <-errc, <-errc)
}

// Shutdown stops gracefully: /readyz fails at once, requests are still
// served for ShutdownDelay (so load balancers drain this instance), then
// the listener closes and in-flight requests finish (bounded by ctx), and
// finally the background goroutines stop after a last flush.
func (s *Server) Shutdown(ctx context.Context) error {
	s.draining.Store(true)
	if d := s.cfg.ShutdownDelay; d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
	s.lnMu.Lock()
	for _, ln := range s.lns {
		_ = ln.Close()
	}
	s.lns = nil
	s.lnMu.Unlock()
	var err error
	if s.lean != nil {
		done := make(chan error, 1)
		go func() { done <- s.lean.ShutdownWithContext(ctx) }()
		err = s.srv.ShutdownWithContext(ctx)
		err = errors.Join(err, <-done)
	} else {
		err = s.srv.ShutdownWithContext(ctx)
	}
	_ = s.Close()
	if err != nil {
		return fmt.Errorf("gateway: shutdown: %w", err)
	}
	return nil
}

// newHTTPServer builds one of the two fasthttp servers (see conns.Split);
// lean ones hold no buffers for idle connections. They have no timeouts of
// their own: the connections Serve hands them enforce ReadTimeout,
// IdleTimeout and WriteTimeout (package conns), reading no clock.
func (s *Server) newHTTPServer(lean bool) *fasthttp.Server {
	cfg := s.cfg
	return &fasthttp.Server{
		Handler:                       s.handler,
		ReduceMemoryUsage:             lean,
		ErrorHandler:                  s.serveError,
		NoDefaultServerHeader:         true,
		NoDefaultDate:                 false,
		Concurrency:                   cfg.Concurrency,
		MaxRequestBodySize:            cfg.MaxBodySize,
		ReadBufferSize:                cfg.MaxRequestHeaderSize,
		DisableHeaderNamesNormalizing: false,
		DisablePreParseMultipartForm:  true,
		LazyRequestTime:               true, // see monoBase
		CloseOnShutdown:               true,
		Logger:                        fasthttpLogger{s.log},
	}
}

// Handler returns the request handler, for tests and for embedding the
// gateway in another fasthttp server.
func (s *Server) Handler() fasthttp.RequestHandler { return s.handler }

// fasthttpLogger sends fasthttp's own messages to slog.
type fasthttpLogger struct{ l *slog.Logger }

func (f fasthttpLogger) Printf(format string, args ...any) {
	f.l.Debug("gateway: fasthttp: " + fmt.Sprintf(format, args...))
}
