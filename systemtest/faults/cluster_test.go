//go:build faults

package faults

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/testenv/procgroup"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/sqldb"
)

// suite holds what every scenario shares: the built binary and one
// PostgreSQL server (each scenario gets its own database in it).
type suite struct {
	root   string // the repository
	bin    string // bin/flashgate, built once
	work   string // logs and data of every scenario
	pg     *proc  // the postgres postmaster
	pgPort int
	pgSeq  int
	pgDir  string
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// pgBin finds PostgreSQL's server binaries (Debian keeps them off PATH).
func pgBin() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "postgres")); err == nil {
			return dirs[i], nil
		}
	}
	return "", fmt.Errorf("PostgreSQL not found (install Debian's postgresql)")
}

// pgCredential is who PostgreSQL runs as: initdb and postgres refuse root.
func pgCredential() (*syscall.Credential, error) {
	if os.Getuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return nil, fmt.Errorf("running as root and no postgres or nobody user to run PostgreSQL as")
}

// startPostgres initialises and starts the suite's PostgreSQL server.
func (s *suite) startPostgres() error {
	bin, err := pgBin()
	if err != nil {
		return err
	}
	cred, err := pgCredential()
	if err != nil {
		return err
	}
	// Its own directory under the system's temporary one: the PostgreSQL
	// user cannot reach into the test's (root-only) directory.
	dir, err := os.MkdirTemp("", "flashgate-faults-pg")
	if err != nil {
		return err
	}
	s.pgDir = dir
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return err
		}
	}
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", filepath.Join(dir, "data"), "-U", "flashgate", "--auth=trust", "-E", "UTF8")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %v\n%s", err, out)
	}
	if s.pgPort, err = procgroup.FreePort(); err != nil {
		return err
	}
	s.pg = &proc{
		name: "postgres", bin: filepath.Join(bin, "postgres"), cred: cred,
		args: []string{"-D", filepath.Join(dir, "data"), "-h", "127.0.0.1", "-p", strconv.Itoa(s.pgPort), "-k", dir,
			"-c", "fsync=off", "-c", "full_page_writes=off", "-c", "max_connections=300"},
		log: filepath.Join(s.work, "postgres.log"),
		ready: func(ctx context.Context) error {
			c, err := pgx.Connect(ctx, s.pgURL("postgres"))
			if err != nil {
				return err
			}
			return c.Close(ctx)
		},
	}
	return s.pg.start(60 * time.Second)
}

func (s *suite) pgURL(db string) string {
	return fmt.Sprintf("postgres://flashgate@127.0.0.1:%d/%s?sslmode=disable", s.pgPort, db)
}

// newPostgresDB creates a fresh database for one scenario.
func (s *suite) newPostgresDB(ctx context.Context) (string, error) {
	s.pgSeq++
	name := fmt.Sprintf("fg%d", s.pgSeq)
	c, err := pgx.Connect(ctx, s.pgURL("postgres"))
	if err != nil {
		return "", err
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", err
	}
	return s.pgURL(name), nil
}

// cluster is one scenario's split deployment.
type cluster struct {
	t        *testing.T
	dir      string
	dbURL    string
	dbKind   string // "postgres" or "sqlite"
	primary  *proc
	replica  *proc
	cp       *proc
	cp2      *proc // the second control plane (clusterOpts.controlPlanes 2), else nil
	sinks    []*proc
	invs     []*proc
	gws      []*proc
	gwURL    []string
	adminURL string
	// admin2URL is the second control plane's admin listener ("" without
	// one).
	admin2URL string
	rdb       *redis.Client // the primary
	rep       *redis.Client // the replica
	db        *sqldb.DB     // the checker's own connection
	jwt       []byte
	admin     string
	// hist records what clients of the system did and were answered
	// (history.go); the crowds and adminDo add to it. A scenario that
	// changes the crowd's orders by other requests leaves the history
	// short of them, and the check fails on the rows they changed.
	hist *history
}

