//go:build faults

package faults

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flashgate/flashgate/internal/testenv/procgroup"
	"github.com/flashgate/flashgate/lua"
)

// scenario is one fault and what must hold through it.
type scenario struct {
	name  string
	fault string // what is done, for the report
	needs string // the issue 8 item whose fix it proves, if any
	opts  clusterOpts
	total int64 // units on sale (default 2500)
	// buyers is the first crowd's size (default 2000, arriving over
	// spread): fewer than the units, so every buyer should end with an
	// order and a buyer who does not is a loss.
	buyers int
	// spread is how long the first crowd takes to arrive (default 5s).
	spread time.Duration
	// inject runs beside the first crowd; x.at waits for a moment of it.
	inject func(ctx context.Context, x *run)
	// between runs after the first crowd has settled (refunds).
	between func(ctx context.Context, x *run)
	// no503 fails the scenario on any 503 attempt, retried or not.
	no503 bool
	// lossesOK, when set, says why buyers left without an order are
	// reported but do not fail the scenario, provided that it recovered in
	// time (run.recoveredInTime).
	lossesOK string
	// variants, when set, sells the sale in three sizes (saleVariants):
	// each buyer asks for one, the history's stock model is one per size,
	// and the second crowd buys each size's free units.
	variants bool
	// buckets, when above 1 (with variants), splits the sale's stock over
	// that many buckets: the checks then sum the stock of every bucket.
	buckets int
	// own, when set, runs the scenario in place of the crowds above.
	own func(t *testing.T, s *suite, sc scenario) result
}

// run is one scenario's run: its cluster, clock and findings.
type run struct {
	t    *testing.T
	s    *suite
	sc   scenario
	c    *cluster
	sale string
	// tags are the hash tags whose hashes and streams hold the sale's
	// stock and orders: the sale's own, and a bucketed sale's buckets
	// (readTags; their layout is fixed for the sale's life).
	tags  []string
	start time.Time // the first crowd's start
	crowd *crowd

	mu       sync.Mutex
	problems []string
	notes    []string
	happened []string
	repairAt time.Time     // when the repair began (restart, SIGCONT)
	readyIn  time.Duration // from repairAt until the repaired part was ready
	recovery time.Duration // set by scenarios that measure their own recovery
	recWhat  string
	// flushedAt is when a FLUSHALL was sent and flushDone when it
	// returned; destroyed counts the orders confirmed before it that it
	// wiped from the stream undrained.
	flushedAt, flushDone time.Time
	destroyed            int
	// aofFrom and aofTo bound the purchases a kill -9 of the Redis primary
	// under appendfsync everysec may lose (aofLoss): Redis answers writes
	// its AOF holds back while a background fsync runs, up to 2s of them,
	// and the restarted primary (a new replication id) makes its replica
	// drop them too. README's "Redis restart with AOF" row says so. aofLost
	// counts the confirmed orders so lost.
	aofFrom, aofTo time.Time
	aofLost        int
	// recoveredInTime: the scenario's own recovery check passed, so its
	// lossesOK applies.
	recoveredInTime bool
}

// problem records a broken promise; it fails the scenario at the end.
func (x *run) problem(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	x.mu.Lock()
	x.problems = append(x.problems, msg)
	x.mu.Unlock()
	x.t.Error(msg)
}

// notef records an observation for the report.
func (x *run) notef(format string, args ...any) {
	x.mu.Lock()
	x.notes = append(x.notes, fmt.Sprintf(format, args...))
	x.mu.Unlock()
}

// event records what the fault did, stamped with the crowd's clock.
func (x *run) event(format string, args ...any) {
	msg := fmt.Sprintf("t=%.1fs (%d buyers answered) ", time.Since(x.start).Seconds(), x.crowd.done.Load()) + fmt.Sprintf(format, args...)
	x.mu.Lock()
	x.happened = append(x.happened, msg)
	x.mu.Unlock()
	x.t.Log(msg)
}

// at sleeps until d after the crowd's start.
func (x *run) at(ctx context.Context, d time.Duration) {
	select {
	case <-time.After(time.Until(x.start.Add(d))):
	case <-ctx.Done():
	}
}

