package gateway

import (
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/gateway/limits"
	"github.com/flashgate/flashgate/gateway/queueedge"
)

// Config configures a Server. The zero value works once the required fields
// (Primary, Reserver, Catalog, JWTSecret) are set.
type Config struct {
	// Primary is the Redis primary: the batched access/rejected counters are
	// written there, and sale state is read from it when the replica fails.
	// Required.
	Primary redis.UniversalClient
	// Replica serves every sale-state read while it is in sync with its
	// primary (INFO: master_link_status:up, no sync in progress, not
	// loading), checked before reads go back to it and every ReplicaCheck
	// while they use it. Nil means Primary. While it is down or stale the
	// gateway reads from the primary and tries it again every
	// ReplicaCheck, and each try costs a failed dial: give its client few
	// dial retries (go-redis's default of 5 turns a refused connection
	// into a stall of over a second per try).
	Replica redis.UniversalClient
	// ReplicaCheck is how often the replica's replication health is
	// checked while reads use it, and how soon a failed or stale replica
	// is tried again. Zero means DefaultReplicaCheck.
	ReplicaCheck time.Duration
	// WaitReplicas is how many replicas a fair queue's entry must reach
	// (Redis WAIT) before it is answered: WaitAuto (zero, the default)
	// waits for those the sale's primary has online (none: no WAIT; read
	// only from a primary that says role:master, else at least one),
	// WaitOff never waits (a failover may lose an entry answered 201), n
	// waits for exactly n. A shortfall answers 503 unavailable and the
	// entry stands: entering again answers it once the replicas hold it.
	WaitReplicas int
	// WaitTimeout bounds that WAIT; keep it below RedisTimeout. Zero means
	// DefaultWaitTimeout.
	WaitTimeout time.Duration
	// Reserver takes units for admitted purchases. Required.
	Reserver Reserver
	// Catalog gives the names, prices and start times pages show. Required.
	Catalog Catalog
	// Orders serves the order routes. Nil: those routes answer
	// 503 unavailable.
	Orders Orders
	// Draws holds the cards of draw entries (the entry's pay route, and
	// the release of a withdrawn entry's hold). Nil: entries stay pending
	// and POST /api/sales/{id}/entry/pay answers 503 unavailable.
	Draws Draws
	// JWTSecret is the HS256 secret of buyer tokens. Required.
	JWTSecret []byte
	// QueueSecret keys the fair queue's tickets and proof-of-work
	// challenges (package queueedge); every gateway of a deployment needs the same.
	// Empty means DeriveQueueSecret(JWTSecret).
	QueueSecret []byte
	// Logger receives errors and notable events. Nil means slog.Default().
	Logger *slog.Logger
	// Clock tells the time for tokens and rate limits. Nil means
	// flashgate.SystemClock.
	Clock flashgate.Clock
	// Metrics registers the gateway's Prometheus metrics. Nil: no
	// metrics.
	Metrics prometheus.Registerer

	// StateRefresh is how often the cached state of each sale is re-read
	// from the replica. Zero means DefaultStateRefresh.
	StateRefresh time.Duration
	// FlushInterval is how often locally counted admissions are added to
	// the primary (the admission cap of every gateway reads them).
	// Zero means DefaultFlushInterval.
	FlushInterval time.Duration
	// RejectedFlushInterval is how often rejections are added to the
	// primary when no admission goes with them: they are only reported, so
	// a sold-out flood costs a round trip every RejectedFlushInterval
	// rather than every FlushInterval. Zero means
	// DefaultRejectedFlushInterval.
	RejectedFlushInterval time.Duration
	// CatalogRefresh is how often each sale's catalog entry is re-read (a
	// changed name, price or start time re-renders its page). Zero means
	// DefaultCatalogRefresh.
	CatalogRefresh time.Duration
	// CacheWindow is the max-age of item pages. Zero means
	// DefaultCacheWindow.
	CacheWindow time.Duration
	// SaleIdle is how long a sale nobody asks about stays cached. Unknown
	// sale ids are dropped after a tenth of it. Zero means DefaultSaleIdle.
	SaleIdle time.Duration
	// RedisTimeout bounds each background read, flush and readiness ping.
	// Zero means DefaultRedisTimeout.
	RedisTimeout time.Duration
	// ShareEvery makes SaleRate and SaleBurst the whole deployment's: every
	// ShareEvery this gateway announces itself in Redis and takes 1/n of
	// them, n being the live gateways (see share.go). Zero: no
	// sharing, this gateway alone lets SaleRate through.
	ShareEvery time.Duration

	// UserRate is each user's purchase attempts per second reaching
	// admission. Zero means DefaultUserRate; negative: no per-user limit.
	UserRate float64
	// UserBurst is each user's burst of attempts. Zero means
	// DefaultUserBurst.
	UserBurst int
	// SaleRate is each sale's attempts per second that this gateway lets
	// through to admission. Zero means DefaultSaleRate; negative: no limit
	// (the command line's 0 maps to a negative value here).
	SaleRate float64
	// SaleBurst is each sale's burst. Zero means SaleRate rounded up, at
	// least 1.
	SaleBurst int
	// ReserveLimit is the ceiling of the adaptive limit on reserves this
	// gateway has in flight at once (gateway/limits.Adaptive): the limit
	// grows while reserves answer near their baseline latency and shrinks
	// when they take over ReserveTolerance times it; a purchase over it is
	// answered 503 unavailable at once, with a Retry-After of 1–3 s, before
	// any Reserve. Zero or negative: no adaptive limit, the default
	// (DefaultReserveLimit; docs/internals.md, "Adaptive admission", has
	// the measurements behind it).
	ReserveLimit int
	// ReserveTolerance is how many times its baseline the reserves' mean
	// latency may reach before the adaptive limit shrinks. Zero means
	// DefaultReserveTolerance.
	ReserveTolerance float64
	// OrderRate is each user's requests per second to the order routes
	// (GET, pay and cancel of /api/orders/{id}), a limit of its own apart
	// from purchases. Zero means DefaultOrderRate; negative: no limit.
	OrderRate float64
	// OrderBurst is each user's burst of order-route requests. Zero means
	// DefaultOrderBurst.
	OrderBurst int
	// OrderTimeout bounds the work of one order-route request (the
	// database and Redis behind Orders); past it the answer is 503
	// unavailable. It must stay above the 2 s a payment of an order not
	// yet stored waits for the order sink. Zero means DefaultOrderTimeout.
	OrderTimeout time.Duration
	// MaxUsers bounds the per-user rate limiters held at once (16 bytes of
	// state each, at most 16 MB for the default, allocated as they fill);
	// past it, users whose bucket is full again are forgotten first, then
	// those closest to full. Zero means DefaultMaxUsers.
	MaxUsers int
	// MaxSales bounds the sales cached at once. Zero means DefaultMaxSales.
	MaxSales int
	// MaxPages bounds the rendered item pages held in the LRU. Zero means
	// DefaultMaxPages.
	MaxPages int

	// Webhooks takes POST /webhooks/stripe; nil answers a POST there 404.
	// (Provider events run to a few KB: give MaxBodySize room, as
	// cmd/flashgate does with --payments stripe.)
	Webhooks Webhooks
	// StripePublishableKey, when set (pk_…), gives the item page a payment
	// form: it loads StripeJS, mounts Stripe's Payment Element with the
	// order's client secret (the pay route's answer), confirms the payment
	// there and follows the order until it is paid; its answers carry a
	// Content-Security-Policy (pagepay.go). Empty: the page only starts
	// the payment, as before. The key is published in every page: New
	// refuses anything but a publishable key.
	StripePublishableKey string
	// StripeJS is the address of the Stripe.js the item page loads with
	// StripePublishableKey (tests point it at a stand-in). Empty means
	// DefaultStripeJS.
	StripeJS string
	// MaxBodySize is the largest request body accepted. Zero means
	// DefaultMaxBodySize.
	MaxBodySize int
	// ReadTimeout is the server's read timeout. Zero means
	// DefaultReadTimeout.
	ReadTimeout time.Duration
	// WriteTimeout is the server's write timeout. Zero means
	// DefaultWriteTimeout.
	WriteTimeout time.Duration
	// IdleTimeout is the keep-alive idle timeout. Zero means
	// DefaultIdleTimeout.
	IdleTimeout time.Duration
	// Concurrency is fasthttp's limit of connections served at once
	// (each of the two servers, see FastConns). Zero means fasthttp's
	// default (256 × 1024).
	Concurrency int
	// FastConns is how many open connections keep their read and write
	// buffers between requests (about 16 KB each); connections past it
	// hold none while idle (about 4 KB each, for one more read system call
	// per request), so a crowd of idle keep-alive connections costs
	// little memory. Zero means DefaultFastConns; negative: every
	// connection keeps its buffers.
	FastConns int
	// MaxRequestHeaderSize bounds the request head (fasthttp's
	// ReadBufferSize). Zero means DefaultMaxRequestHeaderSize.
	MaxRequestHeaderSize int
	// ShutdownDelay is how long Shutdown keeps serving with /readyz failing,
	// so load balancers stop sending traffic first. Zero means
	// DefaultShutdownDelay; negative: no delay.
	ShutdownDelay time.Duration
	// ReadyCache is how long a /readyz result is reused. Zero means
	// DefaultReadyCache.
	ReadyCache time.Duration
}

