// Package controlplane is flashgate's control tier: the leader's lifecycle
// loops (the lease, scheduled start and stop, expiry of unpaid orders,
// re-sync and restore of stock from the database, failover detection, the
// fair queues' ticks, archiving), the sale and order actions the admin API
// and the gateways call (create, start, stop, pay, cancel, refund, dead
// letters), and its metrics. Its HTTP side is controlplane/admin; the
// machinery of bucketed sales (ledger, rebalancing, recovery of a bucket
// after a failover, spill settlement) is controlplane/buckets.
//
// The database is the system of record; Redis holds the stock the inventory
// tier sells from. Only one control plane runs the loops at a time: the one
// holding the leader lock in Redis (lua.LeaderKey).
package controlplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/archive"
	"github.com/flashgate/flashgate/controlplane/buckets"
	"github.com/flashgate/flashgate/controlplane/deadletter"
	"github.com/flashgate/flashgate/controlplane/drawclose"
	"github.com/flashgate/flashgate/controlplane/drawhold"
	"github.com/flashgate/flashgate/controlplane/drawjournal"
	"github.com/flashgate/flashgate/controlplane/failover"
	"github.com/flashgate/flashgate/controlplane/opsmetrics"
	"github.com/flashgate/flashgate/controlplane/orders"
	"github.com/flashgate/flashgate/controlplane/queueleader"
	"github.com/flashgate/flashgate/controlplane/resync"
)

// Store is the system of record as the control plane uses it; *sqldb.DB
// satisfies it.
type Store interface {
	CreateSale(ctx context.Context, s flashgate.Sale) error
	Sale(ctx context.Context, id string) (flashgate.Sale, error)
	Sales(ctx context.Context) ([]flashgate.Sale, error)
	// LiveSales lists the sales not archived; ArchiveSale archives a
	// closed sale (reporting whether it did) and UnarchiveSale makes one
	// live again (controlplane/archive).
	LiveSales(ctx context.Context) ([]flashgate.Sale, error)
	ArchiveSale(ctx context.Context, id string) (bool, error)
	UnarchiveSale(ctx context.Context, id string) error
	// SetSaleState, ExpireDue and ReleasesDelivered are the writes of the
	// leader's loops: each carries a fencing token and changes nothing,
	// answering flashgate.ErrFenced, when a higher one wrote before it.
	SetSaleState(ctx context.Context, id string, st flashgate.SaleState, fence int64) error
	Order(ctx context.Context, id string) (flashgate.Order, error)
	Transition(ctx context.Context, id string, from []flashgate.OrderStatus, to flashgate.OrderStatus, now time.Time) (flashgate.Order, error)
	ExpireDue(ctx context.Context, createdBefore, now time.Time, limit int, fence int64) ([]flashgate.Order, error)
	// Figures and AllFigures read counters kept with the rows: O(1) per
	// sale, whatever its size. VariantFigures, the whole sale's and each
	// variant's figures from one snapshot, aggregates a variant sale's rows.
	Figures(ctx context.Context, saleID string) (flashgate.SaleFigures, error)
	VariantFigures(ctx context.Context, saleID string) (flashgate.SaleFigures, map[string]flashgate.SaleFigures, error)
	AllFigures(ctx context.Context) (flashgate.SaleFigures, error)
	// OrdersPage walks one status of a sale by order id, a page at a time
	// (only a rebuild of a sale Redis lost reads every row).
	OrdersPage(ctx context.Context, saleID string, st flashgate.OrderStatus, afterID string, limit int) ([]flashgate.Order, error)
	// PendingReleases and ReleasesDelivered are the releases a re-sync has not
	// yet delivered to Redis, and their acknowledgement.
	PendingReleases(ctx context.Context, saleID string, limit int) (queued []flashgate.Order, delivered int64, err error)
	ReleasesDelivered(ctx context.Context, saleID string, orderIDs []string, fence int64) (delivered int64, err error)
	// PendingRetakes are the orders whose late payment's retake is
	// recorded as pending (a rebuild holds their units).
	PendingRetakes(ctx context.Context, saleID string) ([]flashgate.Order, error)
	// HonouredRetakes are the orders whose late payment's retake an
	// honour step recorded, while they are still paid.
	HonouredRetakes(ctx context.Context, saleID string) ([]flashgate.Order, error)
	// Snapshot runs read with a context in which the reads of
	// PendingRetakes and of the figures (Figures, VariantFigures, and a
	// bucketed sale's) see one database snapshot.
	Snapshot(ctx context.Context, read func(ctx context.Context) error) error
	// OwedRetakes are a sale's orders whose honoured retake a refund
	// marked as owed back (flashgate.PaymentStep.OweRetake) and no give-back
	// has been recorded for yet; RetakeGivenBack records one.
	OwedRetakes(ctx context.Context, saleID string) ([]flashgate.Order, error)
	RetakeGivenBack(ctx context.Context, orderID string) error
	// The fair queues' journal (controlplane/queueleader).
	queueleader.Store
	// The draws' entries (controlplane/drawjournal) and their closes
	// (controlplane/drawclose).
	drawjournal.Store
	drawclose.Store
	// EachDrawEntry reads a draw's entries in one query, for the rebuild
	// of a draw sale Redis lost (controlplane/resync).
	EachDrawEntry(ctx context.Context, saleID string, fn func(flashgate.DrawEntry) error) error
	// DrawCloseBegun reports whether a draw's close recorded its read of
	// the rows, for the rebuild, which shuts such a sale's entry window
	// again (controlplane/resync).
	DrawCloseBegun(ctx context.Context, saleID string) (bool, error)
	// DrawEntry reads one of a draw's entries (flashgate.ErrNotFound when
	// the sale has none of that id), for the refund of a winner's order.
	DrawEntry(ctx context.Context, saleID, entryID string) (flashgate.DrawEntry, error)
	// RecordDrawHold stores an entry's card hold with its row before the
	// buyer can authorise it (controlplane/drawhold).
	RecordDrawHold(ctx context.Context, saleID, entryID, intent string) (bool, error)
	Ping(ctx context.Context) error
}

