package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane"
	"github.com/flashgate/flashgate/gateway"
	"github.com/flashgate/flashgate/inventory"
	"github.com/flashgate/flashgate/ordersink"
	"github.com/flashgate/flashgate/payments"
)

// Config is every setting of every command. Its zero value is not used
// directly: parseConfig fills the defaults in through the flags (flagSpecs),
// whose defaults for a tier's setting are that tier's Default* constants;
// the flag tables of README.md and docs/api.md are generated from them.
type Config struct {
	Listen        string        // public gateway listener; ":8080"
	AdminListen   string        // control plane listener; "127.0.0.1:8081"
	Redis         string        // primary URL; required except for demo
	RedisReplicas string        // comma-separated replica URLs; default the primary
	DB            string        // "sqlite://flashgate.db"
	JWTSecret     string        // HS256 secret for buyer tokens; required
	QueueSecret   string        // fair queue tickets and challenges; "" = derived from JWTSecret
	AdminToken    string        // bearer token of the admin API; required
	QueueSeedSec  string        // key of fair-queue seeds, control plane only; "" = derived from AdminToken
	Inventory     string        // comma-separated inventory tiers; "" = in-process
	InventoryTok  string        // bearer token between gateways and inventory tiers; "" = none
	UserRate      float64       // per-user attempts per second; gateway.DefaultUserRate
	UserBurst     int           // per-user burst; gateway.DefaultUserBurst
	SaleRate      float64       // per-sale attempts per second, whole deployment; gateway.DefaultSaleRate
	ReserveLimit  int           // gateway: ceiling of the adaptive limit on reserves in flight, 0 = none; gateway.DefaultReserveLimit
	ReserveTol    float64       // gateway: latency over baseline the adaptive limit tolerates; gateway.DefaultReserveTolerance
	PaymentWindow time.Duration // unpaid orders expire after this; controlplane.DefaultPaymentWindow
	StateRefresh  time.Duration // gateway cache window for sale state; gateway.DefaultStateRefresh
	UserLimiters  int           // gateway: per-user rate limiters held at once; gateway.DefaultMaxUsers
	FastConns     int           // gateway: connections that keep their buffers when idle; gateway.DefaultFastConns
	ResyncEvery   time.Duration // control plane re-sync period; controlplane.DefaultResyncEvery
	WaitReplicas  int           // replicas a reserve or a queue entry waits for (WAIT), as a waitCount: ordersink.WaitAuto, WaitOff or n (inventoryWait, gatewayWait map it); auto
	ReserveBatch  int           // reserves of one sale per script call; inventory.DefaultMaxReserveBatch
	LogLevel      string        // debug, info, warn, error; "info"
	Pprof         bool          // serve /debug/pprof/ on the admin listener; false
	MetricsListen string        // gateway/inventory: /metrics and health listener; "" = none

	// payments
	Payments        string        // simulated, stripe (demo: stripe-local); "simulated"
	StripeKey       string        // Stripe secret API key; required with stripe
	StripeSecret    string        // Stripe webhook signing secret; required with stripe
	StripeAPIBase   string        // Stripe API base URL; "" = Stripe's
	StripePubKey    string        // Stripe publishable key: the item page takes payments itself; "" = it does not
	StripeJSURL     string        // the Stripe.js the item page loads; gateway.DefaultStripeJS
	PaymentCurrency string        // currency of payments; controlplane.DefaultCurrency
	PaymentGrace    time.Duration // wait past the window before asking the provider; controlplane.DefaultPaymentGrace
	DrawRate        float64       // a draw's calls to the provider a second, captures and releases together; payments.DefaultOverall
	DrawCaptureRate float64       // a draw's captures a second, and apart from them its releases; payments.DefaultPerEndpoint

	// order sink
	SinkName         string        // consumer name; "" = <hostname>-<admin-listen port>
	SinkWaitReplicas int           // replicas a batch must reach (WAIT) before its commit, as ordersink.Config.WaitReplicas; ordersink.WaitAuto
	SinkWaitTimeout  time.Duration // bound of each such WAIT; ordersink.DefaultWaitTimeout
	SinkClaimIdle    time.Duration // idle time before another sink's entries are claimed; ordersink.DefaultClaimIdle

	// demo and crowd
	Units       int64         // demo: units on sale; 100
	Users       int           // demo/crowd: distinct buyers; 100000
	Concurrency int           // demo/crowd: requests in flight; 256
	ArrivalRate float64       // crowd: requests per second, 0 = as fast as answered
	Sale        string        // crowd: sale id; "demo"
	Target      string        // crowd: gateway URL; "http://127.0.0.1:8080"
	Admin       string        // crowd: admin URL for the cross-check; ""
	Serve       bool          // demo: keep serving after the report
	Fair        bool          // demo: a fair drop (people and scalpers through a fair queue) instead of first come
	Draw        bool          // demo: a draw (entries with card holds at the stand-in provider, winners charged) instead of first come
	Scalpers    int           // demo --fair: scalpers; 20
	Accounts    int           // demo --fair: accounts per scalper; 15
	Progress    bool          // crowd/demo: draw a progress bar; true
	Timeout     time.Duration // crowd: per-request timeout; 5s
	Quantity    int64         // crowd: units per purchase; 1
	Variants    string        // crowd: the sale's variant ids, comma-separated, the most wanted first; "" = a sale without variants
	VariantSkew float64       // crowd: Zipf exponent of the buyers' choice of variant (0 = uniform); 1.1
	VariantSeed int64         // crowd: seed of the buyers' choice of variant; 1
	SourceAddrs string        // crowd: local addresses to dial from, e.g. 127.0.0.2-127.0.0.20; ""

	// set names the flags given on the command line or by environment,
	// so that a command can tell a default from a choice.
	set map[string]bool
	// embedded is set by demo, whose store is the embedded one: it has no
	// replication (controlplane.Config.Standalone).
	embedded bool

	// token
	User       string        // token: the buyer's id
	UserPrefix string        // token: with Count > 1, users are UserPrefix + 0…Count-1
	Count      int           // token: how many tokens to print; 1
	TTL        time.Duration // token: lifetime; 24h
}