// Values of Config.WaitReplicas besides a count.
const (
	// WaitAuto waits for the replicas the sale's primary has online (per
	// shard on a cluster); a primary without any is not waited on.
	WaitAuto = queueedge.WaitAuto
	// WaitOff never waits for replicas.
	WaitOff = queueedge.WaitOff
)

// The defaults of Config's fields, the one source of them: withDefaults
// fills them in, and cmd/flashgate's flags default to them.
const (
	DefaultReplicaCheck          = time.Second
	DefaultWaitTimeout           = 500 * time.Millisecond
	DefaultStateRefresh          = 20 * time.Millisecond
	DefaultFlushInterval         = 5 * time.Millisecond
	DefaultRejectedFlushInterval = 250 * time.Millisecond
	DefaultCatalogRefresh        = time.Second
	DefaultCacheWindow           = time.Second
	DefaultSaleIdle              = 30 * time.Second
	DefaultRedisTimeout          = 2 * time.Second
	DefaultUserRate              = 2.0
	DefaultUserBurst             = 5
	DefaultSaleRate              = 50000.0
	DefaultReserveLimit          = 0 // off
	DefaultReserveTolerance      = limits.DefaultAdaptiveTolerance
	DefaultOrderRate             = 5.0
	DefaultOrderBurst            = 10
	DefaultOrderTimeout          = 5 * time.Second
	DefaultMaxUsers              = 1_000_000
	DefaultMaxSales              = 10_000
	DefaultMaxPages              = 10_000
	DefaultMaxBodySize           = 4 << 10
	DefaultReadTimeout           = 5 * time.Second
	DefaultWriteTimeout          = 5 * time.Second
	DefaultIdleTimeout           = 60 * time.Second
	DefaultFastConns             = 256
	DefaultMaxRequestHeaderSize  = 8 << 10
	DefaultShutdownDelay         = time.Second
	DefaultReadyCache            = time.Second
)

