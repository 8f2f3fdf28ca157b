package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane"
	"github.com/flashgate/flashgate/controlplane/drawjournal"
	"github.com/flashgate/flashgate/internal/stripelocal"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/internal/testenv/testclock"
	"github.com/flashgate/flashgate/inventory"
	"github.com/flashgate/flashgate/lua"
	"github.com/flashgate/flashgate/ordersink"
	"github.com/flashgate/flashgate/payments"
	"github.com/flashgate/flashgate/sqldb"
)

// The draw phase (PHASES=draw, or in the default PHASES): a draw sale of
// three sizes with DRAW_ENTRIES entries (default 100,000; the issue's
// figure is 1,000,000) for DRAW_UNITS units (default 1,000; the issue's
// 10,000), closed by the control plane's leader through the real close
// (controlplane/drawclose) against the stand-in provider limited as
// Stripe's live mode is (100 requests/s overall, 25/s per endpoint),
// captures and releases paced by payments.Pacer, on a real redis-server
// and SQLite.
//
// The entries are not made by HTTP requests (a million entries through the
// gateway, each with its proof of work, would measure the entry path, not
// the draw): each is put into Redis by the entry path's own scripts, in
// pipelines of drawChunk, in the order a real entry makes them —
// lua.DrawEnter (the gateway's entry), lua.DrawHold with a hold the
// stand-in made already confirmed (stripelocal.PutHold: the hold the
// drawhold tier would create, and the buyer's page confirm), lua.DrawSet
// pending → entered and the check list's ZREM (the hold's webhook,
// drawhold's enter) — and the journal they write reaches the database's
// draw_entries through drawjournal.Flush, as the leader's tick does.
//
// Releasing every loser's hold at 25 requests/s takes entries / 25 s (11
// hours for a million), so by default the phase does not wait for it:
// it measures the release rate for DRAW_RELEASE_SECONDS (default 60) after
// the last capture and projects the time to release every hold from it.
// DRAW_RELEASE_SECONDS=0 waits until every hold is released.

// drawChunk is how many entries one pipeline of each script carries.
const drawChunk = 1000

// drawResult is what the draw phase measured.
type drawResult struct {
	Entries, Units int
	ReleaseWindow  time.Duration // DRAW_RELEASE_SECONDS; 0: waited for every release
	FillElapsed    time.Duration // putting the entries into Redis and the database
	// RedisBytesPerEntry is INFO used_memory's delta over the fill (the
	// journal written to the database and trimmed) per entry;
	// KeysBytesPerEntry the entries and holds hashes' MEMORY USAGE per
	// entry.
	RedisBytesPerEntry, KeysBytesPerEntry float64
	// HeapBytesPerEntry is the Go heap's peak over the close above its
	// level before (runtime.MemStats.HeapAlloc, sampled every second), per
	// entry: the control plane's close holding the draw.
	HeapBytesPerEntry float64
	// From the close (the clock set to entries_close_at with the leader
	// running): the draw's seed revealed and winners published; the first
	// hold captured or released; every winner's hold captured; every hold
	// released (0 when not waited for).
	Drawn, FirstMove, Captured, Released time.Duration
	CapturedN, ReleasedN, Promoted       int64
	// ReleaseRate is the holds released a second over the window after
	// the last capture; ReleaseProjected the time from the close to every
	// hold released at that rate.
	ReleaseRate      float64
	ReleaseProjected time.Duration
	// The Pacer's counts, and the 429s the stand-in answered.
	Pacer    payments.PacerStats
	Limited  int
	Complete bool // every hold captured or released
}

// drawSizes are the draw's variants.
var drawSizes = []string{"S", "M", "L"}