// Releaser gives the units of orders that left a live status back to their
// sale in Redis; PaymentProvider takes payments and PaymentStore keeps them
// (controlplane/orders).
type (
	Releaser        = orders.Releaser
	PaymentProvider = orders.PaymentProvider
	PaymentStore    = orders.PaymentStore
)

// Config configures a Service. Redis, Store, Releaser and AdminToken are
// required; every other zero value works.
type Config struct {
	// Redis is the primary. Required.
	Redis redis.UniversalClient
	// Store is the database. Required.
	Store Store
	// Releaser gives units back after cancel, expiry and refund. Required.
	Releaser Releaser
	// AdminToken is the bearer token of the admin API (controlplane/admin).
	// Required.
	AdminToken string
	// Clock tells the time of the sale schedule and of order transitions;
	// nil means flashgate.SystemClock.
	Clock flashgate.Clock
	// Logger receives lifecycle and error reports; nil means
	// slog.Default().
	Logger *slog.Logger
	// Standalone says the store has no replication by design (the demo's
	// embedded store): the failover watch, which cannot work there, says
	// so once at info instead of warning. False means a real deployment,
	// where a store that cannot tell its replication state is a warning.
	Standalone bool
	// PaymentWindow is how long an order may stay unpaid; zero means
	// DefaultPaymentWindow.
	PaymentWindow time.Duration
	// ResyncEvery is how often the leader re-syncs stock; zero means
	// DefaultResyncEvery.
	ResyncEvery time.Duration
	// TickEvery is the scheduler tick (start/stop at times, expiry, leader
	// lease renewal); zero means DefaultTickEvery.
	TickEvery time.Duration
	// LeaderTTL is the lifetime of the leader lease, renewed every tick;
	// zero means DefaultLeaderTTL.
	LeaderTTL time.Duration
	// PersistWait is how long Pay, Cancel and Refund wait for an order that
	// is still only reserved in Redis to reach the database before answering
	// not_payable; zero means DefaultPersistWait, negative: do not wait.
	PersistWait time.Duration
	// SpillClaimAge is how old a spill claim of a bucketed sale must be
	// before the leader settles it (SettleClaims): well above the time an
	// inventory takes from a claim to its finalisation, so that the
	// leader rarely does the work of a spill in flight (doing it is safe);
	// zero means DefaultSpillClaimAge.
	SpillClaimAge time.Duration
	// Metrics is where the control plane registers its collectors; nil
	// means a private registry.
	Metrics prometheus.Registerer
	// Gatherer is what /metrics serves; nil means Metrics when it is also
	// a Gatherer (as *prometheus.Registry is), else the private registry.
	Gatherer prometheus.Gatherer
	// NodeID names this process in the leader lock; empty means
	// hostname-pid.
	NodeID string
	// AuditLogger receives one line per admin action (admin/audit.go); nil means
	// Logger with the attribute log=audit.
	AuditLogger *slog.Logger
	// QueueBacklog holds a fair queue's admission while a sale's order
	// stream holds more entries than this; zero means DefaultQueueBacklog.
	QueueBacklog int64
	// QueueLatency holds a fair queue's admission while reading the sale
	// from Redis takes longer than this; zero means DefaultQueueLatency.
	QueueLatency time.Duration
	// QueueSeedSecret keys the seeds of fair queues: a queue's seed is
	// HMAC-SHA256(QueueSeedSecret, sale id and the queue's epoch), so only
	// the control plane can derive it, the same after a restart or a
	// rebuild, and it reaches Redis only at the start. Never give it to
	// gateways. Empty means DeriveQueueSeedSecret(AdminToken). Changing it
	// while a queue waits for its start stops that start (the seed would
	// no longer hash to the published commitment).
	QueueSeedSecret []byte
	// Payments is the payment provider (controlplane/orders); nil means simulated
	// payments: Pay marks an order paid on the buyer's word.
	Payments PaymentProvider
	// PaymentStore keeps payments and webhook events; required with
	// Payments.
	PaymentStore PaymentStore
	// Currency is the currency of payments (ISO 4217, lower case); ""
	// means DefaultCurrency.
	Currency string
	// PaymentGrace is how long past PaymentWindow the reconciliation waits
	// for a payment's webhook before asking the provider; zero means
	// DefaultPaymentGrace.
	PaymentGrace time.Duration
	// PaymentYield, when not nil, is called at the named points between two
	// steps of a payment's settlement (orders.Config.Yield), so that a test
	// can run another actor there. Nil (the default) in production.
	PaymentYield func(ctx context.Context, point string)
	// PaymentReconcileRate is how many calls a second the reconciliation
	// makes to the payment provider at most; zero means
	// orders.DefaultReconcileRate (10).
	// The draws' read of their card holds (controlplane/drawhold) makes
	// half as many; zero means drawhold.DefaultRate (5).
	PaymentReconcileRate float64
	// DrawReserver makes the orders of a draw's winners at its close
	// (inventory.Service.ReserveWinner); nil means the leader closes no
	// draw (it says so once per sale).
	DrawReserver DrawReserver
	// DrawCapturer captures and releases the draws' card holds
	// (payments.Pacer around payments.Stripe); nil means simulated
	// payments: captures succeed at once (drawclose.Instant).
	DrawCapturer DrawCapturer
	// DrawWorkers is how many captures, and apart from them releases, a
	// draw's close has in flight; zero means draw.DefaultWorkers.
	DrawWorkers int
}

