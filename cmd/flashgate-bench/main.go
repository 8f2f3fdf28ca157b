// Command bench is `make bench`: it builds flashgate and the two reference
// servers (cmd/bare, cmd/rowlock), runs every scenario on
// loopback and writes docs/BENCHMARKS.md (and the headline table of
// README.md) from that one run. Every server it starts listens on 127.0.0.1, on a free
// port, and is stopped when the run ends, however it ends.
//
// It needs Go, redis-server, wrk and a PostgreSQL server: run it under
// scripts/with-testenv.sh (as `make bench` does), which provides a
// throwaway cluster in FLASHGATE_TEST_POSTGRES, or set FLASHGATE_BENCH_POSTGRES.
// The environment variables of settings below shorten or lengthen it.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// settings are the run's knobs, each from an environment variable.
type settings struct {
	Rounds      int           // ROUNDS: alternating bare/flashgate rounds per scenario; 15
	Duration    time.Duration // DURATION: one wrk run; 2s
	Threads     int           // THREADS: wrk threads; 2
	Tokens      int           // TOKENS: buyer tokens per round file; 60,000 per second of DURATION
	GoBench     int           // GOBENCH_COUNT: go test -count of the Go benchmarks, 0 = skip; 3
	CrowdUsers  int           // CROWD_USERS: distinct buyers of the flash crowd; 100,000
	CrowdUnits  int           // CROWD_UNITS: units on sale for the crowd; 100
	CrowdRounds int           // CROWD_ROUNDS: crowds against each server; 3
	CrowdConc   int           // CROWD_CONC: requests in flight of the crowd; 256
	OpenSeconds int           // OPEN_SECONDS: length of the open-model runs; 10
	Conns       int           // CONNS: idle keep-alive connections for the RSS figure; 10,000
	StormOrders int           // STORM_ORDERS: unpaid orders of the expiry storm; 100,000
	StormLimit  time.Duration // STORM_LIMIT: give up on the storm after; 180s
	StormRate   int           // STORM_BUY_RATE: purchases/s going on during the storm; 500
	IdleSeconds int           // IDLE_SECONDS: the idle window after the storm; 10
	Phases      string        // PHASES: which parts run; "go,http,crowd,storm,buckets,drop,draw,overload"
	Scenarios   string        // SCENARIOS: which wrk scenarios of the http phase run, by key (a64,c64,...); "" = all
	DB          string        // BENCH_DB: database of the wrk and storm phases, sqlite or postgres; sqlite
	ServeFlags  []string      // SERVE_FLAGS: more flags for every `flashgate serve`; none
	Out         string        // BENCH_OUT: the report; docs/BENCHMARKS.md
	Readme      string        // BENCH_README: file whose bench markers get the headline table, "" = none; README.md
	Postgres    string        // FLASHGATE_BENCH_POSTGRES or FLASHGATE_TEST_POSTGRES: a server to create databases on
}

func envInt(name string, def int) (int, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(strings.ReplaceAll(v, "_", ""))
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s=%q: want a whole number", name, v)
	}
	return n, nil
}

func envDur(name string, def time.Duration) (time.Duration, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	if n, err := strconv.Atoi(v); err == nil {
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s=%q: want a duration such as 5s", name, v)
	}
	return d, nil
}

func envStr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

func loadSettings() (settings, error) {
	var s settings
	var err error
	ints := []struct {
		p    *int
		name string
		def  int
	}{
		{&s.Rounds, "ROUNDS", 15}, {&s.Threads, "THREADS", 2}, {&s.GoBench, "GOBENCH_COUNT", 3},
		{&s.CrowdUsers, "CROWD_USERS", 100000}, {&s.CrowdUnits, "CROWD_UNITS", 100},
		{&s.CrowdRounds, "CROWD_ROUNDS", 3}, {&s.CrowdConc, "CROWD_CONC", 256},
		{&s.OpenSeconds, "OPEN_SECONDS", 10}, {&s.Conns, "CONNS", 10000},
		{&s.StormOrders, "STORM_ORDERS", 100000}, {&s.StormRate, "STORM_BUY_RATE", 500},
		{&s.IdleSeconds, "IDLE_SECONDS", 10},
	}
	for _, i := range ints {
		if *i.p, err = envInt(i.name, i.def); err != nil {
			return s, err
		}
	}
	if s.Duration, err = envDur("DURATION", 2*time.Second); err != nil {
		return s, err
	}
	if s.StormLimit, err = envDur("STORM_LIMIT", 180*time.Second); err != nil {
		return s, err
	}
	if s.Tokens, err = envInt("TOKENS", 60000*max(1, int(s.Duration/time.Second))); err != nil {
		return s, err
	}
	if s.Rounds < 1 || s.Threads < 1 || s.CrowdRounds < 1 || s.CrowdConc < 1 || s.CrowdUsers < 1 ||
		s.CrowdUnits < 1 || s.OpenSeconds < 1 || s.StormOrders < 1 || s.IdleSeconds < 1 || s.Tokens < s.Threads {
		return s, errors.New("ROUNDS, THREADS, CROWD_*, OPEN_SECONDS, STORM_ORDERS, IDLE_SECONDS and TOKENS must be at least 1")
	}
	s.Phases = envStr("PHASES", "go,http,crowd,storm,buckets,drop,draw,overload")
	s.Scenarios = os.Getenv("SCENARIOS")
	s.DB = envStr("BENCH_DB", "sqlite")
	if s.DB != "sqlite" && s.DB != "postgres" {
		return s, fmt.Errorf("BENCH_DB=%q: want sqlite or postgres", s.DB)
	}
	s.ServeFlags = strings.Fields(os.Getenv("SERVE_FLAGS"))
	s.Out = envStr("BENCH_OUT", "docs/BENCHMARKS.md")
	s.Readme = envStr("BENCH_README", "README.md")
	s.Postgres = envStr("FLASHGATE_BENCH_POSTGRES", os.Getenv("FLASHGATE_TEST_POSTGRES"))
	return s, nil
}

