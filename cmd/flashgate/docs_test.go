package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/controlplane"
	"github.com/flashgate/flashgate/gateway"
	"github.com/flashgate/flashgate/internal/buildinfo"
	"github.com/flashgate/flashgate/inventory"
	"github.com/flashgate/flashgate/ordersink"
	"github.com/flashgate/flashgate/sqldb"
)

var updateDocs = flag.Bool("update-docs", false, "rewrite the generated tables of docs/api.md and README.md (go generate ./cmd/flashgate)")

// flagDoc is what docs/api.md says of a flag beyond its spec: the meaning
// (markdown; default the spec's usage) and, for a flag whose default is
// empty, what that means ("none", "primary", ...). Defaults that are not
// empty always come from the spec.
type flagDoc struct {
	none, meaning string
}

// flagDocs holds the docs' wording of each flag. A flag missing here is
// documented by its usage string.
var flagDocs = map[string]flagDoc{
	"listen":             {"", "public (gateway) listener; the inventory tier's HTTP face"},
	"admin-listen":       {"", "control plane listener: admin API, dashboard, `/metrics`; the order sink's health and metrics"},
	"redis":              {"(none)", "primary, `redis://host:port/db`; required except for `demo`"},
	"redis-replicas":     {"primary", "comma-separated replica URLs, used for all gateway reads; each gateway reads from one (picked by process id, the next if that one does not answer at start-up) and falls back to the primary while its replica fails"},
	"db":                 {"", "`postgres://…` or `sqlite://PATH`, PATH relative or absolute (`sqlite:///var/lib/flashgate/orders.db`)"},
	"jwt-secret":         {"(none; required)", "HS256 secret for buyer tokens"},
	"admin-token":        {"(none; required)", "bearer token for the admin API"},
	"queue-seed-secret":  {"derived from `--admin-token`", "key the control plane derives each fair queue's seed from (HMAC-SHA256 of the sale id and the queue's epoch); control plane only, never give it to gateways; keep it across restarts and never change it while a queue waits for its start; unset: HMAC-SHA256(key = the admin token, message = `flashgate fair queue seed v1`)"},
	"queue-secret":       {"derived from `--jwt-secret`", "key of fair-queue tickets and proof-of-work challenges, the same on every gateway; unset: HMAC-SHA256(key = the JWT secret, message = `flashgate fair queue v1`)"},
	"inventory":          {"in-process", "comma-separated `http://host:port` of inventory tiers (split mode)"},
	"inventory-token":    {"none", "the bearer token an `inventory` process requires on `/v1/` and gateways send"},
	"user-rate":          {"", "per-user purchase attempts per second reaching admission (0 = no limit)"},
	"user-burst":         {"", "per-user burst of purchase attempts; at least 1 while `--user-rate` is above 0"},
	"sale-rate":          {"", "per-sale attempts per second the whole deployment lets through to inventory (0 = no limit); the live gateways share it, each taking rate / n with n counted through Redis every second (deploy/README.md, \"Limits across gateways\")"},
	"user-limiters":      {"", "per-user rate limiters a gateway holds at once (16 bytes each); past it, users whose bucket has refilled are forgotten first"},
	"fast-conns":         {"", "open gateway connections that keep their read/write buffers when idle (about 16 KB each); the rest hold about 4 KB idle for one more read per request"},
	"payment-window":     {"", "unpaid orders expire after this"},
	"state-refresh":      {"", "how often a gateway re-reads sale state from its replica"},
	"resync-every":       {"", "how often the leader re-syncs stock from the database"},
	"wait-replicas":      {"", "replicas (`WAIT`, at most " + shortDuration(inventory.DefaultWaitTimeout) + ") a reserve (inventory), and a fair queue's entry (gateway), must reach before it is answered `201`: `auto` = those the sale's primary has online (none: no `WAIT`; only a primary that says `role:master` gives the count: an error reply to `INFO` or a node that says `role:slave` means waiting for at least one replica, `503` with none), `n` = exactly n, `0` = none (a failover may lose a `201`); a shortfall answers `503` and the retry finds the order (the entry)"},
	"reserve-batch":      {"", "most reserves of one sale (or bucket) sent in one script call; reserves that arrive while the sale's calls (two at most) are out wait and go together in the next; `1` sends each alone"},
	"metrics-listen":     {"none", "`gateway` and `inventory` alone: a listener for their `/metrics`, `/healthz`, `/readyz`"},
	"log-level":          {"", "`debug`, `info`, `warn`, `error` (`log/slog` text on stderr)"},
	"pprof":              {"", "`/debug/pprof/` on the admin listener"},
	"sink-name":          {"`<hostname>-<admin-listen port>`", "the order sink's consumer name, stable across restarts (in Kubernetes the pod name)"},
	"sink-wait-replicas": {"", "replicas (`WAIT`) what the order sink read must reach before it commits it: `auto` = those the stream's primary has online (only a primary that says `role:master` gives the count; a count it cannot give means at least one), `n` = exactly n, `0` = none"},
	"sink-wait-timeout":  {"", "bound of each such `WAIT`; a shortfall delays the batch. The sink's Redis read timeout is this plus 500ms (at least 1s): a primary gone silent (killed, frozen, partitioned) holds the sink no longer"},
	"sink-claim-idle":    {"", "how long another (dead) sink's entries sit before this sink claims them"},
	"units":              {"", "units on sale"},
	"users":              {"", "distinct buyers"},
	"concurrency":        {"", "requests in flight"},
	"progress":           {"", "draw a progress bar"},
	"serve":              {"", "keep serving after the report (open the pages in a browser)"},
	"fair":               {"", "a fair drop instead (`make demo-fair`): people (`--users`, default 3000 with `--fair`) entering at random through a 5 s pre-queue, scalpers entering the moment it opens and polling every 50 ms, everyone paying a proof of work; reports units by group, the seed check anyone can redo and the invariants"},
	"scalpers":           {"", "with `--fair`, scalpers"},
	"accounts":           {"", "with `--fair`, accounts per scalper"},
	"target":             {"", "gateway base URL"},
	"sale":               {"", "sale id"},
	"rate":               {"", "arrival rate in requests per second (0 = as fast as answers come)"},
	"quantity":           {"", "units per purchase"},
	"timeout":            {"", "per-request timeout"},
	"admin":              {"none", "control plane base URL for the cross-check (e.g. `http://127.0.0.1:8081`)"},
	"source-addrs":       {"the system's choice", "local addresses the crowd dials from, in turn: IPs and ranges, e.g. `127.0.0.2-127.0.0.20`"},
	"user":               {"none", "the buyer's user id (the token's `sub`); required unless `--count` > 1"},
	"count":              {"", "print this many tokens, one a line, for users `<user-prefix>0…<count-1>`"},
	"user-prefix":        {"", "with `--count`: user ids are this prefix and a number"},
	"ttl":                {"", "token lifetime"},

	// The item page's payment form.
	"stripe-publishable-key": {"none", "Stripe publishable key, `pk_…` (with `--payments stripe`): the item page loads Stripe.js, mounts the Payment Element with the order's `client_secret`, confirms the payment and follows the order until it is paid (see \"Payments\", \"The item page pays\"); unset, the page only starts the payment. Published in every page: never a secret key"},
	"stripe-js-url":          {"", "the Stripe.js the item page loads with `--stripe-publishable-key`; its origin is the only one besides the gateway the page's `Content-Security-Policy` lets scripts come from (tests point it at a stand-in)"},
}

