// Package inventory is the only writer of stock. Its Service runs the lua
// Reserve and Release scripts on the Redis primary, so that checking a sale,
// taking its units and enqueueing the order are one atomic step. NewHandler and
// Client carry the same two calls over HTTP when the gateway and the inventory
// tier run as separate processes.
package inventory

import (
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/replwait"
	"github.com/flashgate/flashgate/lua"
)

// MaxUserIDLen is the longest user id, in bytes, that Reserve accepts; a
// user id must also satisfy flashgate.ValidUserID.
const MaxUserIDLen = flashgate.MaxUserID

// The answers of Reserve that carry no data, made once so that turning
// away a crowd allocates no errors.
var (
	errBadSaleID  = fmt.Errorf("reserving: sale id: %w", flashgate.ErrNotFound)
	errBadUserID  = fmt.Errorf("reserving: %w", &flashgate.FieldError{Field: "user_id", Reason: "must be 1-128 bytes of UTF-8 without control characters"})
	errBadQty     = fmt.Errorf("reserving: %w", &flashgate.FieldError{Field: "quantity", Reason: "must be at least 1"})
	errNoSale     = fmt.Errorf("reserving: %w", flashgate.ErrNotFound)
	errNotStarted = fmt.Errorf("reserving: %w", flashgate.ErrNotStarted)
	errClosed     = fmt.Errorf("reserving: %w", flashgate.ErrClosed)
	errPaused     = fmt.Errorf("reserving: %w", flashgate.ErrPaused)
	errSoldOut    = fmt.Errorf("reserving: %w", flashgate.ErrSoldOut)
	errUnadmitted = fmt.Errorf("reserving: %w", flashgate.ErrNotAdmitted)
	errQtyPerUser = fmt.Errorf("reserving: %w", &flashgate.FieldError{Field: "quantity", Reason: "outside 1..per_user"})
	errBadVariant = fmt.Errorf("reserving: %w", &flashgate.FieldError{Field: "variant", Reason: "not a variant of this sale"})
	errBadOrderID = fmt.Errorf("reserving: %w", &flashgate.FieldError{Field: "order_id", Reason: "not a valid order id"})
	errBadBucket  = fmt.Errorf("releasing: %w", &flashgate.FieldError{Field: "bucket", Reason: "not a bucket of the sale"})
)

// Config configures a Service. The zero value is a valid configuration.
type Config struct {
	// Clock stamps each order entry. Nil means flashgate.SystemClock.
	Clock flashgate.Clock
	// Logger receives debug and warning lines. Nil: discarded.
	Logger *slog.Logger
	// NewOrderID mints the id of each order; it must be safe for concurrent
	// use and return ids that satisfy flashgate.ValidOrderID. Nil means a
	// monotonic ULID taken from Clock.
	NewOrderID func() string
	// WaitReplicas is how many replicas must hold a reservation before
	// Reserve answers it with an order id: WaitAuto (the zero value) waits
	// for those the sale's primary reports online (INFO replication, read
	// at most once a second per primary; on a cluster, the primary of the
	// sale's slot) and sends no WAIT when it has none (a count read only
	// from a primary that says role:master: one it cannot give, an error
	// reply or role:slave, waits for at least one replica; see
	// replwait.Parse); a count n waits for
	// exactly n; WaitOff never waits, trading the promise for latency (a
	// failover may lose an order answered just before it). The WAIT goes on
	// the connection of the script call, right after it, and covers every
	// reserve of that call (one batch: group commit). When WAIT falls short
	// within WaitTimeout, Reserve answers ErrUnavailable instead: the
	// reservation stands in Redis, and the buyer's retry finds it as
	// ErrAlreadyPurchased with its order id, once the replicas hold it.
	WaitReplicas int
	// WaitTimeout bounds the WAIT; keep the Redis client's read timeout at
	// WaitTimeout plus replwait.Margin (500ms) or more: the WAIT's reply
	// is awaited that long (on a client with ContextTimeoutEnabled no
	// longer than WaitTimeout plus the margin). Zero means
	// DefaultWaitTimeout.
	WaitTimeout time.Duration
	// Metrics, when set, receives flashgate_reserve_total{outcome} and
	// flashgate_redis_call_seconds{op}. Nil: no metrics.
	Metrics prometheus.Registerer
	// NoAutoPipeline turns off go-redis's automatic pipelining of concurrent
	// reserves sent one script each (MaxReserveBatch 1, and a bucketed
	// sale's spill). By default, when primary is a *redis.Client or a
	// *redis.ClusterClient (which groups each batch by slot), such reserves
	// that send no WAIT and run at the same time share one pipelined round
	// trip (each still one atomic script); the pipeliner belongs to the
	// client and closes with it. A reserve that waits for replicas never
	// uses it: it would send WAIT on another connection than the write's.
	// Nor does a batched reserve (MaxReserveBatch above 1): its lane has
	// grouped the reserves already, and its call goes on a pooled
	// connection from the caller's goroutine.
	NoAutoPipeline bool
	// MaxReserveBatch is the most reserves of one sale (or bucket) that one
	// script call carries (lua.ReserveMany): reserves arriving while
	// ReserveCallsInFlight calls of their sale are out wait and go together
	// in the next. 1 sends every reserve alone. Zero means
	// DefaultMaxReserveBatch.
	MaxReserveBatch int
	// ReserveCallsInFlight is how many reserve script calls of one sale (or
	// bucket) may be out at once. Zero means DefaultReserveCallsInFlight.
	ReserveCallsInFlight int
}