// clusterOpts are a scenario's deployment choices.
type clusterOpts struct {
	postgres    bool
	fsyncAlways bool // appendfsync always instead of everysec
	// controlPlanes is how many control planes run (default 1); a second
	// one has an admin listener of its own and stands by for the lease.
	controlPlanes int
	// env adds FLASHGATE_* settings to every tier (the payment scenario's
	// provider flags).
	env []string
}

// freshDir returns a directory of the suite's named name that does not
// exist yet (name-2, name-3, … after the first): a scenario run again
// (FAULTS_RUNS) starts from empty directories, its Redis not loading the
// last run's AOF nor its SQLite database holding the last run's sale.
func (s *suite) freshDir(name string) string {
	dir := filepath.Join(s.work, name)
	for i := 2; ; i++ {
		if _, err := os.Stat(dir); os.IsNotExist(err) {
			return dir
		}
		dir = filepath.Join(s.work, fmt.Sprintf("%s-%d", name, i))
	}
}

// startCluster starts the whole deployment for t and tears it down in
// t.Cleanup (keeping the logs in dir).
func (s *suite) startCluster(t *testing.T, name string, o clusterOpts) *cluster {
	t.Helper()
	ctx := context.Background()
	dir := s.freshDir(name)
	c := &cluster{t: t, dir: dir, jwt: []byte(randomHex(32)), admin: randomHex(32), hist: newHistory()}
	for _, d := range []string{"logs", "redis-primary", "redis-replica"} {
		if err := os.MkdirAll(filepath.Join(c.dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(c.down)
	c.dbKind = "sqlite"
	c.dbURL = "sqlite://" + filepath.Join(c.dir, "orders.db")
	if o.postgres {
		u, err := s.newPostgresDB(ctx)
		if err != nil {
			t.Fatalf("creating the scenario's PostgreSQL database: %v", err)
		}
		c.dbURL, c.dbKind = u, "postgres"
	}
	port := func() int {
		p, err := procgroup.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	logf := func(n string) string { return filepath.Join(c.dir, "logs", n+".log") }
	redisBin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redis-server not found (install Debian's redis-server)")
	}

	rp := port()
	fsync := "everysec"
	if o.fsyncAlways {
		fsync = "always"
	}
	c.primary = &proc{name: "redis-primary", bin: redisBin, log: logf("redis-primary"),
		args: []string{filepath.Join(s.root, "deploy/redis/primary.conf"), "--port", strconv.Itoa(rp), "--bind", "127.0.0.1",
			"--dir", filepath.Join(c.dir, "redis-primary"), "--daemonize", "no", "--logfile", "", "--appendfsync", fsync}}
	c.rdb = redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", rp), MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: 2 * time.Second})
	c.primary.ready = func(ctx context.Context) error { return c.rdb.Ping(ctx).Err() }
	c.must(c.primary.start(30 * time.Second))

	rr := port()
	c.replica = &proc{name: "redis-replica", bin: redisBin, log: logf("redis-replica"),
		args: []string{filepath.Join(s.root, "deploy/redis/replica.conf"), "--port", strconv.Itoa(rr), "--bind", "127.0.0.1",
			"--dir", filepath.Join(c.dir, "redis-replica"), "--daemonize", "no", "--logfile", "", "--replicaof", "127.0.0.1", strconv.Itoa(rp)}}
	c.rep = redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", rr), MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: 2 * time.Second})
	c.replica.ready = func(ctx context.Context) error {
		info, err := c.rep.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if !strings.Contains(info, "master_link_status:up") {
			return errNotReady
		}
		return nil
	}
	c.must(c.replica.start(30 * time.Second))

	env := []string{"FLASHGATE_JWT_SECRET=" + string(c.jwt), "FLASHGATE_ADMIN_TOKEN=" + c.admin,
		"FLASHGATE_INVENTORY_TOKEN=" + randomHex(32), "FLASHGATE_LOG_LEVEL=info"}
	env = append(env, o.env...)
	redisURL := fmt.Sprintf("redis://127.0.0.1:%d/0", rp)
	replicaURL := fmt.Sprintf("redis://127.0.0.1:%d/0", rr)

	ap := port()
	c.adminURL = fmt.Sprintf("http://127.0.0.1:%d", ap)
	c.cp = &proc{name: "controlplane", bin: s.bin, env: env, log: logf("controlplane"), ready: procgroup.HTTPReady(c.adminURL + "/readyz"),
		args: []string{"controlplane", "--admin-listen", fmt.Sprintf("127.0.0.1:%d", ap), "--redis", redisURL, "--db", c.dbURL}}
	c.must(c.cp.start(30 * time.Second))
	if o.controlPlanes >= 2 {
		ap2 := port()
		c.admin2URL = fmt.Sprintf("http://127.0.0.1:%d", ap2)
		c.cp2 = &proc{name: "controlplane-2", bin: s.bin, env: env, log: logf("controlplane-2"),
			ready: procgroup.HTTPReady(fmt.Sprintf("http://127.0.0.1:%d/readyz", ap2)),
			args:  []string{"controlplane", "--admin-listen", fmt.Sprintf("127.0.0.1:%d", ap2), "--redis", redisURL, "--db", c.dbURL}}
		c.must(c.cp2.start(30 * time.Second))
	}

	for i := 1; i <= 2; i++ {
		p := port()
		c.sinks = append(c.sinks, &proc{name: fmt.Sprintf("ordersink-%d", i), bin: s.bin, env: env, log: logf(fmt.Sprintf("ordersink-%d", i)),
			ready: procgroup.HTTPReady(fmt.Sprintf("http://127.0.0.1:%d/readyz", p)),
			args:  []string{"ordersink", "--admin-listen", fmt.Sprintf("127.0.0.1:%d", p), "--redis", redisURL, "--db", c.dbURL}})
	}
	var invURLs []string
	for i := 1; i <= 2; i++ {
		p := port()
		u := fmt.Sprintf("http://127.0.0.1:%d", p)
		invURLs = append(invURLs, u)
		c.invs = append(c.invs, &proc{name: fmt.Sprintf("inventory-%d", i), bin: s.bin, env: env, log: logf(fmt.Sprintf("inventory-%d", i)),
			ready: procgroup.HTTPReady(u + "/readyz"),
			args:  []string{"inventory", "--listen", fmt.Sprintf("127.0.0.1:%d", p), "--redis", redisURL}})
	}
	for i := 1; i <= 2; i++ {
		p := port()
		u := fmt.Sprintf("http://127.0.0.1:%d", p)
		c.gwURL = append(c.gwURL, u)
		c.gws = append(c.gws, &proc{name: fmt.Sprintf("gateway-%d", i), bin: s.bin, env: env, log: logf(fmt.Sprintf("gateway-%d", i)),
			ready: procgroup.HTTPReady(u + "/readyz"),
			args: []string{"gateway", "--listen", fmt.Sprintf("127.0.0.1:%d", p), "--redis", redisURL, "--redis-replicas", replicaURL,
				"--db", c.dbURL, "--inventory", strings.Join(invURLs, ",")}})
	}
	for _, p := range append(append(append([]*proc{}, c.sinks...), c.invs...), c.gws...) {
		c.must(p.start(30 * time.Second))
	}
	db, err := sqldb.Open(ctx, c.dbURL)
	if err != nil {
		t.Fatalf("the checker opening %s: %v", c.dbKind, err)
	}
	c.db = db
	return c
}

func (c *cluster) must(err error) {
	c.t.Helper()
	if err != nil {
		c.t.Fatal(err)
	}
}

// all lists every process, newest tier first (the order down stops them).
func (c *cluster) all() []*proc {
	ps := append([]*proc{}, c.gws...)
	ps = append(ps, c.invs...)
	ps = append(ps, c.sinks...)
	for _, p := range []*proc{c.cp, c.cp2, c.replica, c.primary} {
		if p != nil {
			ps = append(ps, p)
		}
	}
	return ps
}

func (c *cluster) down() {
	for _, p := range c.all() {
		if err := p.stop(syscall.SIGTERM, 10*time.Second); err != nil {
			c.t.Logf("teardown: %v", err)
		}
	}
	if c.db != nil {
		_ = c.db.Close()
	}
	_ = c.rdb.Close()
	_ = c.rep.Close()
}

// adminDo calls the admin API; it decodes a 2xx answer into out.
func (c *cluster) adminDo(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.adminURL+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.admin)
	req.Header.Set("Content-Type", "application/json")
	call := time.Now()
	resp, err := probeClient.Do(req)
	if err != nil {
		c.hist.adminCall(method, path, 0, "", sentErr(err), call, time.Now())
		return err
	}
	defer resp.Body.Close()
	b, rerr := io.ReadAll(resp.Body)
	status := resp.StatusCode
	if rerr != nil {
		status = 0 // the answer was cut: it may or may not have been a 200
	}
	var ans struct {
		Error string `json:"error"`
	}
	_ = json.Unmarshal(b, &ans)
	c.hist.adminCall(method, path, status, ans.Error, true, call, time.Now())
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %s %s", method, path, resp.Status, bytes.TrimSpace(b))
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// openSale creates and opens a sale of total units, and waits until both
// gateways answer it as open.
func (c *cluster) openSale(ctx context.Context, id string, total int64) {
	c.t.Helper()
	c.must(c.adminDo(ctx, http.MethodPost, "/admin/sales", map[string]any{"id": id, "name": "Fault sneakers", "price_cents": 4900, "total": total}, nil))
	c.must(c.adminDo(ctx, http.MethodPost, "/admin/sales/"+id+"/start", nil, nil))
	for _, u := range c.gwURL {
		if d, ok := testwait.For(10*time.Second, func() bool { return saleState(ctx, u, id) == "open" }); !ok {
			c.t.Fatalf("%s never showed sale %s open (waited %v; last state %q)", u, id, d, saleState(ctx, u, id))
		}
	}
}

// openVariantSale creates sale id in sizes (over buckets buckets, when
// more than one), starts it, waits until every gateway shows it open, and
// turns the history's stock model to one per size.
func (c *cluster) openVariantSale(ctx context.Context, id string, sizes []variantSize, buckets int) {
	c.t.Helper()
	var vs []map[string]any
	totals := map[string]int{}
	for _, v := range sizes {
		vs = append(vs, map[string]any{"id": v.id, "name": "Size " + v.id, "total": v.total})
		totals[v.id] = int(v.total)
	}
	c.hist.setVariants(totals)
	sale := map[string]any{"id": id, "name": "Fault sneakers in sizes", "price_cents": 4900, "variants": vs}
	if buckets > 1 {
		sale["buckets"] = buckets
	}
	c.must(c.adminDo(ctx, http.MethodPost, "/admin/sales", sale, nil))
	c.must(c.adminDo(ctx, http.MethodPost, "/admin/sales/"+id+"/start", nil, nil))
	for _, u := range c.gwURL {
		if d, ok := testwait.For(10*time.Second, func() bool { return saleState(ctx, u, id) == "open" }); !ok {
			c.t.Fatalf("%s never showed sale %s open (waited %v; last state %q)", u, id, d, saleState(ctx, u, id))
		}
	}
}

// saleState is the state a gateway shows for a sale, or its error answer.
func saleState(ctx context.Context, base, id string) string {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/sales/"+id, nil)
	resp, err := probeClient.Do(req)
	if err != nil {
		return "transport error"
	}
	defer resp.Body.Close()
	var v struct {
		State string `json:"state"`
		Error string `json:"error"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&v)
	if resp.StatusCode != http.StatusOK {
		return strconv.Itoa(resp.StatusCode) + " " + v.Error
	}
	return v.State
}
