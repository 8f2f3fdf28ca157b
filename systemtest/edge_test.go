package systemtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/golang-jwt/jwt/v5"
)

// The edge test runs the local split cluster of deploy/local/cluster.sh as
// real processes (Redis primary and replica, control plane, two order
// sinks, two inventory tiers, two gateways, nginx with
// deploy/nginx/flashgate.conf in front), all on loopback, and checks the
// limits at the edge (issue: buyers sharing an address). It takes about a
// minute, so it runs only with FLASHGATE_EDGE_TEST=1 (make test-edge) and
// needs nginx, redis-server, curl and python3.

// edgeCluster is one cluster.sh cluster.
type edgeCluster struct {
	dir, script     string
	target, admin   string
	jwt, adminToken []byte
	gateways        []string
}

// startEdgeCluster builds nothing: bin is the flashgate binary. env adds
// settings every process reads (FLASHGATE_SALE_RATE reaches the gateways).
func startEdgeCluster(t *testing.T, bin, root, name string, env ...string) *edgeCluster {
	t.Helper()
	return startEdgeClusterArgs(t, bin, root, name, nil, env...)
}

// startEdgeClusterArgs is startEdgeCluster with arguments for cluster.sh up.
func startEdgeClusterArgs(t *testing.T, bin, root, name string, args []string, env ...string) *edgeCluster {
	t.Helper()
	// Not t.TempDir: nginx workers run as nobody when the test runs as
	// root, and must reach their cache directory inside.
	parent, err := os.MkdirTemp("", "flashgate-edge-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(parent, 0o711); err != nil {
		t.Fatal(err)
	}
	c := &edgeCluster{dir: filepath.Join(parent, name), script: filepath.Join(root, "deploy", "local", "cluster.sh")}
	environ := append(os.Environ(), "FLASHGATE_BIN="+bin, "FLASHGATE_CLUSTER_DIR="+c.dir)
	environ = append(environ, env...)
	t.Cleanup(func() {
		c.stopAll(t)
		cmd := exec.Command(c.script, "down")
		cmd.Env = environ
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("cluster.sh down: %v\n%s", err, out)
		}
		if t.Failed() {
			t.Logf("cluster logs kept in %s", c.dir)
			return
		}
		_ = os.RemoveAll(parent)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.script, append([]string{"up"}, args...)...)
	cmd.Env = environ
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("cluster.sh up: %v\n%s", err, out)
	}
	grab := func(re string) string {
		m := regexp.MustCompile(re).FindSubmatch(out)
		if m == nil {
			t.Fatalf("cluster.sh up printed no %s:\n%s", re, out)
		}
		return string(m[1])
	}
	c.target = grab(`public:\s+(\S+)\s+\(nginx in front`)
	c.admin = grab(`admin:\s+(\S+)`)
	c.jwt = []byte(grab(`export FLASHGATE_JWT_SECRET=(\S+)`))
	c.adminToken = []byte(grab(`export FLASHGATE_ADMIN_TOKEN=(\S+)`))
	c.gateways = strings.Fields(grab(`gateways:\s+([^\n]+)`))
	if len(c.gateways) != 2 {
		t.Fatalf("cluster.sh up: want two gateways, got %q", c.gateways)
	}
	return c
}

// liveGateways returns the fewest live gateways any gateway counted at
// its last change of share ("sale rate shared" in its log), 0 before each
// logged one.
func (c *edgeCluster) liveGateways(t *testing.T) int {
	t.Helper()
	re := regexp.MustCompile(`sale rate shared"[^\n]* live_gateways=(\d+)`)
	fewest := math.MaxInt
	for i := range c.gateways {
		b, err := os.ReadFile(filepath.Join(c.dir, "logs", fmt.Sprintf("gateway-%d.log", i+1)))
		if err != nil {
			t.Fatalf("reading a gateway's log: %v", err)
		}
		m := re.FindAllSubmatch(b, -1)
		if len(m) == 0 {
			return 0
		}
		n, _ := strconv.Atoi(string(m[len(m)-1][1]))
		fewest = min(fewest, n)
	}
	return fewest
}

