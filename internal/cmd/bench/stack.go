package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

func lookPath(name string) (string, error) { return exec.LookPath(name) }

// stack is one redis-server and one `flashgate serve` on it.
type stack struct {
	name      string
	redis     *proc
	serve     *proc
	redisAddr string
	gw, admin string // host:port
	db        string
	rdb       *redis.Client
}

// startStack starts a fresh redis-server and `flashgate serve` on it.
func (b *bench) startStack(ctx context.Context, name, db string, extra ...string) (*stack, error) {
	st := &stack{name: name, db: db}
	var err error
	if st.redisAddr, err = freeAddr(); err != nil {
		return nil, err
	}
	host, port, _ := net.SplitHostPort(st.redisAddr)
	b.r.alias(st.redisAddr, "$REDIS_"+strings.ToUpper(name))
	b.r.alias(" "+port+" ", " $REDIS_"+strings.ToUpper(name)+"_PORT ")
	rdir := b.path("redis-" + name)
	os.MkdirAll(rdir, 0o755)
	// No persistence: the figures are of flashgate, not of the disk.
	if st.redis, err = b.r.start("redis-"+name, nil, "redis-server", "--port", port, "--bind", host,
		"--save", "", "--appendonly", "no", "--dir", rdir); err != nil {
		return nil, err
	}
	if err := waitTCP(ctx, st.redisAddr, st.redis, 10*time.Second); err != nil {
		return nil, err
	}
	st.rdb = redis.NewClient(&redis.Options{Addr: st.redisAddr})
	if err := b.startServe(ctx, st, extra...); err != nil {
		return nil, err
	}
	return st, nil
}

// serveArgs are the flags of every `flashgate serve` of the run, in one
// place; SERVE_FLAGS adds to them.
func (b *bench) serveArgs(st *stack, extra []string) []string {
	args := []string{b.flashbin, "serve",
		"--redis", "redis://" + st.redisAddr + "/0", "--db", st.db,
		"--listen", st.gw, "--admin-listen", st.admin, "--log-level", "warn"}
	args = append(args, extra...)
	return append(args, b.cfg.ServeFlags...)
}

// startServe (re)starts the stack's `flashgate serve`, on new ports.
func (b *bench) startServe(ctx context.Context, st *stack, extra ...string) error {
	if st.serve != nil {
		st.serve.stop()
	}
	var err error
	if st.gw, err = freeAddr(); err != nil {
		return err
	}
	if st.admin, err = freeAddr(); err != nil {
		return err
	}
	up := strings.ToUpper(st.name)
	b.r.alias(st.gw, "$GW_"+up)
	b.r.alias(st.admin, "$ADMIN_"+up)
	if st.serve, err = b.r.start("serve-"+st.name, nil, b.serveArgs(st, extra)...); err != nil {
		return err
	}
	if err := waitHTTP(ctx, "http://"+st.gw+"/readyz", st.serve, 30*time.Second); err != nil {
		return err
	}
	return waitHTTP(ctx, "http://"+st.gw+"/healthz", st.serve, 5*time.Second)
}

// adminCall calls the admin API; out, when not nil, gets the JSON answer.
func (b *bench) adminCall(st *stack, method, path string, body string, out any) error {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, "http://"+st.admin+path, rd)
	req.Header.Set("Authorization", "Bearer "+b.adminTok)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return fmt.Errorf("admin %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("admin %s %s: %d %s", method, path, resp.StatusCode, bytes.TrimSpace(raw))
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}

// createSale creates a sale and, if open, starts it.
func (b *bench) createSale(st *stack, id string, total int64, open bool) error {
	body := fmt.Sprintf(`{"id":%q,"name":"Bench %s","price_cents":2500,"total":%d,"per_user":1}`, id, id, total)
	if err := b.adminCall(st, "POST", "/admin/sales", body, nil); err != nil {
		return err
	}
	if open {
		return b.adminCall(st, "POST", "/admin/sales/"+id+"/start", "", nil)
	}
	return nil
}

// saleFigures is the part of GET /admin/sales/{id} the run reads.
type saleFigures struct {
	State         string `json:"state"`
	Total         int64  `json:"total"`
	Booked        int64  `json:"booked"`
	StreamBacklog int64  `json:"stream_backlog"`
	Orders        struct {
		Persisted      int64 `json:"persisted"`
		PendingPayment int64 `json:"pending_payment"`
		Expired        int64 `json:"expired"`
	} `json:"orders"`
}

func (b *bench) figures(st *stack, id string) (saleFigures, error) {
	var f saleFigures
	err := b.adminCall(st, "GET", "/admin/sales/"+id, "", &f)
	return f, err
}

