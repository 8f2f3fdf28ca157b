// Package ordersink drains the sales' order streams into the database. It
// reads with a consumer group, acknowledges entries (and removes them from
// the stream) only after their rows are committed, re-reads its own pending
// entries on restart and claims those a dead consumer left behind, so
// delivery is at-least-once and, because inserts are idempotent, the effect
// is exactly-once. Entries the database refuses move to the sale's
// dead-letter stream (lua.DeadKey).
//
// Each sale's stream is read on its own (never several in one command, which
// Redis Cluster refuses when they hash to different slots): one pipeline of
// non-blocking XREADGROUPs per poll, one round trip per Redis node whatever
// the number of sales, each stream read up to Batch so that no sale starves
// another; a stream quiet for a while is polled about once a second. What
// was read is made to reach the replicas its primary has (WAIT, see
// Config.WaitReplicas) before it is committed, so a failover cannot lose a
// reservation the database already holds.
package ordersink

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/replwait"
)

// Store is where orders go; *sqldb.DB satisfies it.
type Store interface {
	// InsertOrders stores the orders in one transaction, skipping any that
	// are stored already, and returns how many rows it inserted. An error
	// wrapping flashgate.ErrBadRequest is a refusal of some order's values
	// (the batch is stored again one order at a time, refused orders
	// dead-lettered); one wrapping flashgate.ErrUnavailable is the store
	// out of reach (the batch is tried whole again, soon).
	InsertOrders(ctx context.Context, orders []flashgate.Order) (inserted int, err error)
}

// Config tunes a Drainer. The zero value works.
type Config struct {
	// Consumer is this drainer's name in the consumer group; empty means
	// DefaultConsumer(""), the host name, which survives a restart. A drainer that restarts under the
	// same name re-reads its own pending entries at once; under another name
	// they are claimed by a live drainer after ClaimIdle. Two drainers that
	// share a name are safe (inserts are idempotent) but may store the same
	// entries twice over; give each its own.
	Consumer string
	// Batch is the most entries read from one stream, and orders inserted,
	// at once; zero means DefaultBatch. A poll reads what the stream holds
	// up to Batch, so batches grow only while the stream is busy, where
	// each commit's cost is shared by more orders.
	Batch int
	// Block is how long Run pauses after a poll that found no new entries:
	// the longest an idle drainer takes to see a new one; zero means
	// DefaultBlock.
	Block time.Duration
	// Linger is how long Run lets pass between the starts of two polls
	// when the first read entries but filled no batch: the stream is busy,
	// and waiting for more shares each commit's cost (a transaction, a
	// commit, a round trip per command) among more orders; a poll that
	// fills a batch is followed by the next at once. It adds at most Linger
	// to the time an order takes to reach the database (buyers are answered
	// at reserve time, before). Zero means DefaultLinger; a negative value
	// turns it off.
	Linger time.Duration
	// ClaimIdle is how long an entry must have sat unacknowledged in another
	// consumer before it is claimed (XAUTOCLAIM); zero means
	// DefaultClaimIdle.
	ClaimIdle time.Duration
	// RefreshSales is how often Run re-reads the set of sales to learn new
	// sale streams; zero means DefaultRefreshSales.
	RefreshSales time.Duration
	// BackoffMin and BackoffMax bound the wait between retries while the
	// database or Redis fails; zero means DefaultBackoffMin, and a
	// BackoffMax below BackoffMin means DefaultBackoffMax (BackoffMin if
	// that is longer).
	BackoffMin, BackoffMax time.Duration
	// Logger receives warnings and errors; nil means slog.Default().
	Logger *slog.Logger
	// Clock tells the time for lag figures; nil means
	// flashgate.SystemClock.
	Clock flashgate.Clock
	// WaitReplicas is how many replicas must hold a batch before it is
	// committed: the drainer re-claims the batch's entries (XCLAIM JUSTID, a
	// write replicated after the entries themselves) and sends `WAIT n
	// WaitTimeout` on that same connection to the stream's primary. When
	// fewer replicas acknowledge, the batch is not committed: it stays
	// pending and is tried again after a backoff.
	//
	// Zero (WaitAuto): n is the number of replicas the stream's
	// primary reports online (INFO replication, sent with the re-claims, in
	// the same round trip); a lagging replica holds the commit. A primary
	// without replicas needs no WAIT and is asked again at most once a
	// second (a replica that came online within that second may miss a
	// batch); a store that cannot tell (miniredis) is taken to have none.
	// The count is read only from a primary that says role:master: one it
	// cannot give (an error reply to INFO, a node that says role:slave)
	// means waiting for the last count and at least one replica (see
	// replwait.Parse). A number > 0 waits for exactly that many; WaitOff
	// (< 0) never waits.
	WaitReplicas int
	// WaitTimeout bounds each WAIT; zero means DefaultWaitTimeout. The
	// WAIT's reply is awaited for the Redis client's read timeout, which
	// bounds every call of the drainer: keep it at WaitTimeout plus
	// replwait.Margin (500ms) or more, and short, since a primary gone
	// silent (killed, frozen, cut off by a failover) holds the drainer that
	// long (on a client with ContextTimeoutEnabled the WAIT waits no
	// longer than WaitTimeout plus the margin).
	WaitTimeout time.Duration
	// Metrics, when set, receives flashgate_sink_orders_total,
	// flashgate_sink_batches_total{result}, flashgate_sink_lag_seconds,
	// flashgate_sink_backlog and flashgate_sink_dead_letters_total{sale};
	// nil: no metrics.
	Metrics prometheus.Registerer
}

