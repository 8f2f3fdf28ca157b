package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flashgate/flashgate/internal/testenv/procgroup"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/lua"
)

// sample is one series of a scrape: its labels and value.
type sample struct {
	labels map[string]string
	value  float64
}

// scrapeText parses the Prometheus text format into samples by metric name.
// It knows the subset flashgate's collectors write: label values without
// escaped quotes.
func scrapeText(t *testing.T, body string) map[string][]sample {
	t.Helper()
	out := map[string][]sample{}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			t.Fatalf("scrape: bad value in %q", line)
		}
		series := line[:sp]
		name, rest, _ := strings.Cut(series, "{")
		ls := map[string]string{}
		for _, kv := range strings.Split(strings.TrimSuffix(rest, "}"), ",") {
			if k, val, ok := strings.Cut(kv, "="); ok {
				ls[k] = strings.Trim(val, `"`)
			}
		}
		out[name] = append(out[name], sample{ls, v})
	}
	return out
}

// aggregate is how a dashboard panel or an alert rule folds the series of
// every scraped process: "sum" or "max" by one label ("" for none).
type aggregate struct {
	op, by string
}

// over folds name's series in every scrape by a.
func (a aggregate) over(scrapes []map[string][]sample, name string) map[string]float64 {
	out := map[string]float64{}
	seen := map[string]bool{}
	for _, sc := range scrapes {
		for _, s := range sc[name] {
			k := s.labels[a.by]
			switch {
			case !seen[k]:
				out[k] = s.value
			case a.op == "sum":
				out[k] += s.value
			default:
				out[k] = max(out[k], s.value)
			}
			seen[k] = true
		}
	}
	return out
}