var flagSpecs = []flagSpec{
	{"listen", "public listener (gateway; inventory's HTTP face)", cmdServe | cmdGateway | cmdInventory | cmdDemo, strFlag(func(c *Config) *string { return &c.Listen }, ":8080")},
	{"admin-listen", "control plane listener: admin API, dashboard, /metrics", cpLike | cmdOrdersink, strFlag(func(c *Config) *string { return &c.AdminListen }, "127.0.0.1:8081")},
	{"redis", "Redis: redis://host:port/db, redis+cluster://host:port,… or redis+sentinel://host:port,…/master (required)", servers, strFlag(func(c *Config) *string { return &c.Redis }, "")},
	{"redis-replicas", "comma-separated Redis replica URLs for gateway reads (default: the primary)", cmdServe | cmdGateway, strFlag(func(c *Config) *string { return &c.RedisReplicas }, "")},
	{"db", "database: postgres://… or sqlite://PATH", cmdServe | cmdGateway | cmdOrdersink | cmdControlplane, strFlag(func(c *Config) *string { return &c.DB }, "sqlite://flashgate.db")},
	{"jwt-secret", "HS256 secret for buyer tokens (required)", cmdServe | cmdGateway | cmdCrowd | cmdToken | cmdDemo, strFlag(func(c *Config) *string { return &c.JWTSecret }, "")},
	{"queue-secret", "key of fair-queue tickets and proof-of-work challenges, the same on every gateway (default: derived from --jwt-secret)", gwLike, strFlag(func(c *Config) *string { return &c.QueueSecret }, "")},
	{"admin-token", "bearer token for the admin API (required)", cpLike | cmdCrowd, strFlag(func(c *Config) *string { return &c.AdminToken }, "")},
	{"queue-seed-secret", "key the control plane derives fair-queue seeds from, never given to gateways (default: derived from --admin-token)", cpLike, strFlag(func(c *Config) *string { return &c.QueueSeedSec }, "")},
	{"inventory", "comma-separated http://host:port of inventory tiers (default: in-process)", cmdServe | cmdGateway, strFlag(func(c *Config) *string { return &c.Inventory }, "")},
	{"inventory-token", "bearer token the inventory tier requires and gateways send (split mode; default none)", cmdServe | cmdGateway | cmdInventory, strFlag(func(c *Config) *string { return &c.InventoryTok }, "")},
	{"user-rate", "per-user purchase attempts per second reaching admission", gwLike, floatFlag(func(c *Config) *float64 { return &c.UserRate }, gateway.DefaultUserRate)},
	{"user-burst", "per-user burst of purchase attempts", gwLike, intFlag(func(c *Config) *int { return &c.UserBurst }, gateway.DefaultUserBurst)},
	{"sale-rate", "per-sale attempts per second the whole deployment lets through, shared by the live gateways (0 = no limit)", gwLike, floatFlag(func(c *Config) *float64 { return &c.SaleRate }, gateway.DefaultSaleRate)},
	{"reserve-limit", "ceiling of the adaptive limit on reserves a gateway has in flight at once, which follows their latency; purchases over it are answered 503 with Retry-After 1-3 s (0 = no adaptive limit)", gwLike, intFlag(func(c *Config) *int { return &c.ReserveLimit }, gateway.DefaultReserveLimit)},
	{"reserve-tolerance", "how many times their baseline latency reserves may take before the adaptive limit (--reserve-limit) shrinks", gwLike, floatFlag(func(c *Config) *float64 { return &c.ReserveTol }, gateway.DefaultReserveTolerance)},
	{"payment-window", "unpaid orders expire after this", cmdServe | cmdGateway | cmdControlplane | cmdDemo, durFlag(func(c *Config) *time.Duration { return &c.PaymentWindow }, controlplane.DefaultPaymentWindow)},
	{"payments", "payment provider: simulated (pay marks an order paid) or stripe (demo also: stripe-local, a local stand-in of Stripe's API served in process)", payCmds, strFlag(func(c *Config) *string { return &c.Payments }, "simulated")},
	{"stripe-key", "Stripe secret API key (required with --payments stripe)", payCmds, strFlag(func(c *Config) *string { return &c.StripeKey }, "")},
	{"stripe-webhook-secret", "Stripe webhook signing secret, whsec_… (required with --payments stripe)", payCmds, strFlag(func(c *Config) *string { return &c.StripeSecret }, "")},
	{"stripe-api-base", "Stripe API base URL (default: Stripe's; tests and demos point it at a local stand-in)", payCmds, strFlag(func(c *Config) *string { return &c.StripeAPIBase }, "")},
	{"stripe-publishable-key", "Stripe publishable key, pk_…: the item page loads Stripe.js and takes the payment itself (needs --payments stripe; default: the page only starts the payment)", gwLike, strFlag(func(c *Config) *string { return &c.StripePubKey }, "")},
	{"stripe-js-url", "the Stripe.js the item page loads with --stripe-publishable-key; its origin is the only one the page's Content-Security-Policy lets scripts come from besides the gateway (tests point it at a stand-in)", gwLike, strFlag(func(c *Config) *string { return &c.StripeJSURL }, gateway.DefaultStripeJS)},
	{"payment-currency", "currency of payments (ISO 4217, lower case)", payCmds, strFlag(func(c *Config) *string { return &c.PaymentCurrency }, controlplane.DefaultCurrency)},
	{"payment-grace", "how long past the payment window an unsettled payment waits for its webhook before the provider is asked", payCmds, durFlag(func(c *Config) *time.Duration { return &c.PaymentGrace }, controlplane.DefaultPaymentGrace)},
	{"draw-rate", "calls a second a draw's close makes to the payment provider at most, captures and releases together (Stripe: 100 in live mode, 25 in test mode); 429 and Retry-After are honoured above it", cpLike, floatFlag(func(c *Config) *float64 { return &c.DrawRate }, payments.DefaultOverall)},
	{"draw-capture-rate", "captures a second a draw's close makes at most, and apart from them releases (Stripe: 25 per endpoint)", cpLike, floatFlag(func(c *Config) *float64 { return &c.DrawCaptureRate }, payments.DefaultPerEndpoint)},
	{"state-refresh", "how often a gateway re-reads sale state from the replicas", gwLike, durFlag(func(c *Config) *time.Duration { return &c.StateRefresh }, gateway.DefaultStateRefresh)},
	{"user-limiters", "per-user rate limiters a gateway holds at once (16 bytes each; past it, users whose bucket is full again are forgotten first)", gwLike, intFlag(func(c *Config) *int { return &c.UserLimiters }, gateway.DefaultMaxUsers)},
	{"fast-conns", "open connections that keep their read/write buffers when idle (about 16 KB each); the rest hold about 4 KB idle for one more read per request", gwLike, intFlag(func(c *Config) *int { return &c.FastConns }, gateway.DefaultFastConns)},
	{"resync-every", "how often the control plane re-syncs stock from the database", cpLike, durFlag(func(c *Config) *time.Duration { return &c.ResyncEvery }, controlplane.DefaultResyncEvery)},
	{"wait-replicas", "replicas (Redis WAIT) a reserve, and a fair queue's entry, must reach before it is answered 201, else 503 and the retry finds the order (the entry): auto = those the sale's primary has online (none: no WAIT; counted only by a primary that says role:master: an error reply to INFO or a node that says role:slave waits for at least one), n = exactly n, 0 = none (a failover may lose a 201)", cmdServe | cmdInventory | cmdGateway, waitFlag(func(c *Config) *int { return &c.WaitReplicas })},
	{"reserve-batch", "most reserves of one sale (or bucket) the inventory sends in one script call; reserves arriving while the sale's calls are out wait for the next (1 = one call each)", cmdServe | cmdInventory, intFlag(func(c *Config) *int { return &c.ReserveBatch }, inventory.DefaultMaxReserveBatch)},
	{"sink-name", "the order sink's consumer name, stable across restarts (default <hostname>-<admin-listen port>; in Kubernetes the pod name)", cmdServe | cmdOrdersink, strFlag(func(c *Config) *string { return &c.SinkName }, "")},
	{"sink-wait-replicas", "replicas (Redis WAIT) what the order sink read must reach before it commits it: auto = those the stream's primary has online (counted only by a primary that says role:master; a count it cannot give waits for at least one), n = exactly n, 0 = none", cmdServe | cmdOrdersink, waitFlag(func(c *Config) *int { return &c.SinkWaitReplicas })},
	{"sink-wait-timeout", "bound of each WAIT of the order sink; a shortfall delays the batch; the sink's Redis read timeout is it plus 500ms (at least 1s), the longest a primary gone silent holds the sink", cmdServe | cmdOrdersink, durFlag(func(c *Config) *time.Duration { return &c.SinkWaitTimeout }, ordersink.DefaultWaitTimeout)},
	{"sink-claim-idle", "how long another (dead) sink's entries sit before this sink claims them", cmdServe | cmdOrdersink, durFlag(func(c *Config) *time.Duration { return &c.SinkClaimIdle }, ordersink.DefaultClaimIdle)},
	{"metrics-listen", "listener for /metrics, /healthz and /readyz of this tier (default: none)", cmdGateway | cmdInventory, strFlag(func(c *Config) *string { return &c.MetricsListen }, "")},
	{"pprof", "serve /debug/pprof/ on the admin listener (internal only)", cmdServe | cmdControlplane | cmdDemo, boolFlag(func(c *Config) *bool { return &c.Pprof }, false)},
	{"log-level", "debug, info, warn or error", servers | cmdDemo, strFlag(func(c *Config) *string { return &c.LogLevel }, "info")},
	{"units", "units on sale", cmdDemo, int64Flag(func(c *Config) *int64 { return &c.Units }, 100)},
	{"users", "distinct buyers", cmdDemo | cmdCrowd, intFlag(func(c *Config) *int { return &c.Users }, 100000)},
	{"concurrency", "requests in flight", cmdDemo | cmdCrowd, intFlag(func(c *Config) *int { return &c.Concurrency }, 256)},
	{"rate", "arrival rate in requests per second (0 = as fast as answers come)", cmdCrowd, floatFlag(func(c *Config) *float64 { return &c.ArrivalRate }, 0)},
	{"sale", "sale id", cmdCrowd, strFlag(func(c *Config) *string { return &c.Sale }, "demo")},
	{"target", "gateway base URL", cmdCrowd, strFlag(func(c *Config) *string { return &c.Target }, "http://127.0.0.1:8080")},
	{"admin", "control plane base URL for the cross-check (e.g. http://127.0.0.1:8081)", cmdCrowd, strFlag(func(c *Config) *string { return &c.Admin }, "")},
	{"quantity", "units per purchase", cmdCrowd, int64Flag(func(c *Config) *int64 { return &c.Quantity }, 1)},
	{"variants", "the sale's variant ids, comma-separated, the most wanted first: each buyer picks one, skewed by --variant-skew; demo: the sale is sold in these, --units shared evenly (default: a sale without variants)", cmdCrowd | cmdDemo, strFlag(func(c *Config) *string { return &c.Variants }, "")},
	{"variant-skew", "Zipf exponent of the buyers' choice among --variants: buyer weight of the k-th variant 1/k^skew (0 = uniform)", cmdCrowd | cmdDemo, floatFlag(func(c *Config) *float64 { return &c.VariantSkew }, 1.1)},
	{"variant-seed", "seed of the buyers' choice among --variants (the same seed, the same choices)", cmdCrowd | cmdDemo, int64Flag(func(c *Config) *int64 { return &c.VariantSeed }, 1)},
	{"source-addrs", "local addresses the crowd dials from, in turn: IPs and ranges, e.g. 127.0.0.2-127.0.0.20 (default: the system's choice)", cmdCrowd, strFlag(func(c *Config) *string { return &c.SourceAddrs }, "")},
	{"timeout", "per-request timeout", cmdCrowd, durFlag(func(c *Config) *time.Duration { return &c.Timeout }, 5*time.Second)},
	{"progress", "draw a progress bar", cmdDemo | cmdCrowd, boolFlag(func(c *Config) *bool { return &c.Progress }, true)},
	{"serve", "keep serving after the report (open the pages in a browser)", cmdDemo, boolFlag(func(c *Config) *bool { return &c.Serve }, false)},
	{"draw", "a draw instead: entries (--users, default 20000) over three sizes for --units (default 300), each with a card hold at the stand-in provider, drawn by the leader at the close; reports winners per size, the seed check and the invariants (units = winners captured, no loser charged, every hold released)", cmdDemo, boolFlag(func(c *Config) *bool { return &c.Draw }, false)},
	{"fair", "a fair drop instead: people (--users, default 3000) entering at random through a 5s pre-queue, scalpers entering the moment it opens and polling fast, everyone paying a proof of work; reports units by group, the seed check and the invariants", cmdDemo, boolFlag(func(c *Config) *bool { return &c.Fair }, false)},
	{"scalpers", "with --fair: scalpers", cmdDemo, intFlag(func(c *Config) *int { return &c.Scalpers }, 20)},
	{"accounts", "with --fair: accounts per scalper", cmdDemo, intFlag(func(c *Config) *int { return &c.Accounts }, 15)},
	{"user", "the buyer's user id (the token's sub)", cmdToken, strFlag(func(c *Config) *string { return &c.User }, "")},
	{"count", "print this many tokens, one a line, for users <user-prefix>0…<count-1>", cmdToken, intFlag(func(c *Config) *int { return &c.Count }, 1)},
	{"user-prefix", "with --count: user ids are this prefix and a number", cmdToken, strFlag(func(c *Config) *string { return &c.UserPrefix }, "user-")},
	{"ttl", "token lifetime", cmdToken, durFlag(func(c *Config) *time.Duration { return &c.TTL }, 24*time.Hour)},
}

