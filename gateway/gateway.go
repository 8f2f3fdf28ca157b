// Package gateway is flashgate's public edge: a fasthttp server that serves
// cacheable item pages, answers the buy button's status polls from a cached
// copy of each sale's Redis state, and judges purchases (auth, local
// admission, rate limits) before forwarding the few survivors to a Reserver.
//
// The gateway reads sale state from the Redis replica (falling back to the
// primary), refreshes it every StateRefresh in the background, and answers
// "not started", "closed" and "sold out" without any Redis round trip.
// Admitted requests are counted locally and added to the sale's "access"
// field on the primary in batches.
package gateway

import (
	"context"
	"fmt"
	"hash/maphash"
	"log/slog"
	"math"
	"net"
	"strconv"
	"sync"
	"sync/atomic"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/valyala/fasthttp"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/gateway/bearer"
	"github.com/flashgate/flashgate/gateway/conns"
	"github.com/flashgate/flashgate/gateway/limits"
	"github.com/flashgate/flashgate/gateway/queueedge"
)

// Reserver takes units of a sale for a user on the Redis primary; the
// inventory tier satisfies it, in process or over HTTP. Its errors are the
// root sentinels (ErrNotFound, ErrNotStarted, ErrClosed, ErrSoldOut,
// *flashgate.PurchasedError, ErrBadRequest, ErrUnavailable).
type Reserver interface {
	// Reserve takes qty units for userID; variant names the variant of a
	// sale sold in several ("" for a sale of one stock).
	Reserve(ctx context.Context, saleID, userID, variant string, qty int64) (orderID string, err error)
}

// Catalog gives sale metadata (name, price, total, starts_at, ends_at,
// state); *sqldb.DB satisfies it.
type Catalog interface {
	Sale(ctx context.Context, id string) (flashgate.Sale, error) // flashgate.ErrNotFound if unknown
}

// Orders serves the buyer's order routes; *controlplane.Service satisfies it.
type Orders interface {
	Order(ctx context.Context, orderID, userID string) (flashgate.Order, error) // ErrNotFound if not the user's
	Pay(ctx context.Context, orderID, userID string) (flashgate.Order, error)   // ErrNotPayable
	Cancel(ctx context.Context, orderID, userID string) (flashgate.Order, error)
}

// Draws holds the cards of draw entries; *controlplane.Service satisfies
// it. HoldEntry gives a pending entry its hold (the answer carries the
// intent and its client secret), or enters it with simulated payments;
// ReleaseEntry releases a withdrawn entry's hold. No entry is
// flashgate.ErrNotFound, one that cannot hold flashgate.ErrNotPayable.
type Draws interface {
	HoldEntry(ctx context.Context, saleID, userID string) (flashgate.DrawEntry, error)
	ReleaseEntry(ctx context.Context, saleID, userID string) (flashgate.DrawEntry, error)
}

// Webhooks takes the payment provider's webhook deliveries (the raw body
// and its signature header); *controlplane.Service satisfies it. A bad
// signature is flashgate.ErrBadSignature.
type Webhooks interface {
	Webhook(ctx context.Context, payload []byte, signature string) error
}

// Server is the gateway. Create it with New; Start runs its background
// refresher and flusher (Serve calls Start itself), and Shutdown or Close
// stops them.
type Server struct {
	cfg   Config
	log   *slog.Logger
	clock flashgate.Clock
	srv   *fasthttp.Server
	// lean serves the connections past FastConns (nil when FastConns is
	// negative); lns are the listeners Serve splits between the two.
	lean    *fasthttp.Server
	lnMu    sync.Mutex
	lns     []net.Listener
	handler fasthttp.RequestHandler
	m       *metrics

	// base is the context handed to Reserver and Orders: request contexts
	// are never passed on, since they must not outlive the handler.
	base   context.Context
	cancel context.CancelFunc

	// mu guards sales and retired; the hot path takes it for reading only.
	mu      sync.RWMutex
	sales   map[string]*sale
	retired []*sale
	// hot caches sales by a hash of their id, one per slot, so the hot
	// path finds a busy sale without taking mu (whose reader count is a
	// cache line every core's requests wrote). A slot only ever holds a
	// sale in sales: it is filled under mu's read lock, and cleared when
	// the sale leaves, under its write lock.
	hot [hotSales]atomic.Pointer[sale]

	users *limits.Users // nil without a per-user limit
	// reserves is the adaptive limit on reserves in flight (nil without
	// one, Config.ReserveLimit negative); see purchase.go.
	reserves *limits.Adaptive
	// orderUsers limits each user's order-route requests (nil without a
	// limit); orderRetryAfter is their Retry-After.
	orderUsers      *limits.Users
	orderRetryAfter []byte
	// orderLate counts order requests answered 503 past OrderTimeout.
	orderLate unavailableLog

	pages *lru.Cache[string, *page]
	seed  maphash.Seed
	jwt   *bearer.Verifier
	qkeys *queueedge.Keys // the fair queue's tickets and challenges

	// unavail counts purchases answered 503 for the Reserver's failure.
	unavail unavailableLog

	assets   map[string]*page
	notFound []byte
	// unavailablePage and internalPage are the item page's 503 and 500.
	unavailablePage, internalPage []byte

	pageCacheControl []byte
	userRetryAfter   []byte
	// pay is the item page's payment form, if any (pagepay.go).
	pay payPage

	share shareState // this gateway's part of SaleRate (share.go)

	entrant *queueedge.Entrant // queue entries and their WAIT

	replicaFailed atomic.Bool
	// replicaRetry is when (unix nanoseconds) a failed replica is tried
	// again; until then reads go straight to the primary.
	replicaRetry atomic.Int64
	// replicaChecked is when (unix nanoseconds) the replica last passed a
	// health check; replicaCheck lets one reader at a time run one.
	replicaChecked atomic.Int64
	replicaCheck   sync.Mutex
	// rejectedDue is when (unix nanoseconds) the flusher next adds
	// rejections that come without admissions (RejectedFlushInterval).
	rejectedDue atomic.Int64
	draining    atomic.Bool
	ready       readiness

	// coarse is the clock the connections' timeouts (and the cached
	// answers' token checks) read; timeouts are those Serve's
	// connections enforce (package conns).
	coarse   *conns.Clock
	timeouts *conns.Timeouts
	// sysClock is whether clock is the system clock, which secondsNow may
	// read from coarse.
	sysClock bool

	startOnce sync.Once
	closeOnce sync.Once
	wg        sync.WaitGroup
}