func (b *bench) drawPhase(ctx context.Context) error {
	entries, err := envInt("DRAW_ENTRIES", 100_000)
	if err != nil {
		return err
	}
	units, err := envInt("DRAW_UNITS", 1_000)
	if err != nil {
		return err
	}
	window, err := envInt("DRAW_RELEASE_SECONDS", 60)
	if err != nil {
		return err
	}
	if entries < 1 || units < len(drawSizes) || units > entries {
		return fmt.Errorf("DRAW_ENTRIES=%d DRAW_UNITS=%d: want at least %d units, and no more units than entries", entries, units, len(drawSizes))
	}
	res := &drawResult{Entries: entries, Units: units, ReleaseWindow: time.Duration(window) * time.Second}
	b.rep.draw = res

	bin, err := lookPath("redis-server")
	if err != nil {
		return err
	}
	srv, err := redistest.StartServer(bin, b.dir)
	if err != nil {
		return fmt.Errorf("starting redis-server: %w", err)
	}
	defer srv.Stop()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 8})
	defer rdb.Close()
	db, err := sqldb.Open(ctx, "sqlite://"+filepath.Join(b.dir, "draw.db"))
	if err != nil {
		return err
	}
	defer db.Close()
	stand := stripelocal.New("sk_test_bench", "whsec_bench")
	ts := httptest.NewServer(stand)
	defer ts.Close()
	st, err := payments.NewStripe(payments.StripeConfig{Key: stand.Key, WebhookSecret: stand.WebhookSecret, APIBase: ts.URL})
	if err != nil {
		return err
	}
	pacer := payments.NewPacer(st, payments.PacerConfig{}) // Stripe's live-mode limits: 100/s, 25/s per endpoint
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	open := time.Now().Truncate(time.Second)
	closeAt := open.Add(time.Hour)
	clock := testclock.New(open)
	inv := inventory.New(rdb, inventory.Config{Logger: quiet, Clock: clock})
	cp, err := controlplane.New(controlplane.Config{Redis: rdb, Store: db, Releaser: inv, DrawReserver: inv, DrawCapturer: pacer,
		AdminToken: b.adminTok, Logger: quiet, Clock: clock})
	if err != nil {
		return err
	}
	variants := make([]flashgate.Variant, len(drawSizes))
	for i, id := range drawSizes {
		variants[i] = flashgate.Variant{ID: id, Name: "Size " + id, Total: int64(units / len(drawSizes))}
		if i < units%len(drawSizes) {
			variants[i].Total++
		}
	}
	const saleID = "draw-bench"
	sale, err := cp.CreateSale(ctx, flashgate.Sale{ID: saleID, Name: "Draw", PriceCents: 18000, Total: int64(units), PerUser: 1,
		Queue: flashgate.QueueDraw, EntriesOpenAt: &open, EntriesCloseAt: &closeAt, Variants: variants})
	if err != nil {
		return fmt.Errorf("creating the draw: %w", err)
	}
	if err := cp.CommitDraw(ctx, sale); err != nil {
		return err
	}

	d := &drawFill{ctx: ctx, rdb: rdb, db: db, stand: stand, sale: saleID, now: open}
	m0, err := usedMemoryOf(ctx, rdb)
	if err != nil {
		return err
	}
	t0 := time.Now()
	if err := d.fill(entries, func(done int) { b.logf("draw: %d of %d entries in", done, entries) }); err != nil {
		return err
	}
	res.FillElapsed = time.Since(t0)
	m1, err := usedMemoryOf(ctx, rdb)
	if err != nil {
		return err
	}
	res.RedisBytesPerEntry = float64(m1-m0) / float64(entries)
	var keys int64
	for _, k := range []string{lua.DrawKey(saleID), lua.DrawHoldKey(saleID)} {
		m, err := rdb.MemoryUsage(ctx, k, 0).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		keys += m
	}
	res.KeysBytesPerEntry = float64(keys) / float64(entries)
	status, err := cp.SaleStatus(ctx, saleID)
	if err != nil {
		return err
	}
	if status.Draw == nil || status.Draw.Entered != int64(entries) {
		return fmt.Errorf("after the fill the sale counts %+v entered, want %d", status.Draw, entries)
	}
	b.logf("draw: %d entries in Redis and the database in %v: %.0f bytes per entry in Redis (the entries and holds hashes: %.0f)",
		entries, res.FillElapsed.Round(time.Millisecond), res.RedisBytesPerEntry, res.KeysBytesPerEntry)

	// The close: the stand-in limited as Stripe is, the leader and the
	// order sink running, the clock at entries_close_at.
	stand.Limits(payments.DefaultOverall, payments.DefaultPerEndpoint)
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	heap0 := ms.HeapAlloc
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	sink := ordersink.New(rdb, db, ordersink.Config{Consumer: "bench", Logger: quiet})
	wg.Go(func() { _ = sink.Run(runCtx) })
	clock.Set(closeAt)
	closed := time.Now()
	wg.Go(func() { _ = cp.Run(runCtx) })
	err = b.watchDraw(ctx, rdb, cp, saleID, closed, heap0, res)
	// The counts before the stop: stopping cancels the releases in
	// flight, which the Pacer counts as given up.
	res.Pacer, res.Limited = pacer.Stats(), stand.Limited()
	stop()
	wg.Wait()
	if err != nil {
		return err
	}
	b.logf("draw: drawn %v after the close, first hold moved %v, %d winners captured %v (limit %v), %d released at %.1f/s: all released %v (projected: %v; limit %v); 429s answered %d, %d seen by the Pacer, calls given up %d",
		res.Drawn.Round(time.Millisecond), res.FirstMove.Round(time.Millisecond), res.CapturedN, res.Captured.Round(time.Millisecond), drawCaptureLimit(units),
		res.ReleasedN, res.ReleaseRate, res.Released.Round(time.Second), res.ReleaseProjected.Round(time.Second), drawCaptureLimit(entries),
		res.Limited, res.Pacer.RateLimited, res.Pacer.Failed)
	// A 429 is retried by the Stripe client itself (one network retry)
	// and past it by the Pacer after its Retry-After: one left unretried
	// is a call the Pacer gave up on.
	if res.Pacer.Failed > 0 || res.CapturedN < int64(units) {
		return fmt.Errorf("%d of %d captured; the stand-in answered %d 429s, the Pacer gave up on %d calls", res.CapturedN, units, res.Limited, res.Pacer.Failed)
	}
	return nil
}