// EnvName is the environment variable a flag reads: FLASHGATE_ and the flag
// name in upper case with _ for -.
func EnvName(flagName string) string {
	return "FLASHGATE_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parseConfig parses a command's flags; a flag not given on the command line
// takes its FLASHGATE_* variable when set. It returns (nil, nil) after -h.
func parseConfig(cmd string, args []string, stderr io.Writer, getenv func(string) string) (*Config, error) {
	c := &Config{}
	fs := flag.NewFlagSet("flashgate "+cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	for _, f := range flagSpecs {
		if f.cmds.has(cmd) {
			f.bind(fs, c, f.name, f.usage+" (env "+EnvName(f.name)+")")
		}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stderr)
			fmt.Fprintf(stderr, "usage: flashgate %s [flags]\n", cmd)
			fs.PrintDefaults()
			return nil, nil
		}
		return nil, &usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return nil, &usageError{fmt.Sprintf("%s: unexpected argument %q", cmd, fs.Arg(0))}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || envErr != nil {
			return
		}
		if v := getenv(EnvName(f.Name)); v != "" {
			if err := fs.Set(f.Name, v); err != nil {
				envErr = &usageError{fmt.Sprintf("%s=%q: %v", EnvName(f.Name), v, err)}
			}
			set[f.Name] = true
		}
	})
	if envErr != nil {
		return nil, envErr
	}
	c.set = set
	if err := c.validate(cmd); err != nil {
		return nil, &usageError{err.Error()}
	}
	return c, nil
}