// freeAddr returns a loopback address with a port nobody listens on and
// no other harness of this process was handed (procgroup.FreePort).
func freeAddr(t *testing.T) string {
	t.Helper()
	port, err := procgroup.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// dashboardExprs returns every query of deploy/grafana/flashgate.json by
// panel title.
func dashboardExprs(t *testing.T) map[string][]string {
	t.Helper()
	raw, err := os.ReadFile("../../deploy/grafana/flashgate.json")
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title   string  `json:"title"`
		Panels  []panel `json:"panels"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	}
	var d struct {
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			for _, tg := range p.Targets {
				out[p.Title] = append(out[p.Title], tg.Expr)
			}
		}
	}
	walk(d.Panels)
	return out
}

// TestSplitMetricsOneOwner runs the split deployment as `flashgate
// gateway`, `controlplane` and `ordersink` commands, two of each (each with
// its own registry, listeners and connections, as separate processes have),
// sells through both gateways, then scrapes all six and folds the series as
// the dashboard does: orders by status, booked units, the streams' backlog
// and the sinks' backlog come out as the database and Redis say, not once
// per process. Then it holds SQLite's write lock so that entries stay in
// the sinks, and checks the backlog figures again while they are not zero.
func TestSplitMetricsOneOwner(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	// The folds the test checks, with the exact queries of the dashboard
	// they stand for: a change to either fails here.
	panels := []struct {
		title, expr string
	}{
		{"Orders in the database by status", "max by (status) (flashgate_orders)"},
		{"Booked and admitted per sale", `max by (sale) (flashgate_sale_booked{sale=~"$sale"})`},
		{"Stream backlog per sale", `max by (sale) (flashgate_stream_backlog{sale=~"$sale"})`},
		{"Stream backlog", `sum(max by (sale) (flashgate_stream_backlog{sale=~"$sale"}))`},
		{"Sink orders / s and batches by result", "sum(flashgate_sink_backlog)"},
	}
	exprs := dashboardExprs(t)
	for _, p := range panels {
		found := false
		for _, e := range exprs[p.title] {
			found = found || e == p.expr
		}
		if !found {
			t.Errorf("dashboard panel %q: no query %q (has %q)", p.title, p.expr, exprs[p.title])
		}
	}

	rs := redistest.Start(t)
	rdb := rs.Client(t)
	dbPath := filepath.Join(t.TempDir(), "fg.db")
	const secret, adminTok, sale = "split-secret", "split-admin", "one"
	ctx, cancel := context.WithCancel(context.Background())
	var errb lockedBuffer
	done := make(chan error, 6)
	start := func(args ...string) {
		args = append(args, "--redis", rs.URL, "--log-level", "error")
		go func() { done <- run(ctx, args, io.Discard, &errb, env(nil)) }()
	}
	t.Cleanup(func() {
		cancel()
		for range 6 {
			if err := <-done; err != nil {
				t.Errorf("a tier ended with %v", err)
			}
		}
	})
	db := "sqlite://" + dbPath
	var cps, gws, gwMetrics, sinks []string
	for range 2 {
		cp := freeAddr(t)
		start("controlplane", "--db", db, "--admin-token", adminTok, "--admin-listen", cp)
		cps = append(cps, "http://"+cp)
	}
	for i := range 2 {
		gw, m := freeAddr(t), freeAddr(t)
		start("gateway", "--db", db, "--jwt-secret", secret, "--listen", gw, "--metrics-listen", m, "--state-refresh", "20ms")
		gws, gwMetrics = append(gws, "http://"+gw), append(gwMetrics, "http://"+m)
		sk := freeAddr(t)
		// Neither sink claims the other's entries while the test holds them
		// stuck, so that each one's share stays put.
		start("ordersink", "--db", db, "--admin-listen", sk, "--sink-name", fmt.Sprintf("sink-%d", i), "--sink-claim-idle", "10m")
		sinks = append(sinks, "http://"+sk)
	}
	metricsURLs := append(append(append([]string(nil), cps...), gwMetrics...), sinks...)

	get := func(url string) (int, string) {
		res, err := http.Get(url)
		if err != nil {
			return 0, err.Error()
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	scrape := func() []map[string][]sample {
		var out []map[string][]sample
		for _, u := range metricsURLs {
			code, body := get(u + "/metrics")
			if code != 200 {
				t.Fatalf("GET %s/metrics: %d %s", u, code, body)
			}
			out = append(out, scrapeText(t, body))
		}
		return out
	}
	var last string // what the condition waited on last saw
	wait := func(what string, cond func() bool) {
		t.Helper()
		if _, ok := testwait.For(60*time.Second, cond); !ok {
			t.Fatalf("waited 60s for %s (last seen: %s)\nlogs:\n%s", what, last, errb.String())
		}
	}
	wait("every tier to be ready", func() bool {
		for _, u := range metricsURLs {
			if code, _ := get(u + "/readyz"); code != 200 {
				return false
			}
		}
		return true
	})
	wait("one leader", func() bool {
		return aggregate{"sum", ""}.over(scrape(), "flashgate_controlplane_leader")[""] == 1
	})
	for _, u := range gwMetrics {
		_, body := get(u + "/metrics")
		for _, name := range []string{"flashgate_orders", "flashgate_sale_booked", "flashgate_controlplane_leader", "flashgate_stream_backlog"} {
			if strings.Contains(body, name) {
				t.Errorf("gateway %s exports %s, a control plane's figure", u, name)
			}
		}
	}

	admin := func(method, path, body string) (int, map[string]any) {
		req, _ := http.NewRequest(method, cps[1]+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+adminTok)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var m map[string]any
		_ = json.NewDecoder(res.Body).Decode(&m)
		return res.StatusCode, m
	}
	if code, m := admin("POST", "/admin/sales", `{"id":"`+sale+`","name":"One","price_cents":100,"total":40}`); code != 201 {
		t.Fatalf("create: %d %v", code, m)
	}
	if code, m := admin("POST", "/admin/sales/"+sale+"/start", ""); code != 200 {
		t.Fatalf("start: %d %v", code, m)
	}
	buyer := func(user string) string {
		tok, err := mintToken([]byte(secret), user, time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	call := func(gw, method, path, user string) (int, map[string]any) {
		req, _ := http.NewRequest(method, gw+path, nil)
		req.Header.Set("Authorization", "Bearer "+buyer(user))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var m map[string]any
		_ = json.NewDecoder(res.Body).Decode(&m)
		return res.StatusCode, m
	}
	wait("the gateways to see the sale open", func() bool {
		for _, gw := range gws {
			code, m := call(gw, "GET", "/api/sales/"+sale, "x")
			if code != 200 || m["state"] != "open" {
				return false
			}
		}
		return true
	})
	// Twelve buyers through both gateways; four pay, three cancel.
	var orders []string
	for i := range 12 {
		code, m := call(gws[i%2], "POST", "/api/sales/"+sale+"/orders", fmt.Sprintf("u%d", i))
		if code != 201 {
			t.Fatalf("purchase %d: %d %v", i, code, m)
		}
		orders = append(orders, m["order_id"].(string))
	}
	for i, id := range orders[:7] {
		action := "/pay"
		if i >= 4 {
			action = "/cancel"
		}
		if code, m := call(gws[i%2], "POST", "/api/orders/"+id+action, fmt.Sprintf("u%d", i)); code != 200 {
			t.Fatalf("%s of %s: %d %v", action, id, code, m)
		}
	}
	want := map[string]float64{"pending_payment": 5, "paid": 4, "cancelled": 3, "expired": 0, "refunded": 0}
	wait("the folded figures to match the database and Redis", func() bool {
		sc := scrape()
		booked, _ := rdb.HGet(ctx, lua.SaleKey(sale), lua.FieldBooked).Float64()
		got := aggregate{"max", "status"}.over(sc, "flashgate_orders")
		for k, v := range want {
			if got[k] != v {
				return false
			}
		}
		return booked == 9 &&
			aggregate{"max", "sale"}.over(sc, "flashgate_sale_booked")[sale] == booked &&
			aggregate{"max", "sale"}.over(sc, "flashgate_stream_backlog")[sale] == 0 &&
			aggregate{"sum", ""}.over(sc, "flashgate_sink_backlog")[""] == 0
	})
	// Even the plain sums read the truth: each figure has one exporter.
	sc := scrape()
	if got := (aggregate{"sum", "status"}).over(sc, "flashgate_orders"); got["paid"] != 4 || got["cancelled"] != 3 {
		t.Errorf("sum by (status) (flashgate_orders): got %v, want paid 4, cancelled 3", got)
	}
	if got := (aggregate{"sum", "sale"}).over(sc, "flashgate_sale_booked")[sale]; got != 9 {
		t.Errorf("sum by (sale) (flashgate_sale_booked): got %v, want 9", got)
	}

	// Hold SQLite's write lock: the sinks read new entries and cannot
	// commit them, so they stay pending in the sinks and in the stream.
	lockDB, err := sql.Open("sqlite", dbPath+"?_busy_timeout=10000") // the tiers commit meanwhile
	if err != nil {
		t.Fatal(err)
	}
	defer lockDB.Close()
	conn, err := lockDB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	for i := 12; i < 18; i++ {
		if code, m := call(gws[i%2], "POST", "/api/sales/"+sale+"/orders", fmt.Sprintf("u%d", i)); code != 201 {
			t.Fatalf("purchase %d: %d %v", i, code, m)
		}
	}
	var perSink [2]float64
	wait("the six stuck entries in the folded backlogs", func() bool {
		xlen, _ := rdb.XLen(ctx, lua.OrdersKey(sale)).Result()
		p, err := rdb.XPending(ctx, lua.OrdersKey(sale), lua.SinkGroup).Result()
		if err != nil || xlen != 6 || p.Count != 6 {
			last = fmt.Sprintf("stream length %d, pending %v (%v)", xlen, p, err)
			return false
		}
		sc := scrape()
		for i := range sinks {
			perSink[i] = aggregate{"sum", ""}.over(sc[len(cps)+len(gwMetrics)+i:][:1], "flashgate_sink_backlog")[""]
		}
		last = fmt.Sprintf("pending by consumer %v, sink gauges %v, stream backlog max %v sum %v", p.Consumers, perSink,
			aggregate{"max", "sale"}.over(sc, "flashgate_stream_backlog"), aggregate{"sum", "sale"}.over(sc, "flashgate_stream_backlog"))
		for i := range sinks {
			if perSink[i] != float64(p.Consumers[fmt.Sprintf("sink-%d", i)]) {
				return false
			}
		}
		// Only the dashboard's max: while SQLite is locked a leader's loop
		// may block past its lease, and until its next tick two control
		// planes may export (the reason the dashboard folds with max).
		return aggregate{"sum", ""}.over(sc, "flashgate_sink_backlog")[""] == 6 &&
			aggregate{"max", "sale"}.over(sc, "flashgate_stream_backlog")[sale] == 6
	})
	t.Logf("last seen: %s", last)
	t.Logf("stuck entries per sink: %v", perSink)
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	wait("the backlog to drain", func() bool {
		sc := scrape()
		return aggregate{"sum", ""}.over(sc, "flashgate_sink_backlog")[""] == 0 &&
			aggregate{"max", "status"}.over(sc, "flashgate_orders")["pending_payment"] == 11
	})
}

// lockedBuffer is a buffer several tiers' loggers write to at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