// New checks cfg, fills in its defaults and builds a Server. It starts no
// goroutines; see Start.
func New(cfg Config) (*Server, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	s := &Server{
		cfg:   cfg,
		log:   cfg.Logger,
		clock: cfg.Clock,
		sales: make(map[string]*sale),
		seed:  maphash.MakeSeed(),
	}
	s.base, s.cancel = context.WithCancel(context.Background())
	var err error
	if cfg.UserRate > 0 {
		s.users = limits.New(cfg.UserRate, cfg.UserBurst, cfg.MaxUsers)
	}
	s.jwt = bearer.NewVerifier(cfg.JWTSecret)
	s.qkeys = queueedge.NewKeys(cfg.QueueSecret)
	s.entrant = &queueedge.Entrant{Primary: cfg.Primary, WaitReplicas: cfg.WaitReplicas, WaitTimeout: cfg.WaitTimeout, Log: cfg.Logger}
	if s.pages, err = lru.New[string, *page](cfg.MaxPages); err != nil {
		return nil, fmt.Errorf("gateway: page cache: %w", err)
	}
	if err := s.loadAssets(); err != nil {
		return nil, err
	}
	if s.pay, err = newPayPage(cfg.StripePublishableKey, cfg.StripeJS); err != nil {
		return nil, err
	}
	maxAge := int(math.Ceil(cfg.CacheWindow.Seconds()))
	s.pageCacheControl = []byte("public, max-age=" + strconv.Itoa(maxAge))
	retry := 1
	if cfg.UserRate > 0 {
		retry = int(math.Ceil(1 / cfg.UserRate))
	}
	s.userRetryAfter = []byte(strconv.Itoa(max(retry, 1)))
	s.orderRetryAfter = []byte("1")
	if cfg.OrderRate > 0 {
		s.orderUsers = limits.New(cfg.OrderRate, cfg.OrderBurst, cfg.MaxUsers)
		s.orderRetryAfter = []byte(strconv.Itoa(max(int(math.Ceil(1/cfg.OrderRate)), 1)))
	}
	if cfg.ReserveLimit > 0 {
		s.reserves = limits.NewAdaptive(limits.AdaptiveConfig{Min: min(limits.DefaultAdaptiveMin, cfg.ReserveLimit), Max: cfg.ReserveLimit, Tolerance: cfg.ReserveTolerance})
	}
	if s.m, err = newMetrics(cfg.Metrics); err != nil {
		return nil, err
	}
	if err := registerReserveGauges(cfg.Metrics, s.reserves); err != nil {
		return nil, err
	}
	_, s.sysClock = cfg.Clock.(flashgate.SystemClock)
	s.coarse = conns.NewClock(conns.Tick(cfg.ReadTimeout, cfg.IdleTimeout, cfg.WriteTimeout))
	s.timeouts = conns.NewTimeouts(cfg.ReadTimeout, cfg.IdleTimeout, cfg.WriteTimeout, s.coarse)
	s.handler = s.serve
	s.srv = s.newHTTPServer(false)
	if cfg.FastConns > 0 {
		s.lean = s.newHTTPServer(true)
	}
	return s, nil
}

// secondsNow returns the time, in Unix nanoseconds, for judging what counts
// in whole seconds (a token's or a ticket's exp and nbf) in the answers the
// cache gives: the coarse clock's while it runs, behind by less than its
// tick (at most 250 ms), so that such an answer reads no clock; the
// Config's Clock otherwise (and always when it is not the system clock).
func (s *Server) secondsNow() int64 {
	if s.sysClock && s.coarse.Running() {
		return s.coarse.Nanos()
	}
	return s.clock.Now().UnixNano()
}