// stopAll sends SIGTERM to every process of the cluster at once (cluster.sh
// down stops them one by one, which takes half a minute); cluster.sh down
// then finds them gone, or ends what is left.
func (c *edgeCluster) stopAll(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(c.dir, "pids"))
	if err != nil {
		return
	}
	var procs []*os.Process
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line) // name pid command check
		if len(f) < 3 {
			continue
		}
		pid, err := strconv.Atoi(f[1])
		if err != nil {
			continue
		}
		comm, err := os.ReadFile("/proc/" + f[1] + "/comm")
		if err != nil || !strings.HasPrefix(strings.TrimSpace(string(comm)), f[2]) {
			continue // gone, or no longer ours
		}
		if p, err := os.FindProcess(pid); err == nil && p.Signal(syscall.SIGTERM) == nil {
			procs = append(procs, p)
		}
	}
	testwait.For(15*time.Second, func() bool {
		for _, p := range procs {
			if p.Signal(syscall.Signal(0)) == nil {
				return false
			}
		}
		return true
	})
}

func (c *edgeCluster) adminCall(t *testing.T, method, path, body string) map[string]any {
	t.Helper()
	req, err := http.NewRequest(method, c.admin+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+string(c.adminToken))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s %s: %v: %s", method, path, err, b)
	}
	return v
}

// openSale creates a sale and opens it.
func (c *edgeCluster) openSale(t *testing.T, id string, total int) {
	t.Helper()
	c.adminCall(t, "POST", "/admin/sales", fmt.Sprintf(`{"id":%q,"name":"edge","price_cents":100,"total":%d}`, id, total))
	c.adminCall(t, "POST", "/admin/sales/"+id+"/start", "")
}

// tokens mints one token per user.
func (c *edgeCluster) tokens(t *testing.T, users []string) []string {
	t.Helper()
	out := make([]string, len(users))
	for i, u := range users {
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.RegisteredClaims{
			Subject: u, ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour)),
		}).SignedString(c.jwt)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = tok
	}
	return out
}

// edgeAnswer is one purchase's answer.
type edgeAnswer struct {
	i      int // index into the tokens
	status int
	code   string // the error code, or "" for 201
	at     time.Duration
}

// purchases sends one purchase per token (tokens may repeat), paced at rate
// per second (0: as fast as conc connections answer), and returns the
// answers in the order they were sent.
func purchases(ctx context.Context, t *testing.T, target, path string, tokens []string, rate float64, conc int) []edgeAnswer {
	t.Helper()
	tr := &http.Transport{MaxConnsPerHost: conc, MaxIdleConnsPerHost: conc}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	out := make([]edgeAnswer, len(tokens))
	var next atomic.Int64
	var transport atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= len(tokens) {
					return
				}
				if rate > 0 {
					if d := time.Until(start.Add(time.Duration(float64(i) / rate * float64(time.Second)))); d > 0 {
						time.Sleep(d) // not a synchronisation: the offered rate
					}
				}
				req, _ := http.NewRequestWithContext(ctx, "POST", target+path, nil)
				req.Header.Set("Authorization", "Bearer "+tokens[i])
				at := time.Since(start)
				resp, err := client.Do(req)
				if err != nil {
					transport.Add(1)
					out[i] = edgeAnswer{i: i, status: -1, code: err.Error(), at: at}
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				var v struct {
					Error string `json:"error"`
				}
				_ = json.Unmarshal(b, &v)
				out[i] = edgeAnswer{i: i, status: resp.StatusCode, code: v.Error, at: at}
			}
		}()
	}
	wg.Wait()
	if n := transport.Load(); n > 0 {
		t.Errorf("%d purchases failed in transport", n)
	}
	return out
}

func tallyAnswers(as []edgeAnswer) map[string]int {
	m := map[string]int{}
	for _, a := range as {
		m[strings.TrimSpace(strconv.Itoa(a.status)+" "+a.code)]++
	}
	return m
}

// accessLog returns nginx's access log lines of the cluster.
func (c *edgeCluster) accessLog(t *testing.T) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(c.dir, "nginx", "logs", "access.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines
}

var upstreamRE = regexp.MustCompile(`^(\S+) .*"POST (\S+) [^"]*" (\d+) .* upstream=(\S+) `)

func TestEdge(t *testing.T) {
	if os.Getenv("FLASHGATE_EDGE_TEST") != "1" {
		t.Skip("the edge test starts a whole cluster with nginx: make test-edge (FLASHGATE_EDGE_TEST=1)")
	}
	for _, tool := range []string{"nginx", "redis-server", "redis-cli", "curl", "python3"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the edge test needs %s (Debian: nginx, redis-server, curl, python3)", tool)
		}
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "flashgate")
	build := exec.Command("go", "build", "-o", bin, "./cmd/flashgate")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	// The Sentinel failover first and alone: its timing is the Sentinels'.
	t.Run("sentinel", func(t *testing.T) { edgeSentinel(t, bin, root) })
	// Two clusters side by side: the run takes as long as the longer one.
	t.Run("crowd", func(t *testing.T) { t.Parallel(); edgeCrowd(t, bin, root) })
	t.Run("sale-rate", func(t *testing.T) { t.Parallel(); edgeSaleRate(t, bin, root) })
}