// The defaults of Config's fields, the one source of them: withDefaults
// fills them in, and cmd/flashgate's flags default to them.
const (
	DefaultWaitTimeout          = 500 * time.Millisecond
	DefaultMaxReserveBatch      = 128
	DefaultReserveCallsInFlight = 2
)

// withDefaults returns c with each zero field (a zero or negative
// duration or size) set to its default.
func (c Config) withDefaults() Config {
	if c.Clock == nil {
		c.Clock = flashgate.SystemClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.NewOrderID == nil {
		c.NewOrderID = ulidMinter(c.Clock)
	}
	if c.WaitTimeout <= 0 {
		c.WaitTimeout = DefaultWaitTimeout
	}
	if c.MaxReserveBatch <= 0 {
		c.MaxReserveBatch = DefaultMaxReserveBatch
	}
	if c.ReserveCallsInFlight <= 0 {
		c.ReserveCallsInFlight = DefaultReserveCallsInFlight
	}
	return c
}

// Service reserves and releases stock on the Redis primary. It is safe for
// concurrent use.
type Service struct {
	rdb          redis.UniversalClient
	scripter     redis.Scripter // runs lua.Reserve: rdb, or its auto-pipeliner
	clock        flashgate.Clock
	log          *slog.Logger
	newID        func() string
	waitReplicas int             // Config.WaitReplicas
	waitTimeout  time.Duration   // Config.WaitTimeout, at least 1ms
	single       *replwait.Count // the replicas of rdb when it is a *redis.Client
	replicas     replwait.Counts // the replicas of each primary of a cluster
	m            *metrics        // nil without Config.Metrics

	layoutMu sync.RWMutex
	layouts  map[string]lua.Layout // sale → its fixed bucket layout

	batchMax      int // Config.MaxReserveBatch; 1: no batching
	batchInFlight int // Config.ReserveCallsInFlight

	batchMu sync.Mutex
	lanes   map[string]*lane // tag → its batches; guarded by batchMu
	closed  bool             // Close was called; guarded by batchMu
	// batches counts the goroutines that send a batch that waited behind
	// another (runBatch), which Close waits for.
	batches sync.WaitGroup
}

// New returns a Service that writes to primary, which must be the Redis
// primary (never a replica).
func New(primary redis.UniversalClient, cfg Config) *Service {
	cfg = cfg.withDefaults()
	s := &Service{
		rdb:           primary,
		clock:         cfg.Clock,
		log:           cfg.Logger,
		newID:         cfg.NewOrderID,
		waitReplicas:  cfg.WaitReplicas,
		single:        &replwait.Count{},
		batchMax:      cfg.MaxReserveBatch,
		batchInFlight: cfg.ReserveCallsInFlight,
	}
	s.scripter = primary
	if c, ok := primary.(autoPipeliner); ok && !cfg.NoAutoPipeline && cfg.WaitReplicas <= 0 {
		if ap, err := c.AutoPipelineWithOptions(pipelineOptions()); err == nil {
			s.scripter = ap
		} else {
			s.log.Warn("automatic pipelining unavailable; reserving one call at a time", "err", err)
		}
	}
	s.lanes = make(map[string]*lane)
	s.waitTimeout = max(cfg.WaitTimeout, time.Millisecond) // WAIT 0 would block forever
	if cfg.Metrics != nil {
		s.m = newMetrics(cfg.Metrics, s.log)
	}
	return s
}

// autoPipeliner is a client with go-redis's automatic pipelining:
// *redis.Client and *redis.ClusterClient.
type autoPipeliner interface {
	AutoPipelineWithOptions(*redis.AutoPipelineOptions) (*redis.AutoPipeliner, error)
}

// pipelineOptions lets up to 4 batches of reserves travel at once instead of
// go-redis's default of one: with one, a batch waits for the whole previous
// round trip, so on a busy machine (where each hop through redis-server waits
// for a CPU) purchases queue behind the round trip with both processes mostly
// idle. Unordered gives up only the order between batches; every reserve is
// one atomic script whose caller waits for its answer, so nothing a caller
// sends depends on a command still in flight.
func pipelineOptions() *redis.AutoPipelineOptions {
	o := redis.DefaultBlockingAutoPipelineOptions()
	o.MaxConcurrentBatches = 4
	o.Unordered = true
	return o
}

// ulidMinter returns a concurrency-safe minter of monotonic ULIDs: ids minted
// in the same millisecond still sort in minting order.
func ulidMinter(clock flashgate.Clock) func() string {
	var mu sync.Mutex
	entropy := ulid.Monotonic(rand.Reader, 0)
	return func() string {
		mu.Lock()
		defer mu.Unlock()
		id, err := ulid.New(ulid.Timestamp(clock.Now()), entropy)
		if err != nil {
			// The monotonic counter overflowed within one millisecond (or
			// the clock is out of ULID range): start a fresh random run.
			entropy = ulid.Monotonic(rand.Reader, 0)
			id = ulid.MustNew(ulid.Now(), entropy)
		}
		return id.String()
	}
}
