// Package queueleader is the control plane's side of the fair queue
// (docs/api.md, "Fair queue"): the leader opens each fair sale's queue
// prequeue_seconds before the start with a fresh secret seed, ends the
// pre-queue at the start (revealing the seed), ranks the pre-start
// entrants by fairqueue.Rank and then admits positions, in order, only
// while units remain that no admitted buyer has been promised. It journals
// the queue to the database and restores it from there when Redis lost it.
// The rules it shares with the gateway are in package fairqueue; the
// control plane's Service holds a Leader and calls Tick from its loop.
package queueleader

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/fairqueue"
	"github.com/flashgate/flashgate/lua"
)

// Store is what the leader keeps in the database: a fair queue's mark and
// entrants (journal.go), for a rebuild.
type Store interface {
	JournalQueue(ctx context.Context, saleID string, m flashgate.QueueMark, entrants []flashgate.QueueEntrant) error
	QueueJournal(ctx context.Context, saleID string) (m flashgate.QueueMark, entrants []flashgate.QueueEntrant, ok bool, err error)
}

// Config is a Leader's settings; Redis and Store are required.
type Config struct {
	Redis redis.UniversalClient
	Store Store
	// Clock tells the time; nil means the wall clock.
	Clock flashgate.Clock
	// Logger logs; nil means slog.Default().
	Logger *slog.Logger
	// Backlog holds admission while a sale's order stream holds more
	// entries than this; 0 means no limit.
	Backlog int64
	// Latency holds admission while reading the sale from Redis takes
	// longer than this; 0 means no limit.
	Latency time.Duration
	// SeedSecret keys the queues' seeds (required).
	SeedSecret []byte
	// Detach is how a ranking outlives a tick's deadline (not its
	// cancellation); nil means it does not (the tick's own context).
	Detach func(context.Context) (context.Context, context.CancelFunc)
}

// Leader runs the fair queues of the sales it is given. Its methods are
// safe for concurrent use.
type Leader struct {
	rdb     redis.UniversalClient
	store   Store
	clock   flashgate.Clock
	log     *slog.Logger
	backlog int64
	latency time.Duration
	seedKey []byte
	detach  func(context.Context) (context.Context, context.CancelFunc)
	// runs is the leader's memory of each queue.
	runs queueState
}

// New returns a Leader for cfg.
func New(cfg Config) *Leader {
	l := &Leader{rdb: cfg.Redis, store: cfg.Store, clock: cfg.Clock, log: cfg.Logger,
		backlog: cfg.Backlog, latency: cfg.Latency, seedKey: cfg.SeedSecret, detach: cfg.Detach}
	if l.clock == nil {
		l.clock = flashgate.SystemClock{}
	}
	if l.log == nil {
		l.log = slog.Default()
	}
	if l.backlog <= 0 {
		l.backlog = math.MaxInt64
	}
	if l.latency <= 0 {
		l.latency = math.MaxInt64
	}
	if l.detach == nil {
		l.detach = func(ctx context.Context) (context.Context, context.CancelFunc) { return ctx, func() {} }
	}
	return l
}

// Drop forgets a sale's queue (its sale closed or was archived).
func (l *Leader) Drop(id string) { l.runs.drop(id) }

const (
	// queueRankChunk is how many ranks one QueueRank call writes, and
	// queueRankPipeline how many calls go in one round trip.
	queueRankChunk    = 500
	queueRankPipeline = 16
	// queueScanCount is the COUNT of one HSCAN of the queue hash.
	queueScanCount = 1000
)

// queueEntrant is a pre-start entrant and its rank key.
type queueEntrant struct {
	key  [fairqueue.RankKeySize]byte
	user string
}

// queueRun is the leader's memory of one sale's queue. It is rebuilt from
// Redis when another process led before (the order is the seed's, so the
// same).
type queueRun struct {
	ranked bool
	pre    []queueEntrant // in the seed's order
	late   []string       // users by arrival, as far as read
	// tokens and refilled are admit_per_minute's bucket.
	tokens   float64
	refilled time.Time
	// journalRead is set once this process compared Redis' queue with
	// its journal; journaled holds the mark last written to it.
	journalRead bool
	journaled   flashgate.QueueMark
	// entrants and seenAt measure the queue's growth for challenge_auto.
	entrants int64
	seenAt   time.Time
	growth   float64 // entries per second, smoothed
}

// queueState is the leader's queues, by sale id.
type queueState struct {
	mu   sync.Mutex
	runs map[string]*queueRun
}

