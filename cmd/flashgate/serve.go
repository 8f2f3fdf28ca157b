package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"

	"github.com/flashgate/flashgate/controlplane"
	"github.com/flashgate/flashgate/controlplane/admin"
	"github.com/flashgate/flashgate/gateway"
	"github.com/flashgate/flashgate/inventory"
	"github.com/flashgate/flashgate/ordersink"
	"github.com/flashgate/flashgate/payments"
	"github.com/flashgate/flashgate/sqldb"
)

// Compile-time checks that the tiers fit the interfaces their consumers own.
var (
	_ gateway.Reserver      = (*inventory.Service)(nil)
	_ gateway.Reserver      = (*inventory.Client)(nil)
	_ gateway.Catalog       = (*sqldb.DB)(nil)
	_ gateway.Orders        = (*controlplane.Service)(nil)
	_ ordersink.Store       = (*sqldb.DB)(nil)
	_ controlplane.Store    = (*sqldb.DB)(nil)
	_ controlplane.Releaser = (*inventory.Service)(nil)
)

// system is every tier of one process, wired.
type system struct {
	db   *sqldb.DB
	inv  *inventory.Service
	cp   *controlplane.Service
	gw   *gateway.Server
	sink *ordersink.Drainer
}

// conns are the servers one process talks to.
type conns struct {
	primary, replica, sinkReader redis.UniversalClient
	db                           *sqldb.DB
}

// build wires the tiers that use c: inventory, control plane, gateway and
// (when c.sinkReader is set) the order sink. A gateway process (gatewayOnly)
// embeds a control plane for the buyer's order routes only: it runs none of
// its loops, so its collectors go to a registry nobody scrapes and its
// /metrics has the gateway's and the inventory's figures alone (each metric
// has one owner: the deployment's figures are the leader's).
func build(st *stack, cfg *Config, c conns, gatewayOnly bool) (*system, error) {
	s := &system{db: c.db}
	cpReg := st.reg
	if gatewayOnly {
		cpReg = prometheus.NewRegistry()
	}
	s.inv = inventory.New(c.primary, inventory.Config{
		Logger: st.log.With("tier", "inventory"), Metrics: st.reg, WaitReplicas: inventoryWait(cfg.WaitReplicas),
		MaxReserveBatch: cfg.ReserveBatch,
	})
	// The stack closes in reverse: the order sink, the gateway, the control
	// plane, the inventory, then the stores opened before them (each tier's
	// Close waits for the goroutines it started).
	st.onClose(func() { _ = s.inv.Close() })
	var err error
	if s.cp, err = newControlplane(st, cfg, cpReg, c.primary, c.db, s.inv); err != nil {
		return nil, err
	}
	var reserver gateway.Reserver = s.inv
	if addrs := splitList(cfg.Inventory); len(addrs) > 0 {
		cl, err := inventory.NewClient(addrs, inventory.ClientConfig{Token: cfg.InventoryTok})
		if err != nil {
			return nil, fmt.Errorf("--inventory: %v", err)
		}
		reserver = cl
	}
	var hooks gateway.Webhooks
	bodySize := 0
	if s.cp.Paying() {
		hooks, bodySize = s.cp, webhookBodySize
	}
	s.gw, err = gateway.New(gateway.Config{
		Webhooks: hooks, MaxBodySize: bodySize, StripePublishableKey: cfg.StripePubKey, StripeJS: cfg.StripeJSURL,
		// --sale-rate is the deployment's: the live gateways share it.
		ShareEvery: time.Second,

		Primary: c.primary, Replica: c.replica, WaitReplicas: gatewayWait(cfg.WaitReplicas), Reserver: reserver, Catalog: c.db, Orders: s.cp, Draws: s.cp,
		JWTSecret: []byte(cfg.JWTSecret), QueueSecret: []byte(cfg.QueueSecret), Logger: st.log.With("tier", "gateway"), Metrics: st.reg,
		StateRefresh: cfg.StateRefresh, UserRate: noLimitIfZero(cfg.UserRate), UserBurst: cfg.UserBurst,
		SaleRate: noLimitIfZero(cfg.SaleRate), MaxUsers: cfg.UserLimiters, FastConns: cfg.FastConns,
		ReserveLimit: cfg.ReserveLimit, ReserveTolerance: cfg.ReserveTol,
	})
	if err != nil {
		return nil, err
	}
	st.onClose(func() { _ = s.gw.Close() })
	if c.sinkReader != nil {
		s.sink = ordersink.New(c.sinkReader, c.db, sinkConfig(st, cfg))
		st.onClose(func() { _ = s.sink.Close() })
	}
	return s, nil
}