// The defaults of Config's fields, the one source of them: withDefaults
// fills them in, and cmd/flashgate's flags default to them.
const (
	DefaultPaymentWindow = 15 * time.Minute
	DefaultResyncEvery   = time.Second
	DefaultTickEvery     = 200 * time.Millisecond
	DefaultLeaderTTL     = 5 * time.Second
	DefaultPersistWait   = 2 * time.Second
	DefaultSpillClaimAge = 5 * time.Second
	DefaultQueueBacklog  = 10_000
	DefaultQueueLatency  = 100 * time.Millisecond
	// DefaultPaymentGrace is how long past the payment window the
	// reconciliation waits for a webhook before asking the provider.
	DefaultPaymentGrace = 30 * time.Second
	// DefaultCurrency is the currency of payments when none is configured.
	DefaultCurrency = "usd"
)

// withDefaults returns c with each zero field (a zero or negative
// duration or size, where negative has no meaning of its own) set to its
// default. Metrics, Gatherer and AuditLogger are resolved by New.
func (c Config) withDefaults() Config {
	if c.Clock == nil {
		c.Clock = flashgate.SystemClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.PaymentWindow <= 0 {
		c.PaymentWindow = DefaultPaymentWindow
	}
	if c.ResyncEvery <= 0 {
		c.ResyncEvery = DefaultResyncEvery
	}
	if c.TickEvery <= 0 {
		c.TickEvery = DefaultTickEvery
	}
	if c.LeaderTTL <= 0 {
		c.LeaderTTL = DefaultLeaderTTL
	}
	if c.PersistWait == 0 {
		c.PersistWait = DefaultPersistWait
	}
	if c.SpillClaimAge <= 0 {
		c.SpillClaimAge = DefaultSpillClaimAge
	}
	if c.NodeID == "" {
		host, _ := os.Hostname()
		c.NodeID = host + "-" + strconv.Itoa(os.Getpid())
	}
	if c.QueueBacklog <= 0 {
		c.QueueBacklog = DefaultQueueBacklog
	}
	if c.QueueLatency <= 0 {
		c.QueueLatency = DefaultQueueLatency
	}
	if c.Currency == "" {
		c.Currency = DefaultCurrency
	}
	if c.PaymentGrace <= 0 {
		c.PaymentGrace = DefaultPaymentGrace
	}
	return c
}

// Service is the control plane. Its methods are safe for concurrent use.
type Service struct {
	rdb      redis.UniversalClient
	store    Store
	token    []byte
	clock    flashgate.Clock
	log      *slog.Logger
	gatherer prometheus.Gatherer
	metrics  *opsmetrics.Metrics
	// auditLogger is Config.AuditLogger, for the admin API.
	auditLogger *slog.Logger

	resyncEvery time.Duration
	tickEvery   time.Duration
	leaderTTL   time.Duration
	nodeID      string
	leaseToken  string
	// fence is the fencing token of this Service's lease (lua.TakeFence's
	// answer when it took the lease, or a newer one: see lead); 0 when it
	// holds none. The term's context carries it to every write.
	fence atomic.Int64

	// queues runs the fair queues (controlplane/queueleader).
	queues *queueleader.Leader
	// draws closes the draw sales (controlplane/drawclose); drawing and
	// drawn are the sales whose close runs now and those whose close
	// finished (guarded by mu); noReserver, the sales told of a close
	// that cannot run.
	draws      *drawclose.Closer
	canDraw    bool
	drawing    map[string]bool
	drawn      map[string]bool
	noReserver map[string]bool
	// drawFlush runs this process's flushes of the draws' journals one at
	// a time (the tick's, a close's and the holds', flushDraw): two at
	// once deadlocked on PostgreSQL.
	drawFlush flushGroup

	// buckets runs the machinery of bucketed sales (controlplane/buckets).
	buckets *buckets.Keeper
	// dead lists and replays dead letters (controlplane/deadletter).
	dead *deadletter.Service

	// sync re-syncs sales (controlplane/resync); its lock serialises the
	// re-syncs and the moves and rebuilds of buckets in this process.
	sync *resync.Syncer
	// failover is the failover watch (controlplane/failover).
	failover *failover.Watcher

	// archive archives the sales over (controlplane/archive).
	archive *archive.Archiver
	// orders runs the order actions and payments (controlplane/orders).
	orders *orders.Service
	// holds runs the card holds of draw entries (controlplane/drawhold).
	holds *drawhold.Holder

	// mu guards settled, leading, term, closed and the draws' maps.
	mu      sync.Mutex
	settled map[string]bool // closed sales whose settlement was reported
	leading bool
	term    *term // the current leadership term (leader.go), nil when none
	closed  bool  // Close was called: no Run and no term keeper starts

	// runs ends each Run's context, on Close (guarded by mu); wg counts
	// the goroutines this Service runs (each Run and each term's keeper),
	// which Close waits for (lifecycle.go).
	runs      []context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// New checks cfg, fills in the defaults and registers the metrics.
func New(cfg Config) (*Service, error) {
	switch {
	case cfg.Redis == nil:
		return nil, errors.New("controlplane: Config.Redis is required")
	case cfg.Store == nil:
		return nil, errors.New("controlplane: Config.Store is required")
	case cfg.Releaser == nil:
		return nil, errors.New("controlplane: Config.Releaser is required")
	case cfg.AdminToken == "":
		return nil, errors.New("controlplane: Config.AdminToken is required")
	case cfg.Payments != nil && cfg.PaymentStore == nil:
		return nil, errors.New("controlplane: Config.PaymentStore is required with Payments")
	}
	cfg = cfg.withDefaults()
	s := &Service{
		rdb:         cfg.Redis,
		store:       cfg.Store,
		token:       []byte(cfg.AdminToken),
		clock:       cfg.Clock,
		log:         cfg.Logger,
		resyncEvery: cfg.ResyncEvery,
		tickEvery:   cfg.TickEvery,
		leaderTTL:   cfg.LeaderTTL,
		nodeID:      cfg.NodeID,
		settled:     make(map[string]bool),
	}
	s.queues = newQueueLeader(s, cfg)
	s.draws, s.canDraw = newDrawCloser(s, cfg), cfg.DrawReserver != nil
	s.drawing, s.drawn, s.noReserver = map[string]bool{}, map[string]bool{}, map[string]bool{}
	s.auditLogger = cfg.AuditLogger
	s.buckets = buckets.New(buckets.Config{Redis: s.rdb, Store: s.store, Logger: s.log, Clock: s.clock, SpillClaimAge: cfg.SpillClaimAge})
	s.dead = deadletter.New(s.rdb, s.store, s.log)
	s.archive = archive.New(s.rdb, s.store, s.log)
	s.leaseToken = s.nodeID + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	reg := cfg.Metrics
	s.gatherer = cfg.Gatherer
	if reg == nil {
		r := prometheus.NewRegistry()
		reg = r
		if s.gatherer == nil {
			s.gatherer = r
		}
	}
	if s.gatherer == nil {
		if g, ok := reg.(prometheus.Gatherer); ok {
			s.gatherer = g
		} else {
			s.gatherer = prometheus.NewRegistry()
		}
	}
	m, err := opsmetrics.New(metricsSource{s}, reg, s.log)
	if err != nil {
		return nil, fmt.Errorf("controlplane: registering metrics: %w", err)
	}
	s.metrics = m
	s.sync = resync.New(s.rdb, s.store, s.buckets, s.log, m.Resyncs)
	s.failover = failover.New(s.rdb, s.log, s.buckets, s.sync, s.Resync)
	s.holds = newHolder(s, cfg)
	s.orders, err = orders.New(orders.Config{Redis: s.rdb, Store: s.store, Releaser: cfg.Releaser, Clock: s.clock,
		Logger: s.log, AuditLogger: cfg.AuditLogger, PaymentWindow: cfg.PaymentWindow, PersistWait: cfg.PersistWait,
		PaymentGrace: cfg.PaymentGrace, Currency: cfg.Currency, Payments: cfg.Payments, PaymentStore: cfg.PaymentStore,
		Metrics: reg, Expired: m.Expired, Refunds: m.Refunds, Yield: cfg.PaymentYield,
		ReconcileRate: cfg.PaymentReconcileRate, HoldEvents: s.holds.Event, DrawHold: s.drawHold})
	if err != nil {
		return nil, fmt.Errorf("controlplane: registering metrics: %w", err)
	}
	if cfg.Standalone {
		s.failover.Standalone()
	}
	return s, nil
}