// summary names every setting, for the log and the report.
func (s settings) summary() string {
	return fmt.Sprintf("ROUNDS=%d DURATION=%s THREADS=%d TOKENS=%d CROWD_USERS=%d CROWD_UNITS=%d CROWD_ROUNDS=%d "+
		"CROWD_CONC=%d OPEN_SECONDS=%d CONNS=%d STORM_ORDERS=%d STORM_BUY_RATE=%d IDLE_SECONDS=%d GOBENCH_COUNT=%d BENCH_DB=%s PHASES=%s SCENARIOS=%q SERVE_FLAGS=%q",
		s.Rounds, fmtSeconds(s.Duration), s.Threads, s.Tokens, s.CrowdUsers, s.CrowdUnits, s.CrowdRounds,
		s.CrowdConc, s.OpenSeconds, s.Conns, s.StormOrders, s.StormRate, s.IdleSeconds, s.GoBench, s.DB, s.Phases, s.Scenarios,
		strings.Join(s.ServeFlags, " "))
}

// wantScenario reports whether the http phase runs the wrk scenario key.
func (s settings) wantScenario(key string) bool {
	return s.Scenarios == "" || slices.Contains(strings.Split(s.Scenarios, ","), key)
}

// full reports whether the run was at least as large as the defaults; the
// report says so at its top when it was not.
func (s settings) full() bool {
	d, _ := loadDefaults()
	return s.Rounds >= d.Rounds && s.Duration >= d.Duration && s.CrowdUsers >= d.CrowdUsers &&
		s.CrowdRounds >= d.CrowdRounds && s.Conns >= d.Conns && s.StormOrders >= d.StormOrders &&
		s.OpenSeconds >= d.OpenSeconds && s.IdleSeconds >= d.IdleSeconds && s.Phases == d.Phases && s.Scenarios == ""
}

func loadDefaults() (settings, error) {
	saved := map[string]string{}
	for _, k := range []string{"ROUNDS", "DURATION", "CROWD_USERS", "CROWD_ROUNDS", "CONNS", "STORM_ORDERS", "OPEN_SECONDS", "IDLE_SECONDS", "PHASES"} {
		if v, ok := os.LookupEnv(k); ok {
			saved[k] = v
			os.Unsetenv(k)
		}
	}
	defer func() {
		for k, v := range saved {
			os.Setenv(k, v)
		}
	}()
	return loadSettings()
}

func (s settings) runs(phase string) bool {
	for _, p := range strings.Split(s.Phases, ",") {
		if strings.TrimSpace(p) == phase {
			return true
		}
	}
	return false
}

// bench is one run.
type bench struct {
	cfg      settings
	r        *runner
	dir      string
	root     string // the repository
	flashbin string
	barebin  string
	rowbin   string
	secret   string
	adminTok string
	rep      *report
	start    time.Time
}

func (b *bench) path(name string) string { return filepath.Join(b.dir, name) }

func (b *bench) logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "bench %s  %s\n", time.Now().UTC().Format("15:04:05"), fmt.Sprintf(format, a...))
}

func main() {
	cfg, err := loadSettings()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	code := run(ctx, cfg)
	os.Exit(code)
}