// The defaults of Config's fields, the one source of them: withDefaults
// fills them in, and cmd/flashgate's flags default to them.
const (
	DefaultBatch        = 1024
	DefaultBlock        = 50 * time.Millisecond
	DefaultLinger       = 50 * time.Millisecond
	DefaultClaimIdle    = 30 * time.Second
	DefaultRefreshSales = time.Second
	DefaultBackoffMin   = 50 * time.Millisecond
	DefaultBackoffMax   = 500 * time.Millisecond
	DefaultWaitTimeout  = 500 * time.Millisecond
)

// withDefaults returns c with each zero field (a zero or negative
// duration or size, where negative has no meaning of its own) set to its
// default.
func (c Config) withDefaults() Config {
	if c.Consumer == "" {
		c.Consumer = DefaultConsumer("")
	}
	if c.Batch <= 0 {
		c.Batch = DefaultBatch
	}
	if c.Block <= 0 {
		c.Block = DefaultBlock
	}
	if c.Linger == 0 {
		c.Linger = DefaultLinger
	}
	if c.ClaimIdle <= 0 {
		c.ClaimIdle = DefaultClaimIdle
	}
	if c.RefreshSales <= 0 {
		c.RefreshSales = DefaultRefreshSales
	}
	if c.BackoffMin <= 0 {
		c.BackoffMin = DefaultBackoffMin
	}
	if c.BackoffMax < c.BackoffMin {
		c.BackoffMax = max(DefaultBackoffMax, c.BackoffMin)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = flashgate.SystemClock{}
	}
	if c.WaitTimeout <= 0 {
		c.WaitTimeout = DefaultWaitTimeout
	}
	return c
}

// Values of Config.WaitReplicas besides a count.
const (
	// WaitAuto waits for the replicas the stream's primary has online.
	WaitAuto = 0
	// WaitOff never waits for replicas.
	WaitOff = -1
)

// ErrReplicasBehind is returned (wrapped) by DrainOnce when fewer than the
// replicas it waits for (Config.WaitReplicas) acknowledged a batch within
// WaitTimeout: the batch was not committed and stays pending.
var ErrReplicasBehind = errors.New("ordersink: replicas did not acknowledge the batch")

// Drainer moves reserved orders from the sale streams into a Store. Its
// methods may be called from several goroutines; passes are serialised.
type Drainer struct {
	rdb   redis.UniversalClient
	store Store
	cfg   Config
	log   *slog.Logger
	m     *metrics

	// replicas is what each primary (by address) last said of its online
	// replicas (WaitAuto); its Blind is set once the drainer has noted
	// that the store cannot tell.
	replicas replwait.Counts

	// life guards closed and runs: Close ends each Run (runs) and waits
	// for it (running). The Drainer starts no goroutine of its own.
	life    sync.Mutex
	closed  bool
	runs    []context.CancelFunc
	running sync.WaitGroup

	// mu serialises passes and guards the fields below.
	mu          sync.Mutex
	sales       []string
	salesAt     time.Time
	groups      map[string]bool // streams whose group is known to exist
	needPending map[string]bool // streams whose own pending list must be re-read
	claimedAt   time.Time
	polls       int            // polls for new entries so far
	pollsSeen   atomic.Int64   // polls, for readers other than Run (tests)
	quiet       map[string]int // sale → consecutive polls that found nothing new
	// failed counts, per sale, the failed inserts in a row of a batch,
	// by the id of its first entry (see splitAfter), and suspect holds the
	// entries whose insert alone failed (not refused); a sale's go when
	// its pending list is found empty.
	failed  map[string]map[string]int
	suspect map[string]map[string]bool
	// retry holds the sales whose orders the store failed, and when Run
	// tries them next (see backOff).
	retry map[string]retry
}