// validate checks what a command needs before anything starts.
func (c *Config) validate(cmd string) error {
	need := func(name, v string) error {
		if v == "" {
			return fmt.Errorf("--%s (or %s) is required for %s", name, EnvName(name), cmd)
		}
		return nil
	}
	if servers.has(cmd) {
		if err := need("redis", c.Redis); err != nil {
			return err
		}
		if err := checkRedisURL("--redis", c.Redis); err != nil {
			return err
		}
		for _, r := range splitList(c.RedisReplicas) {
			if err := checkRedisURL("--redis-replicas", r); err != nil {
				return err
			}
		}
	}
	if (cmdServe | cmdGateway | cmdCrowd | cmdToken).has(cmd) {
		if err := need("jwt-secret", c.JWTSecret); err != nil {
			return err
		}
	}
	if (cmdServe | cmdControlplane).has(cmd) {
		if err := need("admin-token", c.AdminToken); err != nil {
			return err
		}
	}
	if (cmdServe | cmdGateway | cmdOrdersink | cmdControlplane).has(cmd) {
		if err := checkDBURL(c.DB); err != nil {
			return err
		}
	}
	for _, inv := range splitList(c.Inventory) {
		if err := checkHTTPURL("--inventory", inv); err != nil {
			return err
		}
	}
	if (cmdServe | cmdGateway | cmdInventory | cmdDemo).has(cmd) {
		if err := checkListen("--listen", c.Listen); err != nil {
			return err
		}
	}
	if c.MetricsListen != "" {
		if err := checkListen("--metrics-listen", c.MetricsListen); err != nil {
			return err
		}
	}
	if (cmdServe | cmdControlplane | cmdDemo | cmdOrdersink).has(cmd) {
		if err := checkListen("--admin-listen", c.AdminListen); err != nil {
			return err
		}
	}
	switch cmd {
	case "token":
		if c.Count < 1 {
			return fmt.Errorf("--count must be at least 1")
		}
		if c.User == "" && c.Count == 1 {
			return fmt.Errorf("--user is required for token")
		}
		if c.Count == 1 && !flashgate.ValidUserID(c.User) {
			return fmt.Errorf("--user: not a user id: want %s", userIDRule)
		}
		if c.Count > 1 && !flashgate.ValidUserID(c.UserPrefix+strconv.Itoa(c.Count-1)) {
			return fmt.Errorf("--user-prefix: with --count %d it makes ids that are not user ids: want %s", c.Count, userIDRule)
		}
		if c.TTL <= 0 {
			return fmt.Errorf("--ttl must be positive")
		}
	case "crowd":
		if err := checkHTTPURL("--target", c.Target); err != nil {
			return err
		}
		if c.Admin != "" {
			if err := checkHTTPURL("--admin", c.Admin); err != nil {
				return err
			}
		}
		if _, err := parseSourceAddrs(c.SourceAddrs); err != nil {
			return err
		}
	}
	if (cmdDemo | cmdCrowd).has(cmd) {
		if c.Users < 1 || c.Concurrency < 1 {
			return fmt.Errorf("--users and --concurrency must be at least 1")
		}
	}
	if cmd == "demo" && c.Units < 1 {
		return fmt.Errorf("--units must be at least 1")
	}
	if c.UserRate < 0 || c.SaleRate < 0 || c.UserBurst < 0 || c.ArrivalRate < 0 {
		return fmt.Errorf("rates and bursts must not be negative")
	}
	if gwLike.has(cmd) && (c.ReserveLimit < 0 || c.ReserveTol < 1) {
		return fmt.Errorf("--reserve-limit must not be negative and --reserve-tolerance must be at least 1")
	}
	if (cmdServe | cmdInventory).has(cmd) && (c.ReserveBatch < 1 || c.ReserveBatch > 1000) {
		// A call of 1,000 reserves holds redis-server for a few milliseconds.
		return fmt.Errorf("--reserve-batch %d: want 1..1000", c.ReserveBatch)
	}
	if len(c.SinkName) > 128 || strings.ContainsFunc(c.SinkName, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return fmt.Errorf("--sink-name %q: want at most 128 characters, no spaces or control characters", c.SinkName)
	}
	if gwLike.has(cmd) && c.UserRate > 0 && c.UserBurst < 1 {
		// The gateway would take a zero burst for its default.
		return fmt.Errorf("--user-burst must be at least 1 while --user-rate is above 0")
	}
	if gwLike.has(cmd) && (c.UserLimiters < 1 || c.FastConns < 1) {
		return fmt.Errorf("--user-limiters and --fast-conns must be at least 1")
	}
	// A zero or negative period would silently become the tier's default.
	for _, d := range []struct {
		name string
		v    time.Duration
		cmds cmdSet
	}{
		{"payment-window", c.PaymentWindow, cmdServe | cmdGateway | cmdControlplane | cmdDemo},
		{"payment-grace", c.PaymentGrace, payCmds},
		{"state-refresh", c.StateRefresh, gwLike},
		{"resync-every", c.ResyncEvery, cpLike},
		{"timeout", c.Timeout, cmdCrowd},
		{"sink-wait-timeout", c.SinkWaitTimeout, cmdServe | cmdOrdersink},
		{"sink-claim-idle", c.SinkClaimIdle, cmdServe | cmdOrdersink},
	} {
		if d.cmds.has(cmd) && d.v <= 0 {
			return fmt.Errorf("--%s must be positive", d.name)
		}
	}
	if cpLike.has(cmd) && (c.DrawRate <= 0 || c.DrawCaptureRate <= 0) {
		return fmt.Errorf("--draw-rate and --draw-capture-rate must be positive")
	}
	if payCmds.has(cmd) {
		if err := checkPayments(cmd, c); err != nil {
			return err
		}
	}
	if cmd == "crowd" && c.Quantity < 1 {
		return fmt.Errorf("--quantity must be at least 1")
	}
	if cmd == "crowd" || cmd == "demo" {
		if ids, err := parseVariantIDs(c.Variants); err != nil {
			return err
		} else if cmd == "demo" && int64(len(ids)) > c.Units {
			return fmt.Errorf("--variants: %d variants for %d units, want at most one per unit", len(ids), c.Units)
		}
		if c.VariantSkew < 0 || c.VariantSkew > 10 {
			return fmt.Errorf("--variant-skew %g: want 0..10", c.VariantSkew)
		}
	}
	switch c.LogLevel {
	case "", "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("--log-level %q: want debug, info, warn or error", c.LogLevel)
	}
	return nil
}