// sinkConfig is the order sink's configuration from the flags. Its default
// name is the host name and the admin listener's port: stable across
// restarts, so that a restarted sink re-reads its own pending entries at
// once, and different for two sinks on one host.
func sinkConfig(st *stack, cfg *Config) ordersink.Config {
	name := cfg.SinkName
	if name == "" {
		_, port, _ := net.SplitHostPort(cfg.AdminListen)
		if port == "0" {
			port = ""
		}
		name = ordersink.DefaultConsumer(port)
	}
	return ordersink.Config{
		Consumer: name, Logger: st.log.With("tier", "ordersink"), Metrics: st.reg,
		WaitReplicas: cfg.SinkWaitReplicas, WaitTimeout: cfg.SinkWaitTimeout, ClaimIdle: cfg.SinkClaimIdle,
	}
}

// noLimitIfZero maps the flags' "0 = no limit" to the gateway's negative
// rate (where 0 means the default).
func noLimitIfZero(r float64) float64 {
	if r == 0 {
		return -1
	}
	return r
}

// newControlplane wires a control plane to the primary, the database and
// the inventory; it registers its collectors in reg.
//
// The inventory inv gives units back and makes the orders of draws'
// winners; with a payment provider, a draw's captures and releases go
// through a payments.Pacer at the provider's rate.
func newControlplane(st *stack, cfg *Config, reg *prometheus.Registry, primary redis.UniversalClient, db *sqldb.DB, inv *inventory.Service) (*controlplane.Service, error) {
	prov, err := paymentProvider(cfg)
	if err != nil {
		return nil, err
	}
	var pstore controlplane.PaymentStore
	var capt controlplane.DrawCapturer
	if prov != nil {
		pstore = db
		if c, ok := prov.(payments.Capturer); ok {
			capt = payments.NewPacer(c, payments.PacerConfig{PerEndpoint: cfg.DrawCaptureRate, Overall: cfg.DrawRate})
		}
	}
	cp, err := controlplane.New(controlplane.Config{
		Redis: primary, Store: db, Releaser: inv, DrawReserver: inv, DrawCapturer: capt, AdminToken: cfg.AdminToken, QueueSeedSecret: []byte(cfg.QueueSeedSec), Standalone: cfg.embedded,
		Logger: st.log.With("tier", "controlplane"), PaymentWindow: cfg.PaymentWindow,
		ResyncEvery: cfg.ResyncEvery, Metrics: reg, Gatherer: reg,
		Payments: prov, PaymentStore: pstore, Currency: cfg.PaymentCurrency, PaymentGrace: cfg.PaymentGrace,
	})
	if err != nil {
		return nil, err
	}
	st.onClose(func() { _ = cp.Close() })
	return cp, nil
}

// runGatewayOn serves the gateway on ln until ctx ends.
func (s *system) runGatewayOn(g *group, ln net.Listener) {
	g.Go("gateway", func(ctx context.Context) error {
		return serveUntil(ctx, func() error { return s.gw.Serve(ln) }, s.gw.Shutdown)
	})
}

