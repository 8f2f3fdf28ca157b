package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/valyala/fasthttp"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/lua"
)

// runDemo runs every tier in one process on an embedded Redis-compatible
// store and an embedded SQLite database, sells a sale to a crowd through the
// real HTTP gateway on loopback, waits until every order is in the database
// and checks the invariants. It fails unless every check held.
func runDemo(ctx context.Context, cfg *Config, stdout, stderr io.Writer) error {
	if cfg.JWTSecret == "" {
		cfg.JWTSecret = randomSecret(32)
	}
	if cfg.AdminToken == "" {
		cfg.AdminToken = randomSecret(16)
	}
	// Free ports unless chosen: the demo must not fail on a busy 8080.
	if !cfg.set["listen"] && !cfg.Serve {
		cfg.Listen = "127.0.0.1:0"
	}
	if !cfg.set["admin-listen"] && !cfg.Serve {
		cfg.AdminListen = "127.0.0.1:0"
	}
	if !cfg.set["log-level"] { // the report is the demo's output; logs only warn
		cfg.LogLevel = "warn"
	}
	st := newStack(cfg, stderr)
	defer st.close()
	st.embedded = true

	mr := miniredis.NewMiniRedis()
	if err := mr.StartAddr("127.0.0.1:0"); err != nil {
		return fmt.Errorf("starting the embedded store: %v", err)
	}
	st.onClose(mr.Close)
	dir, err := os.MkdirTemp("", "flashgate-demo-")
	if err != nil {
		return err
	}
	if !cfg.Serve {
		st.onClose(func() { _ = os.RemoveAll(dir) })
	}
	cfg.Redis = "redis://" + mr.Addr() + "/0"
	cfg.embedded = true
	cfg.DB = "sqlite://" + filepath.Join(dir, "orders.db")
	if cfg.Draw {
		if cfg.Fair {
			return &usageError{"demo: --draw and --fair are two demos: choose one"}
		}
		// A draw's holds are at the stand-in, which takes the captures and
		// releases as fast as they come.
		if !cfg.set["payments"] {
			cfg.Payments = payStripeDemo
		}
		if cfg.Payments != payStripeDemo {
			return &usageError{"demo: --draw runs with --payments stripe-local"}
		}
		if !cfg.set["draw-rate"] {
			cfg.DrawRate = 5000
		}
		if !cfg.set["draw-capture-rate"] {
			cfg.DrawCaptureRate = 2500
		}
	}
	stand, err := startStandIn(st, cfg) // payments.go; nil without stripe-local
	if err != nil {
		return err
	}

	s, c, g, base, admin, err := serveAll(ctx, st, cfg)
	if err != nil {
		return err
	}
	defer g.wait()
	defer g.cancel()

	if cfg.Fair {
		return runFairDemo(ctx, cfg, stdout, s, c, base, admin)
	}
	if cfg.Draw {
		if err := runDrawDemo(ctx, cfg, stdout, s, c, stand, base, admin); err != nil || !cfg.Serve {
			return err
		}
		if err := serveDrawDemo(ctx, cfg, stdout, s, base, admin); err != nil {
			return err
		}
		<-g.ctx.Done()
		return nil
	}
	const saleID = "demo"
	fmt.Fprintf(stdout, "flashgate demo: %d units, %d buyers, gateway %s, embedded store and SQLite\n", cfg.Units, cfg.Users, base)
	start := time.Now()
	ids, err := parseVariantIDs(cfg.Variants)
	if err != nil {
		return err
	}
	if _, err := s.cp.CreateSale(ctx, flashgate.Sale{
		ID: saleID, Name: "Limited edition sneaker", PriceCents: 12900, Total: cfg.Units,
		Variants: splitUnits(ids, cfg.Units),
	}); err != nil {
		return fmt.Errorf("creating the sale: %w", err)
	}
	if err := s.cp.Start(ctx, saleID); err != nil {
		return fmt.Errorf("opening the sale: %w", err)
	}
	if err := waitOpen(ctx, base, saleID, 5*time.Second); err != nil {
		return err
	}

	var bar io.Writer
	if cfg.Progress {
		bar = stderr
	}
	r, err := runCrowdSpec(ctx, crowdSpec{
		Target: base, Sale: saleID, Secret: []byte(cfg.JWTSecret), UserPrefix: "buyer-",
		Users: cfg.Users, Concurrency: cfg.Concurrency, Quantity: 1, Timeout: 10 * time.Second,
		Progress: bar, Variants: ids, Choice: variantChoices(ids, cfg.Users, cfg.VariantSkew, cfg.VariantSeed),
	})
	if err != nil {
		return err
	}
	printCrowd(stdout, r)

	// Wait until the sink has persisted every reserved order.
	drained, err := waitDrained(ctx, func() (adminFigures, error) {
		return getAdminFigures(admin, cfg.AdminToken, saleID)
	}, 30*time.Second)
	if err != nil {
		return fmt.Errorf("waiting for the orders to reach the database: %w", err)
	}
	fmt.Fprintf(stdout, "orders in DB  %d (drained %s after the start)\n", drained.Orders.Persisted, time.Since(start).Round(time.Millisecond))

	checks := demoChecks(ctx, cfg, c, s, r, saleID)
	if failed := printChecks(stdout, checks); failed > 0 {
		return fmt.Errorf("demo: %d of %d invariant checks failed", failed, len(checks))
	}
	if stand != nil {
		if _, err := s.cp.CreateSale(ctx, flashgate.Sale{ID: saleID + "-checkout", Name: "Checkout", PriceCents: 12900, Total: 1}); err != nil {
			return fmt.Errorf("creating the checkout sale: %w", err)
		}
		if err := s.cp.Start(ctx, saleID+"-checkout"); err != nil {
			return fmt.Errorf("opening the checkout sale: %w", err)
		}
		if err := demoCheckout(ctx, stdout, cfg, stand, base, saleID); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "demo: every invariant held (%s)\n", time.Since(start).Round(time.Millisecond))
	if !cfg.Serve {
		return nil
	}
	// A second sale, open with stock, so a visitor can press "buy" too; and
	// one that opens in a minute, to watch the countdown.
	soon := time.Now().Add(time.Minute)
	for _, sale := range []flashgate.Sale{
		{ID: "try-me", Name: "Flashgate tote bag", PriceCents: 1500, Total: 1000},
		{ID: "next-drop", Name: "Next drop: enamel pin", PriceCents: 900, Total: 50, StartsAt: &soon},
	} {
		if _, err := s.cp.CreateSale(ctx, sale); err != nil {
			return fmt.Errorf("creating sale %s: %w", sale.ID, err)
		}
	}
	if err := s.cp.Start(ctx, "try-me"); err != nil {
		return fmt.Errorf("opening sale try-me: %w", err)
	}
	visitor, _ := mintToken([]byte(cfg.JWTSecret), "visitor", time.Now().Add(24*time.Hour))
	fmt.Fprintf(stdout, "\nserving until interrupted (Ctrl-C); the database is %s\n", filepath.Join(dir, "orders.db"))
	for _, id := range []string{saleID, "try-me", "next-drop"} {
		fmt.Fprintf(stdout, "  item page  %s/sales/%s#token=%s\n", base, id, visitor)
	}
	fmt.Fprintf(stdout, "  dashboard  %s/admin/  (admin token %s)\n", admin, cfg.AdminToken)
	fmt.Fprintf(stdout, "  token      flashgate token --jwt-secret %s --user alice\n", cfg.JWTSecret)
	<-g.ctx.Done()
	return nil
}