func (q *queueState) run(id string) *queueRun {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.runs == nil {
		q.runs = map[string]*queueRun{}
	}
	r := q.runs[id]
	if r == nil {
		r = &queueRun{}
		q.runs[id] = r
	}
	return r
}

func (q *queueState) drop(id string) {
	q.mu.Lock()
	delete(q.runs, id)
	q.mu.Unlock()
}

// stockFields are the sale hash fields besides the queue's
// (fairqueue.Fields) that one queue step reads.
var stockFields = []string{lua.FieldTotal, lua.FieldBooked, lua.FieldPerUser, lua.FieldStart, lua.FieldClosed}

// queueFigures is what one queue step reads: the queue, the stock and the
// order stream's backlog, and how long reading them took.
type queueFigures struct {
	fairqueue.View
	total, booked, perUser int64
	start, closed          bool
	backlog                int64
	latency                time.Duration
	// entries is how many entrants the queue hash holds (queue_prequeued
	// and queue_late may count more: an archived sale's hash keeps them
	// while its queue goes).
	entries int64
}

func (l *Leader) queueFigures(ctx context.Context, id string) (queueFigures, error) {
	t := time.Now()
	pipe := l.rdb.Pipeline()
	h := pipe.HMGet(ctx, lua.SaleKey(id), stockFields...)
	qh := pipe.HMGet(ctx, lua.SaleKey(id), fairqueue.Fields...)
	x := pipe.XLen(ctx, lua.OrdersKey(id))
	// Read after the counters: an entry between the two reads makes
	// entries larger, never smaller.
	n := pipe.HLen(ctx, lua.QueueKey(id))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return queueFigures{}, fmt.Errorf("reading queue figures: %w: %w", flashgate.ErrUnavailable, err)
	}
	sh, ok := lua.ReadHash(stockFields, h.Val())
	if !ok || !sh.Has(lua.FieldTotal) {
		return queueFigures{}, fmt.Errorf("sale %s not in redis: %w", id, flashgate.ErrUnavailable)
	}
	v, ok := fairqueue.Read(qh.Val())
	if !ok {
		return queueFigures{}, fmt.Errorf("sale %s: queue fields unreadable: %w", id, flashgate.ErrUnavailable)
	}
	return queueFigures{
		View:  v,
		total: sh.Int(lua.FieldTotal), booked: sh.Int(lua.FieldBooked), perUser: max(sh.Int(lua.FieldPerUser), 1),
		start: sh.Int(lua.FieldStart) == 1, closed: sh.Int(lua.FieldClosed) == 1,
		backlog: x.Val(), latency: time.Since(t), entries: n.Val(),
	}, nil
}

// Tick runs one step of every fair sale's queue among sales (the live
// sales: archived ones are closed, with nothing to run) under the fencing
// token fence; the leader calls it every tick. A closed sale's queue only
// has its last entries journaled (journalClosed).
func (l *Leader) Tick(ctx context.Context, sales []flashgate.Sale, fence int64) {
	for _, sale := range sales {
		if !sale.Fair() {
			continue
		}
		if sale.State == flashgate.StateClosed {
			if err := l.journalClosed(ctx, sale.ID); err != nil && ctx.Err() == nil {
				l.log.Warn("fair queue", "sale", sale.ID, "err", err)
			}
			continue
		}
		if err := l.Step(ctx, sale, fence); err != nil && ctx.Err() == nil {
			l.log.Warn("fair queue", "sale", sale.ID, "err", err)
		}
	}
}