// runAll serves the gateway on pub and the admin API on adm, and runs the
// control plane's loops and the order sink, all in g.
func (s *system) runAll(g *group, cfg *Config, pub, adm net.Listener) {
	s.runGatewayOn(g, pub)
	g.Go("admin", func(ctx context.Context) error { return serveHTTP(ctx, adm, withPprof(cfg.Pprof, admin.Handler(s.cp))) })
	g.Go("controlplane", s.cp.Run)
	g.Go("ordersink", s.sink.Run)
}

// listenBoth opens the public and the admin listener.
func listenBoth(cfg *Config) (pub, adm net.Listener, err error) {
	if pub, err = listen("--listen", cfg.Listen); err != nil {
		return nil, nil, err
	}
	if adm, err = listen("--admin-listen", cfg.AdminListen); err != nil {
		pub.Close()
		return nil, nil, err
	}
	return pub, adm, nil
}

// openConns opens the servers cfg names; sink says whether to open the
// order sink's own blocking reader.
func openConns(ctx context.Context, st *stack, cfg *Config, sink bool) (conns, error) {
	var c conns
	var err error
	if c.primary, err = st.primary(ctx, cfg.Redis); err != nil {
		return c, err
	}
	if c.replica, err = st.replica(ctx, splitList(cfg.RedisReplicas), cfg.Redis, c.primary); err != nil {
		return c, err
	}
	if sink {
		if c.sinkReader, err = st.blockingReader(ctx, cfg.Redis, cfg.SinkWaitTimeout); err != nil {
			return c, err
		}
	}
	if c.db, err = st.database(ctx, cfg.DB); err != nil {
		return c, err
	}
	return c, nil
}

// serveAll opens cfg's servers, wires every tier and starts them all in a
// new group, which the caller waits on. It returns the public and admin
// base URLs too.
func serveAll(ctx context.Context, st *stack, cfg *Config) (s *system, c conns, g *group, public, admin string, err error) {
	if c, err = openConns(ctx, st, cfg, true); err != nil {
		return nil, c, nil, "", "", err
	}
	if s, err = build(st, cfg, c, false); err != nil {
		return nil, c, nil, "", "", err
	}
	pub, adm, err := listenBoth(cfg)
	if err != nil {
		return nil, c, nil, "", "", err
	}
	g = newGroup(ctx)
	s.runAll(g, cfg, pub, adm)
	return s, c, g, httpURL(pub.Addr()), httpURL(adm.Addr()), nil
}

func runServe(ctx context.Context, cfg *Config, stdout, stderr io.Writer) error {
	st := newStack(cfg, stderr)
	defer st.close()
	_, _, g, public, admin, err := serveAll(ctx, st, cfg)
	if err != nil {
		return err
	}
	st.log.Info("flashgate serving", "public", public, "admin", admin)
	return g.wait()
}

func runGateway(ctx context.Context, cfg *Config, stdout, stderr io.Writer) error {
	st := newStack(cfg, stderr)
	defer st.close()
	if cfg.AdminToken == "" {
		// The gateway uses the control plane's order methods in-process but
		// never serves its admin API: an unguessable token keeps it shut.
		cfg.AdminToken = randomSecret(32)
	}
	c, err := openConns(ctx, st, cfg, false)
	if err != nil {
		return err
	}
	s, err := build(st, cfg, c, true)
	if err != nil {
		return err
	}
	mln, err := metricsListener(cfg.MetricsListen)
	if err != nil {
		return err
	}
	pub, err := listen("--listen", cfg.Listen)
	if err != nil {
		return err
	}
	st.log.Info("flashgate gateway serving", "public", httpURL(pub.Addr()))
	g := newGroup(ctx)
	s.runGatewayOn(g, pub)
	st.serveMetrics(g, mln, func(ctx context.Context) error { return c.primary.Ping(ctx).Err() })
	return g.wait()
}

