package controlplane

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/lua"
)

// The fair queue's leader side (docs/api.md, "Fair queue"): it opens the
// queue prequeue_seconds before the start with a fresh secret seed, ends the
// pre-queue at the start (revealing the seed), ranks the pre-start entrants
// by flashgate.QueueRank and then admits positions, in order, only while
// units remain that no admitted buyer has been promised.

// Limits of a fair queue's settings.
const (
	maxChallengeNumber = 100_000_000
	maxAdmitSeconds    = 3600
	// queueRankChunk is how many ranks one QueueRank call writes, and
	// queueRankPipeline how many calls go in one round trip.
	queueRankChunk    = 500
	queueRankPipeline = 16
	// queueScanCount is the COUNT of one HSCAN of the queue hash.
	queueScanCount = 1000
	// maxAutoFactor bounds how far challenge_auto raises the difficulty.
	maxAutoFactor = 64
	// autoRatePerStep is the entries per second each step of
	// challenge_auto's factor stands for.
	autoRatePerStep = 100
)

func validateQueue(s flashgate.Sale) error {
	switch {
	case s.Queue != "" && s.Queue != flashgate.QueueFair:
		return &flashgate.FieldError{Field: "queue", Reason: `"fair" or absent`}
	case s.Queue == "" && (s.PrequeueSeconds != 0 || s.ChallengeMaxNumber != 0 || s.AdmitPerMinute != 0 || s.AdmitSeconds != 0 || s.ChallengeAuto != nil):
		return &flashgate.FieldError{Field: "queue", Reason: `queue settings need "queue": "fair"`}
	case s.Queue == "":
		return nil
	case s.PrequeueSeconds < 0 || s.PrequeueSeconds > flashgate.MaxPrequeueSeconds:
		return &flashgate.FieldError{Field: "prequeue_seconds", Reason: "outside 1..86400"}
	case s.ChallengeMaxNumber < 0 || s.ChallengeMaxNumber > maxChallengeNumber:
		return &flashgate.FieldError{Field: "challenge_maxnumber", Reason: "outside 0..100000000"}
	case s.AdmitPerMinute < 0:
		return &flashgate.FieldError{Field: "admit_per_minute", Reason: "negative"}
	case s.AdmitSeconds < 0 || s.AdmitSeconds > maxAdmitSeconds:
		return &flashgate.FieldError{Field: "admit_seconds", Reason: "outside 1..3600"}
	case s.StartsAt == nil:
		return &flashgate.FieldError{Field: "starts_at", Reason: "a fair queue needs a start time"}
	case s.Bucketed():
		return &flashgate.FieldError{Field: "buckets", Reason: "a fair queue sells from one bucket"}
	}
	return nil
}

// queueEntrant is a pre-start entrant and its rank key.
type queueEntrant struct {
	key  [sha256.Size]byte
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

// queueFields are the sale hash fields one queue step reads, in this order.
var queueFields = []string{
	lua.FieldTotal, lua.FieldBooked, lua.FieldPerUser, lua.FieldStart, lua.FieldClosed,
	lua.FieldQOpen, lua.FieldQStarted, lua.FieldQPre, lua.FieldQLate, lua.FieldQRanked,
	lua.FieldQAdmitted, lua.FieldQExpired, lua.FieldQMaxNumber, lua.FieldQEpoch, lua.FieldQSeedSHA,
}

type queueFigures struct {
	total, booked, perUser, pre, late, k, e, maxnum int64
	start, closed, open, started, ranked            bool
	epoch, seedSHA                                  string
	backlog                                         int64
	latency                                         time.Duration
}

func (s *Service) queueFigures(ctx context.Context, id string) (queueFigures, error) {
	t := time.Now()
	pipe := s.rdb.Pipeline()
	h := pipe.HMGet(ctx, lua.SaleKey(id), queueFields...)
	x := pipe.XLen(ctx, lua.OrdersKey(id))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return queueFigures{}, fmt.Errorf("reading queue figures: %w: %w", flashgate.ErrUnavailable, err)
	}
	v := h.Val()
	if len(v) != len(queueFields) || v[0] == nil {
		return queueFigures{}, fmt.Errorf("sale %s not in redis: %w", id, flashgate.ErrUnavailable)
	}
	return queueFigures{
		total: lua.Int(v[0]), booked: lua.Int(v[1]), perUser: max(lua.Int(v[2]), 1),
		start: lua.Int(v[3]) == 1, closed: lua.Int(v[4]) == 1, open: lua.Int(v[5]) == 1, started: lua.Int(v[6]) == 1,
		pre: lua.Int(v[7]), late: lua.Int(v[8]), ranked: lua.Int(v[9]) == 1, k: lua.Int(v[10]), e: lua.Int(v[11]), maxnum: lua.Int(v[12]),
		epoch: str(v[13]), seedSHA: str(v[14]),
		backlog: x.Val(), latency: time.Since(t),
	}, nil
}

// queueTick runs one step of every fair sale's queue among the live sales
// the tick read; the leader calls it every tick.
func (s *Service) queueTick(ctx context.Context, sales []flashgate.Sale) {
	for _, sale := range sales {
		if !sale.Fair() {
			continue
		}
		if sale.State == flashgate.StateClosed {
			s.queues.drop(sale.ID)
			continue
		}
		if err := s.QueueStep(ctx, sale, s.fence.Load()); err != nil && ctx.Err() == nil {
			s.log.Warn("fair queue", "sale", sale.ID, "err", err)
		}
	}
}