// readmeDocs holds README.md's wording of a server flag where it differs
// from docs/api.md's (flagDocs); README's table is generated too.
var readmeDocs = map[string]string{
	"listen":             "public listener (gateway; the inventory tier's HTTP face)",
	"admin-listen":       "control plane: admin API, dashboard, `/metrics`; the order sink's health and metrics",
	"redis":              "required except for `demo`; one of three forms. `redis://[user:pass@]host:port/db` (or `rediss://`): one primary. `redis+cluster://[user:pass@]h1:p1,h2:p2,…` (or go-redis's `redis://h1:p1?addr=h2:p2&addr=h3:p3`): seed nodes of a Redis Cluster; gateways read sale state from replicas (`ReadOnly`, falling back to primaries), the slot map is reloaded every second. `redis+sentinel://[user:pass@]s1:p1,s2:p2/MASTER[/db]`: Sentinels and the master name; user and password are the Sentinels', the data nodes' go in `?username=…&password=…`; gateways read from the master's replicas. Each form takes go-redis's URL options (`?dial_timeout=3s`, …)",
	"redis-replicas":     "replica URLs; each gateway reads from one (picked by process id, the next if that one does not answer at start-up; none answering ends the process) and, while running, falls back to the primary whenever its replica fails",
	"db":                 "`postgres://…` or `sqlite://PATH`",
	"queue-seed-secret":  "the control plane's key of fair-queue seeds (seed = HMAC-SHA256 of the sale id and the queue's epoch, so it reaches Redis only at the start); never give it to gateways; unset: HMAC-SHA256(key = the admin token, message = `flashgate fair queue seed v1`) (README, \"Fair queue\")",
	"queue-secret":       "the key of fair-queue tickets and proof-of-work challenges, the same on every gateway; unset: HMAC-SHA256(key = the JWT secret, message = `flashgate fair queue v1`) (README, \"Fair queue\")",
	"inventory":          "`http://host:port,…` of inventory tiers",
	"inventory-token":    "the bearer token an `inventory` process requires on `/v1/` and gateways send (constant-time compare; set it whenever the tiers run apart)",
	"sale-rate":          "per-sale attempts per second the whole deployment lets through (0 = no limit): gateways announce themselves in Redis every second (`fg:gateways`) and each takes rate / live gateways (see `deploy/README.md`, \"Limits across gateways\")",
	"user-limiters":      "per-user rate limiters a gateway holds at once, 16 bytes of state each (at most 16 MB at the default); past it, users whose bucket has refilled are forgotten first (forgetting them changes nothing), then those closest to refilled, who get a fresh burst",
	"fast-conns":         "open connections that keep their read/write buffers between requests (about 16 KB each); connections past it hold about 4 KB while idle and cost one more read system call per request, so 10,000 idle keep-alive connections stay cheap",
	"wait-replicas":      "replicas (`WAIT`) a reserve (inventory), and a fair queue's entry (gateway), must reach before it is answered: `auto` = every replica the sale's primary has online (`INFO replication`, read at most once a second per primary, per shard on a cluster; a lagging replica holds the answer, none means no `WAIT`; the count is taken only from a primary that says `role:master`: an error reply to `INFO` (`BUSY`, max clients, `NOPERM`) or a node that says `role:slave` means waiting for the last count and at least one replica, never none, so `503` where there is none; a server that cannot tell at all, `INFO` renamed or miniredis, counts as none), `n` = exactly n, `0` = none, which trades the promise for latency (a failover to a replica that lacks a `201`'s order loses it). One `WAIT` on the connection of the script call covers every reserve of that call (group commit, `--reserve-batch`), at most " + shortDuration(inventory.DefaultWaitTimeout) + "; when `WAIT` falls short the buyer gets `503` (never `201`) and their retry finds the order (`already_purchased` with its id), or entering again the entry, once the replicas hold it",
	"reserve-batch":      "most reserves of one sale (or bucket) the inventory sends in one script call (`lua/reservemany.lua`): reserves arriving while two calls of their sale are out wait and go together in the next, each answered as if sent alone; `1` sends every reserve alone",
	"log-level":          "`debug`, `info`, `warn`, `error` (logs are `log/slog` text on stderr)",
	"sink-name":          "`serve` and `ordersink`: the sink's consumer name. It must survive a restart, so that the restarted sink re-reads its own pending entries at once (a name that changes leaves them to another sink's claim after `--sink-claim-idle`); give each sink its own (in Kubernetes: the pod name of a StatefulSet)",
	"sink-claim-idle":    "how long entries sit in another (dead) sink before this one claims them",
	"sink-wait-replicas": "replicas (`WAIT`) what the sink read must reach before it commits it: `auto` = every replica the stream's primary has online (`INFO replication`, per shard on a cluster; a lagging replica holds the commit, none means no `WAIT`; as for `--wait-replicas`, only a primary that says `role:master` gives the count, and a count it cannot give means at least one), `n` = exactly n, `0` = none; on a shortfall the batch is not committed and is tried again (orders wait in Redis, buyers are unaffected)",
	"sink-wait-timeout":  "bound of each such `WAIT`; the sink's Redis read timeout is this plus 500ms (at least 1s), so a primary gone silent (killed, frozen, cut off by a failover) holds the sink that long, not go-redis's 10 s margin for a blocking command",
}