// waitFigures polls a sale's figures until ok says so, at most for limit.
func (b *bench) waitFigures(ctx context.Context, st *stack, id string, limit time.Duration, ok func(saleFigures) bool) (saleFigures, error) {
	deadline := time.Now().Add(limit)
	for {
		f, err := b.figures(st, id)
		if err == nil && ok(f) {
			return f, nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("sale %s not there after %s: %+v", id, limit, f)
			}
			return f, err
		}
		select {
		case <-ctx.Done():
			return f, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// tokens writes n buyer tokens for users prefix0…prefix(n-1) to a file.
func (b *bench) tokens(ctx context.Context, prefix string, n int) (string, error) {
	file := b.path("tokens-" + strings.TrimSuffix(prefix, "-") + ".txt")
	out, _, err := b.r.output(ctx, 5*time.Minute, nil, b.flashbin, "token", "--user-prefix", prefix, "--count", strconv.Itoa(n))
	if err != nil {
		return "", err
	}
	return file, os.WriteFile(file, []byte(out), 0o600)
}

func (b *bench) token(ctx context.Context, user string) (string, error) {
	out, _, err := b.r.output(ctx, time.Minute, nil, b.flashbin, "token", "--user", user)
	tok := strings.TrimSpace(out)
	if tok != "" {
		b.r.alias(tok, "$TOKEN_"+strings.ToUpper(user))
	}
	return tok, err
}

// crowdRun is what one `flashgate crowd` printed.
type crowdRun struct {
	Requests           int
	Elapsed            time.Duration
	Rate               float64
	Answers            map[string]int
	P50, P99, P999, Mx time.Duration
	Check              string  // the cross-check's last line, if any
	ServerCPU          float64 // cores the server process used while the crowd ran (after minting its tokens)
}

var (
	reCrowdReq  = regexp.MustCompile(`(?m)^requests\s+(\d+) in (\S+)`)
	reCrowdAns  = regexp.MustCompile(`(?m)^  ([0-9][0-9][0-9][ a-z_]*|transport error)\s+(\d+)\s*$`)
	reCrowdRate = regexp.MustCompile(`(?m)^throughput\s+([\d.]+)`)
	reCrowdLat  = regexp.MustCompile(`(?m)^latency\s+p50 (\S+)\s+p99 (\S+)\s+p999 (\S+)\s+max (\S+)`)
	reCrowdChk  = regexp.MustCompile(`(?m)^cross-check\s+(.*)$`)
)

func parseCrowd(out string) (crowdRun, error) {
	c := crowdRun{Answers: map[string]int{}}
	m := reCrowdReq.FindStringSubmatch(out)
	if m == nil {
		return c, fmt.Errorf("crowd printed no request count: %.500s", out)
	}
	c.Requests, _ = strconv.Atoi(m[1])
	c.Elapsed, _ = time.ParseDuration(m[2])
	for _, m := range reCrowdAns.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[2])
		c.Answers[strings.TrimSpace(m[1])] = n
	}
	if m = reCrowdRate.FindStringSubmatch(out); m != nil {
		c.Rate, _ = strconv.ParseFloat(m[1], 64)
	} else if c.Elapsed > 0 {
		c.Rate = float64(c.Requests) / c.Elapsed.Seconds()
	}
	if m = reCrowdLat.FindStringSubmatch(out); m != nil {
		c.P50, _ = time.ParseDuration(m[1])
		c.P99, _ = time.ParseDuration(m[2])
		c.P999, _ = time.ParseDuration(m[3])
		c.Mx, _ = time.ParseDuration(m[4])
	}
	if ms := reCrowdChk.FindAllStringSubmatch(out, -1); len(ms) > 0 {
		c.Check = strings.TrimSpace(ms[len(ms)-1][1])
	}
	return c, nil
}

// answers formats the answer counts, most frequent first.
func (c crowdRun) answers() string {
	type kv struct {
		k string
		n int
	}
	var l []kv
	for k, n := range c.Answers {
		l = append(l, kv{k, n})
	}
	sort.Slice(l, func(i, j int) bool { return l[i].n > l[j].n || l[i].n == l[j].n && l[i].k < l[j].k })
	var parts []string
	for _, e := range l {
		parts = append(parts, fmt.Sprintf("%s: %d", e.k, e.n))
	}
	return strings.Join(parts, ", ")
}