// QueueStep moves one fair sale's queue on: open, start, rank, admit. The
// leader loop calls it every tick with its lease's fencing token (every
// frontier write carries it, and Redis refuses a token below the last
// one); tests call it with their clock and a token of their own.
func (s *Service) QueueStep(ctx context.Context, sale flashgate.Sale, fence int64) (err error) {
	if !sale.Fair() || sale.StartsAt == nil {
		return nil
	}
	if fence <= 0 {
		return nil // no lease (or no fencing token): no leader writes
	}
	f, err := s.queueFigures(ctx, sale.ID)
	if err != nil {
		return err
	}
	now := s.clock.Now()
	run := s.queues.run(sale.ID)
	if run.ranked && !f.ranked {
		// Redis lost the queue (its sale was rebuilt): what this process
		// remembers belongs to a queue that is gone.
		*run = queueRun{journaled: run.journaled}
	}
	opensAt := sale.StartsAt.Add(-time.Duration(sale.Prequeue()) * time.Second)
	if f.open || !now.Before(opensAt) { // no journal before the opening
		if restored, err := s.restoreQueueIfBehind(ctx, sale, run, f, fence, now); err != nil {
			return err
		} else if restored {
			if f, err = s.queueFigures(ctx, sale.ID); err != nil {
				return err
			}
		}
	}
	defer func() {
		if f.open {
			if jerr := s.journalQueue(ctx, sale.ID, run); jerr != nil && err == nil {
				err = jerr
			}
		}
	}()
	if !f.open {
		if now.Before(opensAt) {
			return nil
		}
		if err := s.openQueue(ctx, sale); err != nil {
			return err
		}
		f.open = true // journaled at once
		return nil
	}
	f.maxnum = s.tuneChallenge(ctx, sale, run, f, now)
	if !f.started {
		if now.Before(*sale.StartsAt) {
			return nil
		}
		pre, err := s.startQueue(ctx, sale.ID)
		if err != nil {
			return err
		}
		f.started, f.pre = true, pre
	}
	if !run.ranked {
		// A big queue takes longer to read and rank than a tick may: the
		// ranking goes on past the tick's deadline (not past a
		// cancellation), bounded like a restore.
		rctx, cancel := restoreContext(ctx)
		err := s.rankQueue(rctx, sale.ID, run, f, fence)
		cancel()
		if err != nil {
			return err
		}
		f.ranked = true
	}
	if !f.start || f.closed {
		return nil
	}
	return s.admit(ctx, sale, run, f, fence, now)
}

// DeriveQueueSeedSecret is the seed secret the control plane uses when
// Config.QueueSeedSecret is empty: HMAC-SHA256(key = the admin token,
// message = "flashgate fair queue seed v1"). Only the control plane holds
// the admin token; gateways never do.
func DeriveQueueSeedSecret(adminToken string) []byte {
	m := hmac.New(sha256.New, []byte(adminToken))
	m.Write([]byte("flashgate fair queue seed v1"))
	return m.Sum(nil)
}

// queueSeed derives a queue's seed: HMAC-SHA256(seed secret, "seed/" sale
// id "/" epoch).
func (s *Service) queueSeed(id, epoch string) [32]byte {
	var seed [32]byte
	m := hmac.New(sha256.New, s.seedKey)
	m.Write([]byte("seed/" + id + "/" + epoch))
	m.Sum(seed[:0])
	return seed
}

// openQueue opens the queue under a new epoch and publishes its seed's
// SHA-256; the seed itself stays here until the start.
func (s *Service) openQueue(ctx context.Context, sale flashgate.Sale) error {
	epoch := strconv.FormatInt(s.clock.Now().UnixMilli(), 10)
	seed := s.queueSeed(sale.ID, epoch)
	sum := sha256.Sum256(seed[:])
	n, err := lua.QueueOpen.Run(ctx, s.rdb, lua.SaleKeys(sale.ID), epoch, hex.EncodeToString(sum[:]),
		sale.ChallengeMaxNumber, sale.AdmitWindow()).Int()
	if err != nil {
		return fmt.Errorf("opening the queue: %w: %w", flashgate.ErrUnavailable, err)
	}
	if n == 1 {
		s.log.Info("fair queue open", "sale", sale.ID, "seed_sha256", hex.EncodeToString(sum[:]))
	}
	return nil
}

// startQueue ends the pre-queue and reveals the seed, derived again from
// the queue's epoch and checked against the published commitment; it
// returns the pre-start entrants.
func (s *Service) startQueue(ctx context.Context, id string) (int64, error) {
	h, err := s.rdb.HMGet(ctx, lua.SaleKey(id), lua.FieldQEpoch, lua.FieldQSeedSHA).Result()
	if err != nil {
		return 0, fmt.Errorf("starting the queue: %w: %w", flashgate.ErrUnavailable, err)
	}
	epoch, _ := h[0].(string)
	sha, _ := h[1].(string)
	seed := s.queueSeed(id, epoch)
	if sum := sha256.Sum256(seed[:]); epoch == "" || hex.EncodeToString(sum[:]) != sha {
		// The seed secret changed since the opening (or the hash lost its
		// epoch): revealing another seed would break the commitment.
		return 0, fmt.Errorf("starting the queue: the seed derived from epoch %q does not hash to the published q_seedsha (was the queue seed secret changed?)", epoch)
	}
	v, err := lua.QueueStart.Run(ctx, s.rdb, lua.SaleKeys(id), hex.EncodeToString(seed[:])).Slice()
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
	s.log.Info("fair queue started: seed revealed", "sale", id, "pre_start_entrants", pre)
	return pre, nil
}