// waitOpen polls the gateway until it reports the sale open.
func waitOpen(ctx context.Context, base, sale string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		status, body, err := fasthttp.GetTimeout(nil, base+"/api/sales/"+sale, time.Second)
		if err == nil && status == 200 {
			var v struct {
				State string `json:"state"`
			}
			if json.Unmarshal(body, &v) == nil && v.State == string(flashgate.StateOpen) {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the gateway did not report the sale open within %s", limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

type check struct {
	what string
	ok   bool
}

// printChecks prints the invariants' checks and returns how many failed.
func printChecks(w io.Writer, checks []check) (failed int) {
	fmt.Fprintln(w, "invariants")
	for _, ch := range checks {
		mark := "ok  "
		if !ch.ok {
			mark = "FAIL"
			failed++
		}
		fmt.Fprintf(w, "  %s %s\n", mark, ch.what)
	}
	return failed
}

// demoChecks compares what the crowd was told with Redis and the database.
func demoChecks(ctx context.Context, cfg *Config, c conns, s *system, r *crowdResult, sale string) []check {
	var out []check
	add := func(ok bool, format string, a ...any) { out = append(out, check{fmt.Sprintf(format, a...), ok}) }

	want := cfg.Units
	if int64(cfg.Users) < want {
		want = int64(cfg.Users)
	}
	if ids, _ := parseVariantIDs(cfg.Variants); len(ids) > 0 {
		// Each variant sells to those who wanted it, up to its total.
		want = 0
		for _, v := range splitUnits(ids, cfg.Units) {
			want += min(int64(r.Wanted[v.ID]), v.Total)
		}
	}
	created := int64(r.Created())
	add(created == want, "units sold: %d answers 201, want exactly %d", created, want)

	booked, err := c.primary.HGet(ctx, lua.SaleKey(sale), lua.FieldBooked).Int64()
	add(err == nil && booked == created, "Redis booked %d = 201 answers %d", booked, created)
	add(err == nil && booked <= cfg.Units, "not oversold: booked %d <= total %d", booked, cfg.Units)

	fig, err := c.db.Figures(ctx, sale)
	add(err == nil && fig.Persisted == created, "orders in DB %d = 201 answers %d", fig.Persisted, created)
	add(err == nil && fig.LiveUnits <= cfg.Units, "DB live units %d <= total %d", fig.LiveUnits, cfg.Units)

	missing, wrongUser := 0, 0
	users := map[string]int{}
	for id, user := range r.Orders {
		o, err := c.db.Order(ctx, id)
		if err != nil {
			missing++
			continue
		}
		if o.UserID != user || o.SaleID != sale {
			wrongUser++
		}
		users[o.UserID]++
	}
	add(missing == 0, "every 201 is a row: %d of %d order ids missing from the DB", missing, len(r.Orders))
	add(wrongUser == 0, "every row belongs to the buyer who was told 201 (%d mismatches)", wrongUser)
	live, err := c.db.LiveOrders(ctx, sale)
	dup := 0
	seen := map[string]bool{}
	for _, o := range live {
		if seen[o.UserID] {
			dup++
		}
		seen[o.UserID] = true
	}
	add(err == nil && dup == 0, "no user holds two orders (%d duplicates)", dup)
	add(err == nil && int64(len(live)) == created, "no row without a 201: %d live rows, %d answers 201", len(live), created)
	if ids, _ := parseVariantIDs(cfg.Variants); len(ids) > 0 {
		for _, v := range variantChecks(splitUnits(ids, cfg.Units), live, r.OrderVariant) {
			add(v.ok, "%s", v.what)
		}
	}
	backlog, err := c.primary.XLen(ctx, lua.OrdersKey(sale)).Result()
	add(err == nil && backlog == 0, "stream drained: backlog %d", backlog)
	errs := r.Errors
	add(errs == 0, "no transport errors (%d)", errs)
	if other := otherAnswers(r); other != "" {
		add(false, "unexpected answers: %s", other)
	}
	return out
}

// otherAnswers lists answers a demo crowd should never get.
func otherAnswers(r *crowdResult) string {
	var bad []string
	for k, n := range r.ByAnswer {
		switch {
		case k == "201", k == "409 sold_out", k == "429 rate_limited":
		default:
			bad = append(bad, fmt.Sprintf("%s ×%d", k, n))
		}
	}
	return strings.Join(bad, ", ")
}