// fill checks the required fields and fills in the defaults.
func (c *Config) fill() error {
	switch {
	case c.Primary == nil:
		return fmt.Errorf("gateway: Primary redis client is required: %w", flashgate.ErrBadRequest)
	case c.Reserver == nil:
		return fmt.Errorf("gateway: Reserver is required: %w", flashgate.ErrBadRequest)
	case c.Catalog == nil:
		return fmt.Errorf("gateway: Catalog is required: %w", flashgate.ErrBadRequest)
	case len(c.JWTSecret) == 0:
		return fmt.Errorf("gateway: JWTSecret is required: %w", flashgate.ErrBadRequest)
	}
	*c = c.withDefaults()
	return nil
}

// withDefaults returns c with each zero field (a zero or negative
// duration or size, where negative has no meaning of its own) set to its
// default.
func (c Config) withDefaults() Config {
	if c.Replica == nil {
		c.Replica = c.Primary
	}
	if len(c.QueueSecret) == 0 {
		c.QueueSecret = DeriveQueueSecret(c.JWTSecret)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = flashgate.SystemClock{}
	}
	if c.ReplicaCheck <= 0 {
		c.ReplicaCheck = DefaultReplicaCheck
	}
	if c.WaitTimeout <= 0 {
		c.WaitTimeout = DefaultWaitTimeout
	}
	if c.StateRefresh <= 0 {
		c.StateRefresh = DefaultStateRefresh
	}
	if c.FlushInterval <= 0 {
		c.FlushInterval = DefaultFlushInterval
	}
	if c.RejectedFlushInterval <= 0 {
		c.RejectedFlushInterval = DefaultRejectedFlushInterval
	}
	if c.CatalogRefresh <= 0 {
		c.CatalogRefresh = DefaultCatalogRefresh
	}
	if c.CacheWindow <= 0 {
		c.CacheWindow = DefaultCacheWindow
	}
	if c.SaleIdle <= 0 {
		c.SaleIdle = DefaultSaleIdle
	}
	if c.RedisTimeout <= 0 {
		c.RedisTimeout = DefaultRedisTimeout
	}
	if c.UserRate == 0 {
		c.UserRate = DefaultUserRate
	}
	if c.UserBurst <= 0 {
		c.UserBurst = DefaultUserBurst
	}
	if c.SaleRate == 0 {
		c.SaleRate = DefaultSaleRate
	}
	if c.SaleBurst <= 0 && c.SaleRate > 0 {
		c.SaleBurst = int(math.Ceil(c.SaleRate))
	}
	if c.SaleBurst < 1 {
		c.SaleBurst = 1
	}
	if c.ReserveTolerance <= 0 {
		c.ReserveTolerance = DefaultReserveTolerance
	}
	if c.OrderRate == 0 {
		c.OrderRate = DefaultOrderRate
	}
	if c.OrderBurst <= 0 {
		c.OrderBurst = DefaultOrderBurst
	}
	if c.OrderTimeout <= 0 {
		c.OrderTimeout = DefaultOrderTimeout
	}
	if c.MaxUsers <= 0 {
		c.MaxUsers = DefaultMaxUsers
	}
	if c.MaxSales <= 0 {
		c.MaxSales = DefaultMaxSales
	}
	if c.MaxPages <= 0 {
		c.MaxPages = DefaultMaxPages
	}
	if c.MaxBodySize <= 0 {
		c.MaxBodySize = DefaultMaxBodySize
	}
	if c.ReadTimeout <= 0 {
		c.ReadTimeout = DefaultReadTimeout
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = DefaultWriteTimeout
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.FastConns == 0 {
		c.FastConns = DefaultFastConns
	}
	if c.MaxRequestHeaderSize <= 0 {
		c.MaxRequestHeaderSize = DefaultMaxRequestHeaderSize
	}
	if c.ShutdownDelay == 0 {
		c.ShutdownDelay = DefaultShutdownDelay
	}
	if c.ReadyCache <= 0 {
		c.ReadyCache = DefaultReadyCache
	}
	return c
}