func runInventory(ctx context.Context, cfg *Config, stdout, stderr io.Writer) error {
	st := newStack(cfg, stderr)
	defer st.close()
	primary, err := st.inventoryPrimary(ctx, cfg.Redis)
	if err != nil {
		return err
	}
	inv := inventory.New(primary, inventory.Config{
		Logger: st.log.With("tier", "inventory"), Metrics: st.reg, WaitReplicas: inventoryWait(cfg.WaitReplicas),
		MaxReserveBatch: cfg.ReserveBatch,
	})
	st.onClose(func() { _ = inv.Close() })
	ln, err := listen("--listen", cfg.Listen)
	if err != nil {
		return err
	}
	srv := &fasthttp.Server{
		Handler:            inventory.NewHandler(inv, inventory.HandlerConfig{Logger: st.log.With("tier", "inventory"), Token: cfg.InventoryTok}),
		Name:               "flashgate-inventory",
		ReadTimeout:        5 * time.Second,
		WriteTimeout:       5 * time.Second,
		IdleTimeout:        60 * time.Second,
		MaxRequestBodySize: inventory.MaxBodySize,
		ErrorHandler:       inventory.ServerErrorHandler,
	}
	mln, err := metricsListener(cfg.MetricsListen)
	if err != nil {
		return err
	}
	st.log.Info("flashgate inventory serving", "listen", httpURL(ln.Addr()))
	g := newGroup(ctx)
	g.Go("inventory", func(ctx context.Context) error {
		return serveUntil(ctx, func() error { return srv.Serve(ln) }, srv.ShutdownWithContext)
	})
	st.serveMetrics(g, mln, inv.Ping)
	return g.wait()
}

func runOrdersink(ctx context.Context, cfg *Config, stdout, stderr io.Writer) error {
	st := newStack(cfg, stderr)
	defer st.close()
	reader, err := st.blockingReader(ctx, cfg.Redis, cfg.SinkWaitTimeout)
	if err != nil {
		return err
	}
	db, err := st.database(ctx, cfg.DB)
	if err != nil {
		return err
	}
	scfg := sinkConfig(st, cfg)
	sink := ordersink.New(reader, db, scfg)
	st.onClose(func() { _ = sink.Close() })
	adm, err := listen("--admin-listen", cfg.AdminListen)
	if err != nil {
		return err
	}
	st.log.Info("flashgate ordersink running", "metrics", httpURL(adm.Addr())+"/metrics", "consumer", scfg.Consumer)
	g := newGroup(ctx)
	g.Go("ordersink", sink.Run)
	g.Go("metrics", func(ctx context.Context) error {
		return serveHTTP(ctx, adm, st.metricsMux(func(ctx context.Context) error {
			if err := reader.Ping(ctx).Err(); err != nil {
				return err
			}
			return db.Ping(ctx)
		}))
	})
	return g.wait()
}

func runControlplane(ctx context.Context, cfg *Config, stdout, stderr io.Writer) error {
	st := newStack(cfg, stderr)
	defer st.close()
	primary, err := st.controlplanePrimary(ctx, cfg.Redis)
	if err != nil {
		return err
	}
	db, err := st.database(ctx, cfg.DB)
	if err != nil {
		return err
	}
	inv := inventory.New(primary, inventory.Config{Logger: st.log.With("tier", "inventory")})
	st.onClose(func() { _ = inv.Close() })
	cp, err := newControlplane(st, cfg, st.reg, primary, db, inv)
	if err != nil {
		return err
	}
	adm, err := listen("--admin-listen", cfg.AdminListen)
	if err != nil {
		return err
	}
	st.log.Info("flashgate controlplane serving", "admin", httpURL(adm.Addr()))
	g := newGroup(ctx)
	g.Go("admin", func(ctx context.Context) error { return serveHTTP(ctx, adm, withPprof(cfg.Pprof, admin.Handler(cp))) })
	g.Go("controlplane", cp.Run)
	return g.wait()
}