// repair runs restart (a start, a SIGCONT) as the end of the fault and
// records when it began and how long it took.
func (x *run) repair(what string, restart func() error) {
	x.mu.Lock()
	x.repairAt = time.Now()
	x.mu.Unlock()
	err := restart()
	x.mu.Lock()
	x.readyIn = time.Since(x.repairAt)
	x.mu.Unlock()
	if err != nil {
		x.problem("%s: %v", what, err)
		return
	}
	x.event("%s (ready in %v)", what, x.readyIn.Round(time.Millisecond))
}

// killRestart kill -9s p at 1.5s and starts it again down later.
func killRestart(pick func(c *cluster) *proc, down time.Duration) func(context.Context, *run) {
	return func(ctx context.Context, x *run) {
		p := pick(x.c)
		x.at(ctx, 1500*time.Millisecond)
		if err := p.kill9(); err != nil {
			x.problem("kill -9 %s: %v", p.name, err)
			return
		}
		x.event("kill -9 %s", p.name)
		time.Sleep(down) // not a synchronisation: how long the process stays down
		x.repair("restarted "+p.name, func() error { return p.start(30 * time.Second) })
	}
}

var (
	gateway1   = func(c *cluster) *proc { return c.gws[0] }
	inventory1 = func(c *cluster) *proc { return c.invs[0] }
	sink1      = func(c *cluster) *proc { return c.sinks[0] }
	controlPl  = func(c *cluster) *proc { return c.cp }
	primary    = func(c *cluster) *proc { return c.primary }
	replica    = func(c *cluster) *proc { return c.replica }
)