// edgeCrowd: 20,000 distinct buyers from one address through nginx buy a
// 200-unit sale: exactly 200 sold, no 429 (nobody exceeded their own
// budget); buyers flooding with one token each are held to their budget
// and always reach one gateway; the crowd command spreads over several
// loopback source addresses.
func edgeCrowd(t *testing.T, bin, root string) {
	c := startEdgeCluster(t, bin, root, "crowd")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	c.openSale(t, "edge", 200)
	users := make([]string, 20000)
	for i := range users {
		users[i] = "buyer-" + strconv.Itoa(i)
	}
	// 1,500 a second: under the per-address cap of flashgate.conf (2,000 a
	// second after a burst of 10,000), whatever the machine's speed.
	as := purchases(ctx, t, c.target, "/api/sales/edge/orders", c.tokens(t, users), 1500, 64)
	got := tallyAnswers(as)
	t.Logf("20,000 buyers from one address: %v", got)
	if got["201"] != 200 || got["409 sold_out"] != 19800 || len(got) != 2 {
		t.Errorf("20,000 buyers of 200 units: got %v, want 200 × 201 and 19,800 × 409 sold_out (no 429: nobody exceeded their own limit)", got)
	}
	var f map[string]any
	if _, ok := testwait.For(30*time.Second, func() bool {
		f = c.adminCall(t, "GET", "/admin/sales/edge", "")
		orders, _ := f["orders"].(map[string]any)
		return f["booked"] == 200.0 && orders["persisted"] == 200.0
	}); !ok {
		t.Fatalf("sale figures after the crowd: %v, want booked 200 and 200 rows", f)
	}

	// Four buyers flood at once through nginx, 150 purchases each, tagged
	// in the access log by the query string (the gateway ignores it).
	c.openSale(t, "flood", 100)
	flooders := c.tokens(t, []string{"flooder-0", "flooder-1", "flooder-2", "flooder-3"})
	var fwg sync.WaitGroup
	results := make([][]edgeAnswer, len(flooders))
	t0 := time.Now()
	for k := range flooders {
		fwg.Add(1)
		go func() {
			defer fwg.Done()
			toks := make([]string, 150)
			for i := range toks {
				toks[i] = flooders[k]
			}
			// The first purchase goes alone, so that it is the first to
			// arrive (with 4 at once, a slow goroutine could send it sixth).
			path := "/api/sales/flood/orders?b=" + strconv.Itoa(k)
			first := purchases(ctx, t, c.target, path, toks[:1], 0, 1)
			results[k] = append(first, purchases(ctx, t, c.target, path, toks[1:], 0, 4)...)
		}()
	}
	fwg.Wait()
	elapsed := time.Since(t0)
	// Each buyer's budget: a burst of 5 and 2 a second (--user-burst,
	// --user-rate), the same at nginx and at the gateway.
	budget := 5 + int(math.Ceil(2*elapsed.Seconds())) + 1
	for k, as := range results {
		got := tallyAnswers(as)
		passed := len(as) - got["429 rate_limited"]
		t.Logf("flooder %d (150 purchases in %s): %v", k, elapsed.Round(time.Millisecond), got)
		if passed > budget || passed < 5 {
			t.Errorf("flooder %d: %d purchases got past the limits in %s, want 5 to %d: %v", k, passed, elapsed, budget, got)
		}
		if got["201"] != 1 || got["201"]+got["409 already_purchased"]+got["429 rate_limited"] != len(as) {
			t.Errorf("flooder %d: got %v, want one 201, then 409 already_purchased within the budget and 429 rate_limited", k, got)
		}
		if as[0].status == http.StatusTooManyRequests {
			t.Errorf("flooder %d: the first purchase was refused 429", k)
		}
	}
	// Every purchase of one flooder that nginx passed on reached one
	// gateway; the crowd reached both.
	perBuyer := map[string]map[string]bool{}
	crowd := map[string]int{}
	for _, line := range c.accessLog(t) {
		m := upstreamRE.FindStringSubmatch(line)
		if m == nil || m[4] == "-" {
			continue
		}
		switch {
		case strings.HasPrefix(m[2], "/api/sales/flood/orders?b="):
			if perBuyer[m[2]] == nil {
				perBuyer[m[2]] = map[string]bool{}
			}
			perBuyer[m[2]][m[4]] = true
		case m[2] == "/api/sales/edge/orders":
			crowd[m[4]]++
		}
	}
	for k := range flooders {
		q := "/api/sales/flood/orders?b=" + strconv.Itoa(k)
		if len(perBuyer[q]) != 1 {
			t.Errorf("flooder %d reached gateways %v, want exactly one", k, perBuyer[q])
		}
	}
	if len(crowd) != 2 {
		t.Errorf("the crowd reached gateways %v, want both", crowd)
	}
	for gw, n := range crowd {
		if n < 20000/4 {
			t.Errorf("the crowd's requests: gateway %s got %d of 20,000, want a fair share (consistent hashing on tokens)", gw, n)
		}
	}

	// The crowd command through nginx from four loopback addresses.
	c.openSale(t, "spread", 50)
	cmd := exec.CommandContext(ctx, bin, "crowd", "--target", c.target, "--sale", "spread",
		"--users", "2000", "--concurrency", "16", "--rate", "1000", "--progress=false",
		"--source-addrs", "127.0.0.2-127.0.0.5", "--admin", c.admin)
	cmd.Env = append(os.Environ(), "FLASHGATE_JWT_SECRET="+string(c.jwt), "FLASHGATE_ADMIN_TOKEN="+string(c.adminToken))
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("cross-check   ok")) || bytes.Contains(out, []byte("429 rate_limited")) {
		t.Errorf("flashgate crowd --source-addrs: %v\n%s", err, out)
	}
	from := map[string]bool{}
	for _, line := range c.accessLog(t) {
		if m := upstreamRE.FindStringSubmatch(line); m != nil && m[2] == "/api/sales/spread/orders" {
			from[m[1]] = true
		}
	}
	if len(from) != 4 || !from["127.0.0.2"] || !from["127.0.0.5"] {
		t.Errorf("crowd --source-addrs 127.0.0.2-127.0.0.5: nginx saw clients %v, want those four", from)
	}
}