// retry is when Run next tries a sale whose orders the store failed, and
// how long it waited last.
type retry struct {
	at   time.Time
	wait time.Duration
}

// New returns a Drainer reading with rdb (a *redis.Client, or a
// *redis.ClusterClient for a cluster), best a client of its own: each WAIT
// holds a connection for up to WaitTimeout.
func New(rdb redis.UniversalClient, store Store, cfg Config) *Drainer {
	cfg = cfg.withDefaults()
	return &Drainer{
		rdb:         rdb,
		store:       store,
		cfg:         cfg,
		log:         cfg.Logger.With("component", "ordersink", "consumer", cfg.Consumer),
		m:           newMetrics(cfg.Metrics, cfg.Logger),
		groups:      map[string]bool{},
		needPending: map[string]bool{},
		quiet:       map[string]int{},
		failed:      map[string]map[string]int{},
		suspect:     map[string]map[string]bool{},
		retry:       map[string]retry{},
	}
}

// DefaultConsumer returns a consumer name that survives a restart: the host
// name (in Kubernetes, the pod name), followed by "-" and suffix when suffix
// is not empty (for example the port of the drainer's own listener, so that
// two drainers on one host differ).
func DefaultConsumer(suffix string) string {
	h, _ := os.Hostname()
	if h == "" {
		h = "ordersink"
	}
	if suffix != "" {
		h += "-" + suffix
	}
	return h
}

// Run drains the streams until ctx is done, then returns nil. While the
// database or Redis fails it retries with backoff and acknowledges nothing.
// A sale whose orders the store fails backs off on its own (between
// BackoffMin and BackoffMax), while the other sales are drained as usual.
// Close ends it too; after Close it returns nil at once.
func (d *Drainer) Run(ctx context.Context) error {
	d.life.Lock()
	if d.closed {
		d.life.Unlock()
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	d.runs = append(d.runs, cancel)
	d.running.Add(1) // under life, after checking closed: before Close's Wait
	d.life.Unlock()
	defer d.running.Done()
	defer cancel()
	wait := d.cfg.BackoffMin
	noGroup := false
	for ctx.Err() == nil {
		_, err := d.pass(ctx, true)
		if err == nil || isStoreError(err) {
			wait, noGroup = d.cfg.BackoffMin, false
			continue
		}
		if ctx.Err() != nil {
			break
		}
		if isNoGroup(err) && !noGroup {
			// A stream or its group is gone (a failover to a replica that
			// lacked it, a Redis that lost its data): the pass forgot the
			// groups, so the next one, at once, creates them again and
			// reads what the primary holds. A second NOGROUP in a row
			// backs off as any error does.
			noGroup = true
			d.log.Info("a sale stream's consumer group is gone; creating it again", "err", err)
			continue
		}
		noGroup = false
		d.log.Warn("draining failed; retrying", "err", err, "wait", wait)
		if !sleep(ctx, wait) {
			break
		}
		wait = min(2*wait, d.cfg.BackoffMax)
	}
	return nil
}

// Close ends every Run and waits for each to return (a pass in flight
// stops at its next Redis or database call). A Run called after Close
// returns at once; DrainOnce still works. Calling Close again waits again
// and returns nil.
func (d *Drainer) Close() error {
	d.life.Lock()
	d.closed = true
	runs := d.runs
	d.runs = nil
	d.life.Unlock()
	for _, cancel := range runs {
		cancel()
	}
	d.running.Wait()
	return nil
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// DrainOnce does one pass without waiting for new entries: this consumer's
// own pending entries first, then entries idle in other consumers for longer
// than ClaimIdle, then the entries that were in the streams when it started.
// It returns how many entries it committed to the store (orders stored
// before and delivered again count too).
func (d *Drainer) DrainOnce(ctx context.Context) (persisted int, err error) {
	return d.pass(ctx, false)
}