// scenarios is the fixed list `make faults` runs, in order.
var scenarios = []scenario{
	{name: "fair-flushall-prequeue", fault: "a fair sale: FLUSHALL on the Redis primary during the pre-queue (SQLite)", own: fairScenario(fairFlushPrequeue)},
	{name: "fair-resync", fault: "a fair sale: admin re-sync during admission (SQLite)", own: fairScenario(fairResync)},
	fairLagFailover, // fair_failover_test.go
	{name: "fair-leader-sigstop", fault: "a fair sale: the control plane SIGSTOPped for 3s during admission (SQLite)", own: fairScenario(fairLeaderStop)},
	{name: "gateway-kill9", fault: "kill -9 gateway-1, restart 2s later (SQLite)", inject: killRestart(gateway1, 2*time.Second)},
	{name: "inventory-kill9", fault: "kill -9 inventory-1, restart 2s later (PostgreSQL)", opts: clusterOpts{postgres: true}, inject: killRestart(inventory1, 2*time.Second)},
	{name: "ordersink-kill9", fault: "kill -9 ordersink-1, restart 2s later (SQLite)", inject: killRestart(sink1, 2*time.Second)},
	{name: "controlplane-kill9", fault: "kill -9 the control plane, restart 2s later (PostgreSQL)", opts: clusterOpts{postgres: true}, inject: killRestart(controlPl, 2*time.Second)},
	{name: "redis-kill9-everysec", fault: "kill -9 the Redis primary (appendfsync everysec), restart from its AOF 1s later (PostgreSQL); up to 2s of confirmed orders before the kill may be lost (README)",
		opts: clusterOpts{postgres: true}, inject: redisKill},
	{name: "redis-kill9-always", fault: "kill -9 the Redis primary (appendfsync always), restart from its AOF 1s later (SQLite)",
		opts: clusterOpts{fsyncAlways: true}, inject: redisKill},
	redisRestartPausedSinks, // recovery_test.go
	laggingReplicaFailover,  // failover_test.go
	sentinelFailover,        // redisha_test.go
	clusterPrimaryKill,      // redisha_test.go
	{name: "postgres-stop", fault: "PostgreSQL stopped (fast shutdown) for 3s, then started; buyers keep coming for 10s", needs: "35.2 (sink)",
		opts: clusterOpts{postgres: true}, spread: 10 * time.Second, inject: postgresStop},
	{name: "postgres-freeze", fault: "PostgreSQL frozen (SIGSTOP, every process) for 3s", opts: clusterOpts{postgres: true}, inject: postgresFreeze},
	{name: "replica-freeze", fault: "Redis replica frozen (SIGSTOP) for 3s (SQLite)", inject: replicaFreeze},
	{name: "replica-kill9", fault: "kill -9 the Redis replica, restart 1s later; the primary's backlog (set to 16 kB meanwhile) no longer covers it, so it full-syncs (PostgreSQL)", needs: "8.4 (edge)", opts: clusterOpts{postgres: true}, inject: replicaKill},
	{name: "flushall-postgres", fault: "FLUSHALL on the Redis primary mid-sale (PostgreSQL)", needs: "8.1 (book)", opts: clusterOpts{postgres: true}, inject: flushAll,
		lossesOK: "buyers answered during the rebuild, which must end within 2s"},
	{name: "flushall-sqlite", fault: "FLUSHALL on the Redis primary mid-sale, a sale in three sizes (SQLite)", needs: "8.1 (book)", inject: flushAll, variants: true,
		lossesOK: "buyers answered during the rebuild, which must end within 2s"},
	{name: "flushall-buckets", fault: "FLUSHALL on the Redis primary mid-sale, a sale in three sizes over three buckets (SQLite)", needs: "8.1 (book)", inject: flushAll, variants: true, buckets: 3,
		lossesOK: "buyers answered during the rebuild, which must end within 2s"},
	{name: "slowloris", fault: "1,000 half-open connections to gateway-1 during the sale (SQLite)", inject: slowloris},
	{name: "refunds-resync", fault: "25 orders refunded after the crowd, then re-sync, a sale in three sizes (PostgreSQL)", opts: clusterOpts{postgres: true}, between: refunds, variants: true},
	{name: "idle-keepalive", fault: "per gateway, 10 keep-alive connections idle after a request and 10 opened with nothing sent, held 7s, past the 5s read timeout (SQLite)", needs: "8.5 (edge)", inject: idleKeepAlive},
	{name: "inventory-restart", fault: "inventory-1 restarted (SIGTERM, start) mid-sale; no buyer may see a 503 (PostgreSQL)", needs: "8.3 (sink)",
		opts: clusterOpts{postgres: true}, inject: inventoryRestart, no503: true},
	{name: "dead-letter", fault: "an order entry the sink cannot store added to the sale's stream mid-sale (PostgreSQL)", needs: "8.6 (sink)",
		opts: clusterOpts{postgres: true}, inject: deadLetter},
	{name: "ordersink-restart", fault: "ordersink-2 stalled, PostgreSQL frozen while ordersink-1 holds a batch, ordersink-1 kill -9 and restarted; its pending entries must be rows within 2s",
		needs: "8.2 (sink)", opts: clusterOpts{postgres: true}, inject: sinkRestart},
	poisonSubjects,
	pausedLeaderScenario, // leader_test.go
	paymentsScenario,     // payments_test.go
	paymentsRaceScenario, // payments_race_test.go
	drawLeaderKill,       // draw_test.go
	drawProviderFaults,   // draw_test.go
}

// result is one scenario's row of docs/RELIABILITY.md.
type result struct {
	name, fault, needs string
	happened           string
	requests, created  int
	rows, losses       int
	outage, recovery   string
	// sellAgain and rowLag are the recovery figures (recovery_test.go):
	// from the fault's end to the first 201, and the longest time from a
	// 201 to its row.
	sellAgain, rowLag string
	history           string // the history check's summary
	problems          []string
	skipped           bool
}