// crowd runs `flashgate crowd` (the same tool against either server).
// rate > 0 makes it an open model at that arrival rate; adminStack, when not
// nil, adds the cross-check against the admin figures.
func (b *bench) crowd(ctx context.Context, target, sale string, users, conc int, rate float64, adminStack *stack) (crowdRun, error) {
	return b.crowdOn(ctx, 0, target, sale, users, conc, rate, adminStack)
}

// crowdOn is crowd that also measures the CPU of the server process srvPID.
func (b *bench) crowdOn(ctx context.Context, srvPID int, target, sale string, users, conc int, rate float64, adminStack *stack) (crowdRun, error) {
	args := []string{b.flashbin, "crowd", "--target", "http://" + target, "--sale", sale,
		"--users", strconv.Itoa(users), "--concurrency", strconv.Itoa(conc), "--progress=false"}
	if rate > 0 {
		args = append(args, "--rate", strconv.FormatFloat(rate, 'f', 0, 64))
	}
	if adminStack != nil {
		args = append(args, "--admin", "http://"+adminStack.admin)
	}
	limit := 5*time.Minute + time.Duration(users/500)*time.Second
	cpu0 := cpuSeconds(srvPID)
	out, _, err := b.r.output(ctx, limit, nil, args...)
	c, perr := parseCrowd(out)
	if srvPID > 0 && c.Elapsed > 0 {
		// The server idles while the crowd mints its tokens, so its CPU
		// over the crowd's own clock is a fair share.
		c.ServerCPU = (cpuSeconds(srvPID) - cpu0) / c.Elapsed.Seconds()
	}
	if err != nil {
		if perr == nil {
			return c, fmt.Errorf("%w (%s)", err, c.answers())
		}
		return c, err
	}
	return c, perr
}

// rss is a process's resident set, in MB.
func rss(pid int) float64 {
	kb, _ := procStatus(pid, "VmRSS")
	return float64(kb) / 1024
}

func peakRSS(pid int) float64 {
	kb, _ := procStatus(pid, "VmHWM")
	return float64(kb) / 1024
}

// holdConns opens n keep-alive connections to addr, each after one
// answered GET /healthz, and returns them open.
func holdConns(ctx context.Context, addr string, n int) ([]net.Conn, error) {
	conns := make([]net.Conn, n)
	var next int
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	req := []byte("GET /healthz HTTP/1.1\r\nHost: " + addr + "\r\n\r\n")
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				mu.Lock()
				i := next
				next++
				stop := i >= n || firstErr != nil
				mu.Unlock()
				if stop {
					return
				}
				c, err := net.DialTimeout("tcp", addr, 5*time.Second)
				if err == nil {
					c.SetDeadline(time.Now().Add(10 * time.Second))
					if _, err = c.Write(req); err == nil {
						var resp *http.Response
						if resp, err = http.ReadResponse(bufio.NewReader(c), nil); err == nil {
							io.Copy(io.Discard, resp.Body)
							resp.Body.Close()
						}
					}
					c.SetDeadline(time.Time{})
				}
				if err != nil {
					if c != nil {
						c.Close()
					}
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("connection %d: %w", i, err)
					}
					mu.Unlock()
					return
				}
				conns[i] = c
			}
		}()
	}
	wg.Wait()
	var open []net.Conn
	for _, c := range conns {
		if c != nil {
			open = append(open, c)
		}
	}
	if firstErr != nil {
		closeAll(open)
		return nil, firstErr
	}
	return open, ctx.Err()
}

func closeAll(cs []net.Conn) {
	for _, c := range cs {
		c.Close()
	}
}