// drawCaptureLimit is the bound on n captures or releases at 25
// a second: n / 25 s + 1 minute.
func drawCaptureLimit(n int) time.Duration {
	return time.Duration(n)*time.Second/payments.DefaultPerEndpoint + time.Minute
}

// watchDraw follows the close of sale from closed (bounded): when its
// winners were published, its first hold moved, its winners captured,
// every hold released or the release window passed; it samples the Go heap
// every second against heap0.
func (b *bench) watchDraw(ctx context.Context, rdb *redis.Client, cp *controlplane.Service, sale string, closed time.Time,
	heap0 uint64, res *drawResult) error {
	losers := int64(res.Entries - res.Units)
	// Bounded: the captures and releases at the provider's rate, and
	// five minutes more.
	limit := drawCaptureLimit(res.Units) + 5*time.Minute
	if res.ReleaseWindow == 0 {
		limit += drawCaptureLimit(res.Entries)
	} else {
		limit += res.ReleaseWindow
	}
	var (
		peak       uint64
		lastSample time.Time
		relAt      int64 // released when the last capture was made
		logAt      = time.Now()
	)
	sample := func() {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		peak = max(peak, ms.HeapAlloc)
		lastSample = time.Now()
	}
	defer func() {
		if peak > heap0 {
			res.HeapBytesPerEntry = float64(peak-heap0) / float64(res.Entries)
		}
	}()
	for {
		if time.Since(closed) > limit {
			return fmt.Errorf("the draw's close not done %v after it: %d of %d captured, %d of %d released", limit, res.CapturedN, res.Units, res.ReleasedN, losers)
		}
		if time.Since(lastSample) >= time.Second {
			sample()
		}
		if res.Drawn == 0 {
			if n, err := rdb.HExists(ctx, lua.SaleKey(sale), lua.FieldDrawWinners).Result(); err == nil && n {
				res.Drawn = time.Since(closed)
			}
		}
		if p := cp.DrawProgress(sale); p != nil {
			res.CapturedN, res.ReleasedN, res.Promoted = p.Captured.Load(), p.Released.Load(), p.Promoted.Load()
		}
		if res.FirstMove == 0 && res.CapturedN+res.ReleasedN > 0 {
			res.FirstMove = time.Since(closed)
		}
		if res.Captured == 0 && res.CapturedN >= int64(res.Units) {
			res.Captured, relAt = time.Since(closed), res.ReleasedN
		}
		if res.ReleasedN >= losers && res.Captured > 0 {
			res.Released, res.Complete = time.Since(closed), true
			res.ReleaseRate = float64(res.ReleasedN-relAt) / max(res.Released-res.Captured, time.Second).Seconds()
			res.ReleaseProjected = res.Released
			return nil
		}
		if res.Captured > 0 && res.ReleaseWindow > 0 && time.Since(closed)-res.Captured >= res.ReleaseWindow {
			now := time.Since(closed)
			res.ReleaseRate = float64(res.ReleasedN-relAt) / (now - res.Captured).Seconds()
			if res.ReleaseRate > 0 {
				res.ReleaseProjected = now + time.Duration(float64(losers-res.ReleasedN)/res.ReleaseRate*float64(time.Second))
			}
			return nil
		}
		if time.Since(logAt) >= 30*time.Second {
			logAt = time.Now()
			b.logf("draw: %v after the close: %d of %d captured, %d of %d released", time.Since(closed).Round(time.Second), res.CapturedN, res.Units, res.ReleasedN, losers)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// drawFill puts a draw's entries into Redis and the database as the entry
// path does (see the phase's comment).
type drawFill struct {
	ctx   context.Context
	rdb   *redis.Client
	db    *sqldb.DB
	stand *stripelocal.Server
	sale  string
	now   time.Time // the clock of the entries: the window's opening
}

// fill makes n entries, drawChunk per pipeline of each step, the sizes in
// turn, and writes the journal to the database after each ten chunks (as
// the leader's ticks do meanwhile) and at the end; it calls progress after
// each 100,000.
func (d *drawFill) fill(n int, progress func(done int)) error {
	ctx := d.ctx
	for _, s := range []*redis.Script{lua.DrawEnter, lua.DrawHold, lua.DrawSet} {
		if err := s.Load(ctx, d.rdb).Err(); err != nil {
			return err
		}
	}
	ms := d.now.UnixMilli()
	users, ids, intents := make([]string, drawChunk), make([]string, drawChunk), make([]string, drawChunk)
	for i := 0; i < n; i += drawChunk {
		m := min(drawChunk, n-i)
		for j := range m {
			users[j], ids[j] = fmt.Sprintf("entrant-%08d", i+j), fmt.Sprintf("dbench%010d", i+j)
			intents[j] = d.stand.PutHold(18000, "usd", "4242424242424242")
		}
		steps := []func(redis.Pipeliner, int){
			func(p redis.Pipeliner, j int) {
				lua.DrawEnter.EvalSha(ctx, p, lua.DrawEnterKeys(d.sale, "none"), users[j], ids[j], drawSizes[(i+j)%len(drawSizes)], 1, ms, 0)
			},
			func(p redis.Pipeliner, j int) {
				lua.DrawHold.EvalSha(ctx, p, lua.DrawHoldKeys(d.sale), users[j], ids[j], intents[j], ms+30_000)
			},
			func(p redis.Pipeliner, j int) {
				lua.DrawSet.EvalSha(ctx, p, lua.DrawChangeKeys(d.sale), users[j], ids[j], string(flashgate.DrawEntered), ms, string(flashgate.DrawPending))
				p.ZRem(ctx, lua.DrawCheckKey(d.sale), ids[j])
			},
		}
		for k, step := range steps {
			pipe := d.rdb.Pipeline()
			for j := range m {
				step(pipe, j)
			}
			cmds, err := pipe.Exec(ctx)
			if err != nil {
				return fmt.Errorf("entering (step %d): %w", k+1, err)
			}
			for _, c := range cmds {
				if v, ok := c.(*redis.Cmd); ok {
					if s, err := v.Slice(); err != nil || len(s) == 0 || s[0] != int64(lua.DrawOK) {
						return fmt.Errorf("entering (step %d): %v %v", k+1, s, err)
					}
				}
			}
		}
		if (i/drawChunk)%10 == 9 || i+m >= n {
			if err := d.flush(); err != nil {
				return err
			}
		}
		if (i+m)%100_000 == 0 {
			progress(i + m)
		}
	}
	return nil
}

// flush writes the whole journal to the database (bounded).
func (d *drawFill) flush() error {
	for range 1_000_000 {
		n, err := drawjournal.Flush(d.ctx, d.rdb, d.db, d.sale, 0)
		if err != nil || n == 0 {
			return err
		}
	}
	return errors.New("the draw journal never emptied")
}

// usedMemoryOf is INFO memory's used_memory.
func usedMemoryOf(ctx context.Context, rdb *redis.Client) (int64, error) {
	return (&dropRun{ctx: ctx, rdb: rdb}).usedMemory()
}

// drawSection is the report's section of the draw phase.
func (r *report) drawSection() string {
	d := r.draw
	if d == nil {
		return ""
	}
	var sb strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&sb, format, a...) }
	p("\n## Draw: the close of a draw at the provider's rate\n\n")
	p("A draw sale of three sizes with **%s entries** for %s units (`DRAW_ENTRIES`, `DRAW_UNITS`), closed by the control plane's leader through the real close (`controlplane/drawclose`) on a real redis-server and SQLite, against the stand-in provider limited as Stripe's live mode is (100 requests/s overall, 25/s per endpoint, 429 with `Retry-After: 1` over either), captures and releases paced by `payments.Pacer` at those rates (`cmd/flashgate-bench/draw.go`). ",
		num(float64(d.Entries)), num(float64(d.Units)))
	p("The entries are put in by the entry path's own scripts in pipelines of %d, not by HTTP requests: `DrawEnter`, `DrawHold` with a hold the stand-in made confirmed, `DrawSet` pending → entered (what the hold's webhook does); their journal reaches the database through `drawjournal.Flush`, as the leader's tick does. That took %s.\n\n",
		drawChunk, d.FillElapsed.Round(time.Millisecond))
	p("| | |\n|---|---|\n")
	p("| Redis memory per entry (`INFO memory` used_memory delta, the journal written to the database) | **%.0f bytes** (entries and holds hashes' `MEMORY USAGE`: %.0f) |\n", d.RedisBytesPerEntry, d.KeysBytesPerEntry)
	p("| Go heap of the close per entry (peak `HeapAlloc` over the close above its level before, sampled each second) | **%.0f bytes** |\n", d.HeapBytesPerEntry)
	p("| from the close to the winners drawn (seed revealed, the draw's file stored, winners published) | **%s** |\n", d.Drawn.Round(time.Millisecond))
	p("| to the first hold captured or released (every entry moved to won or lost first) | %s |\n", d.FirstMove.Round(time.Millisecond))
	p("| to every winner captured (%s of %s; %d promoted) | **%s** (the issue's bound: %s / 25 s + 1 min = %s) |\n",
		num(float64(d.CapturedN)), num(float64(d.Units)), d.Promoted, d.Captured.Round(time.Millisecond), num(float64(d.Units)), drawCaptureLimit(d.Units))
	losers := d.Entries - d.Units
	if d.Complete {
		p("| to every other hold released (%s) | **%s** at %.1f/s after the last capture (the bound: %s / 25 s + 1 min = %s) |\n",
			num(float64(losers)), d.Released.Round(time.Second), d.ReleaseRate, num(float64(d.Entries)), drawCaptureLimit(d.Entries))
	} else {
		p("| holds released: **not waited for** (`DRAW_RELEASE_SECONDS=%d`) | %s of %s released; **%.1f/s** over the %d s after the last capture |\n",
			int(d.ReleaseWindow/time.Second), num(float64(d.ReleasedN)), num(float64(losers)), d.ReleaseRate, int(d.ReleaseWindow/time.Second))
		p("| every hold released, projected at that rate | **%s** after the close (the bound: %s / 25 s + 1 min = %s) |\n",
			d.ReleaseProjected.Round(time.Second), num(float64(d.Entries)), drawCaptureLimit(d.Entries))
	}
	p("| `429`s the stand-in answered / of them seen by the Pacer (past the Stripe client's own retry) and tried again after `Retry-After` / calls given up | **%d / %d / %d** (%s calls through the Pacer, %d tried again) |\n",
		d.Limited, d.Pacer.RateLimited, d.Pacer.Failed, num(float64(d.Pacer.Calls)), d.Pacer.Retries)
	return sb.String()
}