func TestFaults(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	s := &suite{root: root, work: t.TempDir()}
	if keep := os.Getenv("FAULTS_WORKDIR"); keep != "" {
		s.work = keep
		if err := os.MkdirAll(keep, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s.bin = filepath.Join(s.work, "flashgate")
	build := exec.Command("go", "build", "-o", s.bin, "./cmd/flashgate")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building flashgate: %v\n%s", err, out)
	}
	err = s.startPostgres()
	t.Cleanup(func() {
		if s.pg != nil {
			_ = s.pg.stop(syscall.SIGINT, 20*time.Second) // fast shutdown
		}
		if s.pgDir != "" {
			_ = os.RemoveAll(s.pgDir)
		}
	})
	if err != nil {
		t.Fatalf("starting PostgreSQL: %v", err)
	}

	var results []result
	began := time.Now()
	runs := faultRuns()
	for _, sc := range scenarios {
		ok := t.Run(sc.name, func(t *testing.T) {
			if runs == 1 {
				results = append(results, s.runScenario(t, sc))
				return
			}
			passed := 0
			for i := range runs {
				t.Run(fmt.Sprintf("run%02d", i+1), func(t *testing.T) {
					r := s.runScenario(t, sc)
					r.name = fmt.Sprintf("%s (run %d of %d)", sc.name, i+1, runs)
					if len(r.problems) == 0 {
						passed++
					}
					results = append(results, r)
				})
			}
			t.Logf("%s: %d of %d runs passed", sc.name, passed, runs)
		})
		if !ok {
			t.Logf("scenario %s FAILED; the suite goes on", sc.name)
		}
	}
	t.Logf("%d scenarios in %v", len(results), time.Since(began).Round(time.Second))
	rev, _ := exec.Command("git", "-C", root, "describe", "--always", "--dirty").Output()
	table := report(results, strings.TrimSpace(string(rev)), began)
	t.Log("\n" + table)
	if path := os.Getenv("FAULTS_REPORT"); path != "" && len(results) > 0 {
		if err := os.WriteFile(path, []byte(table), 0o644); err != nil {
			t.Errorf("writing %s: %v", path, err)
		}
	}
	var failed []string
	for _, r := range results {
		if len(r.problems) > 0 {
			failed = append(failed, r.name)
		}
	}
	if len(failed) > 0 {
		t.Errorf("%d of %d scenarios failed: %s (each one's diagnosis is above, under --- FAIL)", len(failed), len(results), strings.Join(failed, ", "))
	}
}

func (s *suite) runScenario(t *testing.T, sc scenario) (r result) {
	if sc.total == 0 {
		sc.total = 2500
	}
	if sc.buyers == 0 {
		sc.buyers = 2000
	}
	if sc.own != nil {
		return sc.own(t, s, sc)
	}
	r = result{name: sc.name, fault: sc.fault, needs: sc.needs}
	x := &run{t: t, s: s, sc: sc, sale: "fault-" + regexp.MustCompile(`[^A-Za-z0-9]`).ReplaceAllString(sc.name, "")}
	defer func() {
		x.mu.Lock()
		r.problems = append([]string(nil), x.problems...)
		x.mu.Unlock()
		if t.Failed() && len(r.problems) == 0 {
			r.problems = []string{"the scenario could not run (see its log)"}
		}
		keep := os.Getenv("FAULTS_KEEP_LOGS") != ""
		if (len(r.problems) > 0 || keep) && x.c != nil {
			for _, p := range x.c.all() {
				if len(r.problems) > 0 {
					t.Logf("last lines of %s:\n%s", p.name, procgroup.Tail(p.log, 8))
				}
				// The whole log goes with the artifacts (-artifacts), for
				// a failure no tail explains (every run's with
				// FAULTS_KEEP_LOGS set).
				if b, err := os.ReadFile(p.log); err == nil {
					_ = os.WriteFile(filepath.Join(t.ArtifactDir(), p.name+".log"), b, 0o644)
				}
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	x.c = s.startCluster(t, sc.name, sc.opts)
	var sizes []variantSize
	if sc.variants {
		sizes = saleVariants(sc.total)
		x.c.openVariantSale(ctx, x.sale, sizes, sc.buckets)
	} else {
		x.c.openSale(ctx, x.sale, sc.total)
	}
	x.readTags(ctx)
	spread := sc.spread
	if spread == 0 {
		spread = 5 * time.Second
	}

	// The first crowd, with the fault beside it, and invariant 1 sampled
	// every 50ms while it runs.
	x.crowd = &crowd{c: x.c, sale: x.sale, prefix: "buyer-", n: sc.buyers, spread: spread, pay: 10, cancel: 25}
	if sc.variants {
		x.crowd.variant = wantedSize
	}
	crowdCtx, stopCrowd := context.WithTimeout(ctx, 60*time.Second)
	defer stopCrowd()
	x.start = time.Now()
	rowsSeen := x.watchRows(ctx) // recovery_test.go
	var bg sync.WaitGroup
	crowdDone := make(chan struct{})
	if sc.inject != nil {
		bg.Add(1)
		go func() {
			defer bg.Done()
			sc.inject(crowdCtx, x)
		}()
	}
	bg.Add(1)
	go func() {
		defer bg.Done()
		worst := int64(0)
		for {
			select {
			case <-crowdDone:
				if worst > sc.total {
					x.problem("OVERSELL during the crowd: booked reached %d of %d units", worst, sc.total)
				}
				return
			case <-time.After(50 * time.Millisecond):
			}
			if b, err := x.stock(ctx, lua.FieldBooked); err == nil {
				worst = max(worst, b)
			}
		}
	}()
	outs := x.crowd.run(crowdCtx)
	crowdTook := time.Since(x.start)
	close(crowdDone)
	bg.Wait()
	st := stats(outs)
	t.Logf("first crowd: %d buyers in %v, %d requests; buyers ended with: %s", st.buyers, crowdTook.Round(time.Millisecond), st.requests, countList(st.finals))
	t.Logf("every attempt's answer: %s", countList(st.perAttempt))
	r.requests, r.created = st.requests, st.perAttempt["201"]
	r.losses = st.buyers - st.orders + st.finals["never sent"]
	x.mu.Lock()
	allowed := sc.lossesOK != "" && x.recoveredInTime
	x.mu.Unlock()
	if r.losses > 0 && allowed {
		x.notef("%d buyers left without an order (%s), allowed: %s", r.losses, countList(lossReasons(outs)), sc.lossesOK)
	} else if r.losses > 0 {
		var first, last time.Time
		for _, o := range outs {
			if o.orderID == "" && len(o.attempts) > 0 {
				a := o.attempts[len(o.attempts)-1]
				if first.IsZero() || a.start.Before(first) {
					first = a.start
				}
				if a.end.After(last) {
					last = a.end
				}
			}
		}
		x.problem("LOSS: %d of %d buyers ended without an order though units remained: %s (their last answers from t=%.2fs to t=%.2fs)",
			r.losses, sc.buyers, countList(lossReasons(outs)), first.Sub(x.start).Seconds(), last.Sub(x.start).Seconds())
	}
	if sc.no503 && st.perAttempt["503 unavailable"] > 0 {
		var when []string
		for _, o := range outs {
			for _, a := range o.attempts {
				if a.status == 503 && len(when) < 10 {
					when = append(when, fmt.Sprintf("%s at t=%.2fs on gateway-%d", o.user, a.start.Sub(x.start).Seconds(), a.gw+1))
				}
			}
		}
		x.problem("503: buyers got %d answers 503 unavailable (retried or not): %s", st.perAttempt["503 unavailable"], strings.Join(when, ", "))
	}
	r.outage = "0"
	if st.failed > 0 {
		r.outage = fmt.Sprintf("%v (%d failed attempts over %v)", st.outage.Round(10*time.Millisecond), st.failed,
			st.lastFail.Sub(st.firstFail).Round(10*time.Millisecond))
	}
	x.mu.Lock()
	recovery, recWhat, repairAt, readyIn := x.recovery, x.recWhat, x.repairAt, x.readyIn
	x.mu.Unlock()
	switch {
	case recWhat != "":
		r.recovery = fmt.Sprintf("%v (%s)", recovery.Round(10*time.Millisecond), recWhat)
	case !repairAt.IsZero():
		rec := readyIn
		if st.lastFail.After(repairAt) {
			rec = max(rec, st.lastFail.Sub(repairAt))
		}
		r.recovery = fmt.Sprintf("%v", rec.Round(10*time.Millisecond))
	default:
		r.recovery = "–"
	}

	confirmed := map[string]string{}
	x.confirmedOf(confirmed, outs)
	drain := x.settle(ctx, 40*time.Second)
	rowsSeen.end()
	fig := x.recoveryOf(outs, rowsSeen)
	r.sellAgain, r.rowLag = fig.cells(!x.faultEnd().IsZero())
	t.Logf("recovery: sells again %s after the fault's end; every 201 a row within %s of the later of its answer and the fault's end (%v of its answer)",
		r.sellAgain, r.rowLag, fig.rawLag.Round(10*time.Millisecond))
	t.Logf("orders drained %v after the crowd", drain.Round(time.Millisecond))
	if drain > time.Second {
		x.notef("the last orders reached the database %v after the crowd ended", drain.Round(100*time.Millisecond))
	}
	r.rows = x.checkAll(ctx, confirmed, outs)
	x.mu.Lock()
	if n := x.destroyed - x.aofLost; n > 0 {
		r.losses += n
		x.notes = append(x.notes, fmt.Sprintf("%d orders confirmed before the flush were wiped from the stream before the sinks stored them (counted as losses)", n))
	}
	if x.aofLost > 0 {
		r.losses += x.aofLost // checkAll noted them
	}
	x.mu.Unlock()
	if sc.between != nil {
		sc.between(ctx, x)
	}
	x.checkNotPaused(ctx) // recovery_test.go

	// The second crowd: every free unit must sell again, exactly.
	booked, _ := x.stock(ctx, lua.FieldBooked)
	free := int(sc.total - booked)
	if free < 0 {
		free = 0
	}
	var lateOuts []outcome
	if sc.variants {
		// Each size's free units, to buyers of that size: 20 more in all.
		for k, v := range sizes {
			vb, _ := x.stock(ctx, lua.VariantField(v.id, lua.FieldBooked))
			n := int(max(v.total-vb, 0)) + 20/len(sizes) + boolInt(k < 20%len(sizes))
			late := &crowd{c: x.c, sale: x.sale, prefix: "late-" + v.id + "-", n: n, spread: time.Second,
				variant: func(int) string { return v.id }}
			lateOuts = append(lateOuts, late.run(ctx)...)
		}
	} else {
		late := &crowd{c: x.c, sale: x.sale, prefix: "late-", n: free + 20, spread: time.Second}
		lateOuts = late.run(ctx)
	}
	lst := stats(lateOuts)
	t.Logf("second crowd for the %d free units: %d buyers; they ended with: %s", free, lst.buyers, countList(lst.finals))
	r.requests += lst.requests
	r.created += lst.perAttempt["201"]
	if lst.orders != free {
		x.problem("RESALE: %d free units after the crowd and a re-sync, but a second crowd of %d got %d orders (%s)", free, lst.buyers, lst.orders, countList(lst.finals))
	}
	x.confirmedOf(confirmed, lateOuts)
	x.settle(ctx, 40*time.Second)
	r.rows = x.checkAll(ctx, confirmed, append(append([]outcome(nil), outs...), lateOuts...))
	if b, err := x.stock(ctx, lua.FieldBooked); err == nil && b != sc.total {
		x.problem("SOLD: booked %d after the second crowd, want all %d units", b, sc.total)
	}
	for _, v := range sizes {
		if b, err := x.stock(ctx, lua.VariantField(v.id, lua.FieldBooked)); err != nil || b != v.total {
			x.problem("SOLD: size %s booked %d (%v) after the second crowd, want all its %d units", v.id, b, err, v.total)
		}
	}
	x.checkNotPaused(ctx)
	r.history = x.checkHistory(ctx).short()

	x.mu.Lock()
	r.happened = strings.Join(append(append([]string(nil), x.happened...), x.notes...), "; ")
	x.mu.Unlock()
	return r
}

func failedCount(results []result) int {
	n := 0
	for _, r := range results {
		if len(r.problems) > 0 {
			n++
		}
	}
	return n
}

// lossReasons counts the final answers of buyers without an order.
func lossReasons(outs []outcome) map[string]int {
	m := map[string]int{}
	for _, o := range outs {
		if o.orderID == "" {
			if o.user == "" {
				m["never sent"]++
			} else {
				m[o.final]++
			}
		}
	}
	return m
}

// variantSize is one size of a scenario's variant sale.
type variantSize struct {
	id    string
	total int64
}

// saleVariants splits total units into three sizes: half, three tenths
// and the rest, each more than the first crowd's buyers who want it
// (wantedSize), so that every buyer can end with an order.
func saleVariants(total int64) []variantSize {
	s, m := total/2, total*3/10
	return []variantSize{{"S", s}, {"M", m}, {"L", total - s - m}}
}

// wantedSize is the size buyer i asks for: S for half the crowd, M for
// three tenths, L for a fifth, as saleVariants splits the units.
func wantedSize(i int) string {
	switch d := i % 10; {
	case d < 5:
		return "S"
	case d < 8:
		return "M"
	}
	return "L"
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