// cmdOrder lists the commands in the order the tables name them.
var cmdOrder = []string{"serve", "gateway", "inventory", "ordersink", "controlplane", "demo", "crowd", "token", "version"}

// flagDefault is how the docs show f's default.
func flagDefault(f flagSpec) string {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	f.bind(fs, &Config{}, f.name, f.usage)
	fl := fs.Lookup(f.name)
	def := fl.DefValue
	if _, isBool := fl.Value.(interface{ IsBoolFlag() bool }); isBool {
		if def == "true" {
			return "on"
		}
		return "off"
	}
	if d, err := time.ParseDuration(def); err == nil && strings.ContainsAny(def, "hms") {
		def = shortDuration(d)
	}
	if def == "" {
		if n := flagDocs[f.name].none; n != "" {
			return n
		}
		return "none"
	}
	return "`" + def + "`"
}

// shortDuration writes d as docs do: 15m, not 15m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// flagCommands lists the commands that take f.
func flagCommands(f flagSpec) string {
	var out []string
	for _, c := range cmdOrder {
		if f.cmds.has(c) {
			out = append(out, c)
		}
	}
	return strings.Join(out, ", ")
}

// flagTables renders the two flag tables: the servers' flags, and those
// only the other commands take.
func flagTables() (servers, others string) {
	var a, b strings.Builder
	a.WriteString("| flag | default | commands | meaning |\n|---|---|---|---|\n")
	b.WriteString("| flag | commands | default | meaning |\n|---|---|---|---|\n")
	for _, f := range flagSpecs {
		meaning := flagDocs[f.name].meaning
		if meaning == "" {
			meaning = f.usage
		}
		if f.cmds&(cmdServe|cmdGateway|cmdInventory|cmdOrdersink|cmdControlplane) != 0 {
			fmt.Fprintf(&a, "| `--%s` | %s | %s | %s |\n", f.name, flagDefault(f), flagCommands(f), meaning)
		} else {
			fmt.Fprintf(&b, "| `--%s` | %s | %s | %s |\n", f.name, flagCommands(f), flagDefault(f), meaning)
		}
	}
	return a.String(), b.String()
}