// edgeSaleRate: with --sale-rate R and two gateways, the deployment lets
// about R purchases a second through in total, not 2R.
func edgeSaleRate(t *testing.T, bin, root string) {
	const saleRate = 100
	c := startEdgeCluster(t, bin, root, "salerate", "FLASHGATE_SALE_RATE="+strconv.Itoa(saleRate))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c.openSale(t, "rate", 100000)
	// The gateways count each other within a heartbeat (1 s) of starting,
	// and each logs its share when its count changes.
	testwait.Eventually(t, 10*time.Second, func() bool { return c.liveGateways(t) == 2 },
		"both gateways to log two live gateways")
	const offered, n = 500, 2500 // 5 s at 500 a second, 5 times the limit
	users := make([]string, n)
	for i := range users {
		users[i] = "r-" + strconv.Itoa(i)
	}
	as := purchases(ctx, t, c.target, "/api/sales/rate/orders", c.tokens(t, users), offered, 64)
	got := tallyAnswers(as)
	span := as[len(as)-1].at.Seconds()
	// What a token bucket of rate R and burst R (the default burst, shared
	// like the rate) lets through in the span: R × span + R.
	want := saleRate*span + saleRate
	t.Logf("--sale-rate %d, 2 gateways, %d purchases offered over %.2f s: %v; a bucket lets through %.0f", saleRate, n, span, got, want)
	if len(got) != 2 || got["201"]+got["429 rate_limited"] != n {
		t.Errorf("answers %v, want only 201 and 429 rate_limited", got)
	}
	// Tolerance: +15 % and 10 for timing (the gateways' buckets refill
	// while requests are in flight); each gateway taking the whole rate
	// would let through about twice as many.
	if hi := 1.15*want + 10; float64(got["201"]) > hi {
		t.Errorf("--sale-rate %d with 2 gateways let %d through in %.2f s, want at most %.0f (about %.0f)", saleRate, got["201"], span, hi, want)
	}
	if lo := 0.75 * want; float64(got["201"]) < lo {
		t.Errorf("--sale-rate %d with 2 gateways let only %d through in %.2f s, want at least %.0f (about %.0f)", saleRate, got["201"], span, lo, want)
	}
}