// Step moves one fair sale's queue on: open, start, rank, admit. The
// leader loop calls it every tick with its lease's fencing token (every
// frontier write carries it, and Redis refuses a token below the last
// one); tests call it with their clock and a token of their own.
func (l *Leader) Step(ctx context.Context, sale flashgate.Sale, fence int64) (err error) {
	if !sale.Fair() || sale.StartsAt == nil {
		return nil
	}
	if fence <= 0 {
		return nil // no lease (or no fencing token): no leader writes
	}
	f, err := l.queueFigures(ctx, sale.ID)
	if err != nil {
		return err
	}
	now := l.clock.Now()
	run := l.runs.run(sale.ID)
	if run.ranked && !f.Ranked {
		// Redis lost the queue (its sale was rebuilt): what this process
		// remembers belongs to a queue that is gone.
		*run = queueRun{journaled: run.journaled}
	}
	opensAt := fairqueue.OpensAt(sale)
	if f.Open || !now.Before(opensAt) { // no journal before the opening
		if restored, err := l.restoreQueueIfBehind(ctx, sale, run, f, fence, now); err != nil {
			return err
		} else if restored {
			if f, err = l.queueFigures(ctx, sale.ID); err != nil {
				return err
			}
		}
	}
	defer func() {
		if f.Open {
			if jerr := l.journalQueue(ctx, sale.ID, run); jerr != nil && err == nil {
				err = jerr
			}
		}
	}()
	if !f.Open {
		if now.Before(opensAt) {
			return nil
		}
		if err := l.openQueue(ctx, sale); err != nil {
			return err
		}
		f.Open = true // journaled at once
		return nil
	}
	f.MaxNumber = l.tuneChallenge(ctx, sale, run, f, now)
	if !f.Started {
		if now.Before(*sale.StartsAt) {
			return nil
		}
		pre, err := l.startQueue(ctx, sale.ID, f.Epoch, f.SeedSHA)
		if err != nil {
			return err
		}
		f.Started, f.Prequeued = true, pre
	}
	if !run.ranked {
		// A big queue takes longer to read and rank than a tick may: the
		// ranking goes on past the tick's deadline (not past a
		// cancellation), bounded like a restore.
		rctx, cancel := l.detach(ctx)
		err := l.rankQueue(rctx, sale.ID, run, f, fence)
		cancel()
		if err != nil {
			return err
		}
		f.Ranked = true
	}
	if !f.start || f.closed {
		return nil
	}
	return l.admit(ctx, sale, run, f, fence, now)
}

// DeriveSeedSecret is the seed secret the control plane uses when its
// Config.QueueSeedSecret is empty: HMAC-SHA256(key = the admin token,
// message = "flashgate fair queue seed v1"). Only the control plane holds
// the admin token; gateways never do.
func DeriveSeedSecret(adminToken string) []byte {
	m := hmac.New(sha256.New, []byte(adminToken))
	m.Write([]byte("flashgate fair queue seed v1"))
	return m.Sum(nil)
}

// queueSeed derives a queue's seed: HMAC-SHA256(seed secret, "seed/" sale
// id "/" epoch).
func (l *Leader) queueSeed(id, epoch string) [32]byte {
	var seed [32]byte
	m := hmac.New(sha256.New, l.seedKey)
	m.Write([]byte("seed/" + id + "/" + epoch))
	m.Sum(seed[:0])
	return seed
}

// openQueue opens the queue under a new epoch and publishes its seed's
// SHA-256; the seed itself stays here until the start.
func (l *Leader) openQueue(ctx context.Context, sale flashgate.Sale) error {
	epoch := strconv.FormatInt(l.clock.Now().UnixMilli(), 10)
	seed := l.queueSeed(sale.ID, epoch)
	sum := sha256.Sum256(seed[:])
	n, err := lua.QueueOpen.Run(ctx, l.rdb, lua.SaleKeys(sale.ID), epoch, hex.EncodeToString(sum[:]),
		sale.ChallengeMaxNumber, fairqueue.AdmitWindow(sale)).Int()
	if err != nil {
		return fmt.Errorf("opening the queue: %w: %w", flashgate.ErrUnavailable, err)
	}
	if n == 1 {
		l.log.Info("fair queue open", "sale", sale.ID, "seed_sha256", hex.EncodeToString(sum[:]))
	}
	return nil
}

// startQueue ends the pre-queue and reveals the seed, derived again from
// the queue's epoch and checked against the published commitment sha; it
// returns the pre-start entrants.
func (l *Leader) startQueue(ctx context.Context, id, epoch, sha string) (int64, error) {
	seed := l.queueSeed(id, epoch)
	if sum := sha256.Sum256(seed[:]); epoch == "" || hex.EncodeToString(sum[:]) != sha {
		// The seed secret changed since the opening (or the hash lost its
		// epoch): revealing another seed would break the commitment.
		return 0, fmt.Errorf("starting the queue: the seed derived from epoch %q does not hash to the published queue_seed_sha256 (was the queue seed secret changed?)", epoch)
	}
	v, err := lua.QueueStart.Run(ctx, l.rdb, lua.SaleKeys(id), hex.EncodeToString(seed[:])).Slice()
	if err != nil {
		return 0, fmt.Errorf("starting the queue: %w: %w", flashgate.ErrUnavailable, err)
	}
	if len(v) != 2 {
		return 0, fmt.Errorf("starting the queue: %d values in the answer, want 2", len(v))
	}
	pre, _ := v[0].(int64)
	if pre < 0 {
		return 0, fmt.Errorf("starting the queue: not open: %w", flashgate.ErrUnavailable)
	}
	l.log.Info("fair queue started: seed revealed", "sale", id, "pre_start_entrants", pre)
	return pre, nil
}