// readmeFlagTable renders README.md's flag table: the servers' flags,
// their defaults and README's wording.
func readmeFlagTable() string {
	var b strings.Builder
	b.WriteString("| flag | default | meaning |\n|---|---|---|\n")
	for _, f := range flagSpecs {
		if f.cmds&(cmdServe|cmdGateway|cmdInventory|cmdOrdersink|cmdControlplane) == 0 {
			continue
		}
		meaning := readmeDocs[f.name]
		if meaning == "" {
			meaning = flagDocs[f.name].meaning
		}
		if meaning == "" {
			meaning = f.usage
		}
		fmt.Fprintf(&b, "| `--%s` | %s | %s |\n", f.name, flagDefault(f), meaning)
	}
	return b.String()
}

// recorder is a Registerer that notes each collector a tier registers.
type recorder struct {
	reg  *prometheus.Registry
	tier string
	got  *[]tierCollector
}

type tierCollector struct {
	tier string
	c    prometheus.Collector
}

func (r recorder) Register(c prometheus.Collector) error {
	if err := r.reg.Register(c); err != nil {
		return err
	}
	*r.got = append(*r.got, tierCollector{r.tier, c})
	return nil
}

func (r recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

func (r recorder) Unregister(c prometheus.Collector) bool { return r.reg.Unregister(c) }

var (
	descRE       = regexp.MustCompile(`^Desc\{fqName: ("(?:[^"\\]|\\.)*"), help: ("(?:[^"\\]|\\.)*"), unit: "[^"]*", constLabels: \{(.*)\}, variableLabels: \{([^}]*)\}\}$`)
	constLabelRE = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="(?:[^"\\]|\\.)*"`)
)