func run(ctx context.Context, cfg settings) int {
	root, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	for _, tool := range []string{"go", "redis-server", "wrk"} {
		if tool == "wrk" && !cfg.runs("http") && !cfg.runs("crowd") && !cfg.runs("storm") {
			continue // the go, buckets and drop phases need no wrk
		}
		if _, err := lookPath(tool); err != nil {
			fmt.Fprintf(os.Stderr, "bench: %s not found (Debian: apt-get install golang redis-server wrk)\n", tool)
			return 1
		}
	}
	dir, err := os.MkdirTemp("", "flashgate-bench.")
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	b := &bench{
		cfg: cfg, dir: dir, root: root, start: time.Now(),
		secret:   "bench-secret-" + strconv.FormatInt(time.Now().UnixNano(), 36),
		adminTok: "bench-admin-" + strconv.FormatInt(time.Now().UnixNano()/7, 36),
		rep:      &report{users: cfg.CrowdUsers, units: cfg.CrowdUnits},
	}
	b.r = &runner{dir: dir, env: []string{"FLASHGATE_JWT_SECRET=" + b.secret, "FLASHGATE_ADMIN_TOKEN=" + b.adminTok}}
	b.r.alias(dir, "$DIR")
	b.r.alias(b.secret, "$SECRET")
	b.r.alias(b.adminTok, "$ADMIN_TOKEN")
	defer func() {
		b.r.stopAll()
		os.RemoveAll(dir)
	}()
	b.logf("settings: %s", cfg.summary())
	// Every server inherits the limit: serve needs a descriptor per
	// keep-alive connection of the RSS figure. (Go raises its own soft limit
	// but gives children the original one unless the program sets it.)
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil {
		lim.Cur = lim.Max
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
	if lim.Cur < uint64(cfg.Conns)+2000 {
		b.logf("open files limited to %d: CONNS=%d will fail (raise ulimit -n)", lim.Cur, cfg.Conns)
	}
	b.rep.machine = b.machine(ctx)
	if err := b.build(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	failed := false
	phase := func(name string, f func(context.Context) error) {
		if !cfg.runs(name) || ctx.Err() != nil {
			return
		}
		b.logf("phase %s", name)
		t0 := time.Now()
		if err := f(ctx); err != nil {
			failed = true
			b.logf("phase %s failed: %v", name, err)
			b.rep.failures = append(b.rep.failures, fmt.Sprintf("%s: %v", name, err))
		}
		b.logf("phase %s done in %s", name, time.Since(t0).Round(time.Second))
		b.r.stopAll()
	}
	phase("go", b.goBench)
	phase("http", b.httpPhase) // http.go, httpcheck.go, queue.go; QUEUE_ENTRANTS, QUEUE_MAXNUMBER
	phase("crowd", b.crowdPhase)
	phase("storm", b.stormPhase)
	phase("buckets", b.bucketsPhase)   // buckets.go; BUCKETS_SECONDS (3), BUCKETS_ROUNDS (3)
	phase("drop", b.dropPhase)         // drop.go; DROP_PEOPLE, DROP_SCALPERS, DROP_ACCOUNTS, DROP_UNITS, DROP_MAXNUMBER, DROP_ENTRANTS
	phase("draw", b.drawPhase)         // draw.go; DRAW_ENTRIES, DRAW_UNITS, DRAW_RELEASE_SECONDS
	phase("overload", b.overloadPhase) // overload.go; OVERLOAD_SECONDS
	// drop.go: only the drop's memory part (DROP_ENTRANTS); not in the
	// default PHASES.
	phase("drop-memory", b.dropMemoryPhase)
	if ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "bench: interrupted; no report written")
		return 1
	}
	b.rep.machine.LoadEnd = loadavg()
	b.rep.elapsed = time.Since(b.start)
	b.rep.commands = b.r.commands()
	if err := b.writeReport(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	b.logf("wrote %s in %s", cfg.Out, b.rep.elapsed.Round(time.Second))
	if failed {
		return 1
	}
	return 0
}

// build compiles flashgate and the reference servers into the run's dir.
func (b *bench) build(ctx context.Context) error {
	b.flashbin, b.barebin, b.rowbin = b.path("flashgate"), b.path("bare"), b.path("rowlock")
	for _, t := range [][2]string{{b.flashbin, "./cmd/flashgate"}, {b.barebin, "./cmd/bare"}, {b.rowbin, "./cmd/rowlock"}} {
		if _, _, err := b.r.output(ctx, 10*time.Minute, nil, "go", "build", "-o", t[0], t[1]); err != nil {
			return err
		}
	}
	b.r.alias(b.flashbin, "flashgate")
	b.r.alias(b.barebin, "bare")
	b.r.alias(b.rowbin, "rowlock")
	return nil
}