// createDB creates a database on the PostgreSQL server and returns its URL.
func (b *bench) createDB(ctx context.Context, name string) (string, error) {
	if b.cfg.Postgres == "" {
		return "", fmt.Errorf("no PostgreSQL: run under scripts/with-testenv.sh (make bench does) or set FLASHGATE_BENCH_POSTGRES")
	}
	c, err := pgx.Connect(ctx, b.cfg.Postgres)
	if err != nil {
		return "", fmt.Errorf("postgres: %w", err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("postgres: %w", err)
	}
	u, err := url.Parse(b.cfg.Postgres)
	if err != nil {
		return "", err
	}
	u.Path = "/" + name
	return u.String(), nil
}

// dbURL is the database of the wrk and storm phases.
func (b *bench) dbURL(ctx context.Context, name string) (string, error) {
	if b.cfg.DB == "postgres" {
		return b.createDB(ctx, name)
	}
	return "sqlite://" + b.path(name+".db"), nil
}

// machineInfo describes where the run ran.
type machineInfo struct {
	CPUs                   int
	CPUModel, Memory       string
	Kernel, Go, Redis, Wrk string
	Postgres               string
	Commit                 string
	Date                   string
	LoadStart, LoadEnd     string
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}

func (b *bench) machine(ctx context.Context) machineInfo {
	m := machineInfo{CPUs: runtime.NumCPU(), Go: runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH,
		Date: time.Now().UTC().Format("2006-01-02 15:04 UTC"), LoadStart: loadavg()}
	if ci, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(ci), "\n") {
			if v, ok := strings.CutPrefix(l, "model name"); ok {
				m.CPUModel = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	if mi, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(mi), "\n") {
			if v, ok := strings.CutPrefix(l, "MemTotal:"); ok {
				kb, _ := strconv.ParseFloat(strings.Fields(v)[0], 64)
				m.Memory = fmt.Sprintf("%.1f GiB", kb/1024/1024)
			}
		}
	}
	k, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	m.Kernel = "Linux " + strings.TrimSpace(string(k))
	out, _ := exec.CommandContext(ctx, "redis-server", "--version").Output()
	if f := strings.Fields(string(out)); len(f) >= 3 {
		m.Redis = strings.Join(f[:3], " ")
	}
	out, _ = exec.CommandContext(ctx, "wrk", "-v").CombinedOutput()
	m.Wrk = firstLine(string(out))
	if b.cfg.Postgres != "" {
		if c, err := pgx.Connect(ctx, b.cfg.Postgres); err == nil {
			var v string
			c.QueryRow(ctx, "SHOW server_version").Scan(&v)
			var fsync string
			c.QueryRow(ctx, "SHOW fsync").Scan(&fsync)
			m.Postgres = "PostgreSQL " + v + " (fsync=" + fsync + ")"
			c.Close(ctx)
		}
	}
	out, _ = exec.CommandContext(ctx, "git", "rev-parse", "--short", "HEAD").Output()
	m.Commit = strings.TrimSpace(string(out))
	if st, _ := exec.CommandContext(ctx, "git", "status", "--porcelain", "--untracked-files=no",
		"--", ".", ":!README.md", ":!docs/BENCHMARKS.md").Output(); len(bytes.TrimSpace(st)) > 0 {
		m.Commit += " with local changes"
	}
	return m
}

// goBenchRow is one benchmark over GOBENCH_COUNT runs.
type goBenchRow struct {
	Name          string
	NsOp          []float64
	BOp, AllocsOp string
}

var reGoBench = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\d+\s+([\d.]+) ns/op(?:\s+(\d+) B/op\s+(\d+) allocs/op)?`)

// goBench runs the Go benchmarks of every package.
func (b *bench) goBench(ctx context.Context) error {
	if b.cfg.GoBench == 0 {
		return nil
	}
	pkgs, err := benchPackages(b.root)
	if err != nil || len(pkgs) == 0 {
		return fmt.Errorf("finding the packages with benchmarks: %v", err)
	}
	args := append([]string{"go", "test", "-run", "^$", "-bench", ".", "-benchmem", "-count", strconv.Itoa(b.cfg.GoBench)}, pkgs...)
	out, _, runErr := b.r.output(ctx, 15*time.Minute, nil, args...)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	rows := map[string]*goBenchRow{}
	var order []string
	pkg := ""
	for _, l := range strings.Split(out, "\n") {
		if p, ok := strings.CutPrefix(l, "pkg: "); ok {
			pkg = strings.TrimPrefix(strings.TrimSpace(p), "github.com/flashgate/flashgate/")
			continue
		}
		m := reGoBench.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		name := pkg + " " + m[1]
		r := rows[name]
		if r == nil {
			r = &goBenchRow{Name: name}
			rows[name] = r
			order = append(order, name)
		}
		ns, _ := strconv.ParseFloat(m[2], 64)
		r.NsOp = append(r.NsOp, ns)
		r.BOp, r.AllocsOp = m[3], m[4]
	}
	for _, n := range order {
		b.rep.goBench = append(b.rep.goBench, *rows[n])
	}
	if runErr != nil {
		// The benchmarks that ran are reported; the failure is too.
		return runErr
	}
	if len(order) == 0 {
		return fmt.Errorf("go test printed no benchmark")
	}
	return nil
}

// benchPackages lists the packages (./dir) whose tests hold a benchmark, so
// that only those are compiled.
func benchPackages(root string) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		dir, _ := filepath.Rel(root, filepath.Dir(path))
		if bytes.Contains(src, []byte("\nfunc Benchmark")) && !seen[dir] {
			seen[dir] = true
			out = append(out, "./"+filepath.ToSlash(dir))
		}
		return nil
	})
	sort.Strings(out)
	return out, err
}