// metricTable builds every tier as cmd/flashgate wires it, each with a
// registry of its own, and renders what they register: name, labels,
// tier and help.
func metricTable(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	var got []tierCollector
	rec := func(tier string) recorder { return recorder{prometheus.NewRegistry(), tier, &got} }
	// Nothing here talks to Redis: the clients are never used.
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	db, err := sqldb.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "docs.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	rec("every").MustRegister(buildinfo.Collector())
	inv := inventory.New(rdb, inventory.Config{Logger: quiet, Metrics: rec("inventory")})
	if _, err := gateway.New(gateway.Config{Primary: rdb, Replica: rdb, Reserver: inv, Catalog: db,
		JWTSecret: []byte("x"), Logger: quiet, Metrics: rec("gateway"), ReserveLimit: 1}); err != nil {
		t.Fatal(err)
	}
	_ = ordersink.New(rdb, db, ordersink.Config{Logger: quiet, Metrics: rec("ordersink")})
	if _, err := controlplane.New(controlplane.Config{Redis: rdb, Store: db, Releaser: inv, AdminToken: "x",
		Logger: quiet, Metrics: rec("controlplane")}); err != nil {
		t.Fatal(err)
	}
	// Tiers in the order docs/api.md lists them.
	order := map[string]int{"every": 0, "gateway": 1, "inventory": 2, "ordersink": 3, "controlplane": 4}
	type row struct {
		tier, name, labels, help string
	}
	var rows []row
	seen := map[string]bool{}
	for _, tc := range got {
		ch := make(chan *prometheus.Desc, 16)
		go func() { tc.c.Describe(ch); close(ch) }()
		for d := range ch {
			m := descRE.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("cannot read %s", d)
			}
			name, _ := strconv.Unquote(m[1])
			help, _ := strconv.Unquote(m[2])
			if !strings.HasPrefix(name, "flashgate_") || seen[name] {
				continue
			}
			seen[name] = true
			var labels []string
			for _, c := range constLabelRE.FindAllStringSubmatch(m[3], -1) {
				labels = append(labels, c[1])
			}
			if m[4] != "" {
				labels = append(labels, strings.Split(m[4], ",")...)
			}
			rows = append(rows, row{tc.tier, name, strings.Join(labels, ","), help})
		}
	}
	// Stable: by tier, then in registration order.
	for i := 1; i < len(rows); i++ {
		for j := i; j > 0 && order[rows[j].tier] < order[rows[j-1].tier]; j-- {
			rows[j], rows[j-1] = rows[j-1], rows[j]
		}
	}
	var b strings.Builder
	b.WriteString("| metric | tier | what |\n|---|---|---|\n")
	for _, r := range rows {
		name := r.name
		if r.labels != "" {
			name += "{" + r.labels + "}"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", name, r.tier, strings.ReplaceAll(r.help, "|", "\\|"))
	}
	return b.String()
}

// generated replaces the text between the markers named name in doc with
// body, and reports whether the markers are there.
func generated(doc []byte, name, body string) ([]byte, bool) {
	begin := []byte("<!-- generated: " + name + " (go generate ./cmd/flashgate) -->\n")
	end := []byte("<!-- end of generated: " + name + " -->")
	i := bytes.Index(doc, begin)
	j := bytes.Index(doc, end)
	if i < 0 || j < i {
		return doc, false
	}
	out := append([]byte(nil), doc[:i+len(begin)]...)
	out = append(out, body...)
	return append(out, doc[j:]...), true
}

// TestDocTables: the flag tables of docs/api.md and README.md and the
// metric table of docs/api.md are what the code defines (flagSpecs, whose
// defaults are the tiers' Default* constants, and the collectors every tier
// registers). With -update-docs (go generate ./cmd/flashgate) it rewrites
// them instead.
func TestDocTables(t *testing.T) {
	servers, others := flagTables()
	type table struct{ name, body string }
	for _, d := range []struct {
		path   string
		tables []table
	}{
		{"../../docs/api.md", []table{{"server flags", servers}, {"other flags", others}, {"metrics", metricTable(t)}}},
		{"../../README.md", []table{{"flags", readmeFlagTable()}}},
	} {
		doc, err := os.ReadFile(d.path)
		if err != nil {
			t.Fatal(err)
		}
		want := doc
		for _, g := range d.tables {
			var ok bool
			if want, ok = generated(want, g.name, g.body); !ok {
				t.Fatalf("%s has no markers for the generated %s table", d.path, g.name)
			}
		}
		if bytes.Equal(doc, want) {
			continue
		}
		if *updateDocs {
			if err := os.WriteFile(d.path, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		t.Errorf("%s: the generated tables differ from the code: run go generate ./cmd/flashgate", d.path)
	}
}
