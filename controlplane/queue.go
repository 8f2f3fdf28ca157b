package controlplane

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/internal/salehash"
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
	// admittedAt holds when (unix ms) each position in (base, k] was
	// admitted, at index pos-base-1; positions this process did not admit
	// count from when it first saw them (their window only grows).
	base       int64
	admittedAt []int64
	// tokens and refilled are admit_per_minute's bucket.
	tokens   float64
	refilled time.Time
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
	lua.FieldQAdmitted, lua.FieldQExpired, lua.FieldQMaxNumber,
}

type queueFigures struct {
	total, booked, perUser, pre, late, k, e, maxnum int64
	start, closed, open, started, ranked            bool
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
		total: salehash.Num(v[0]), booked: salehash.Num(v[1]), perUser: max(salehash.Num(v[2]), 1),
		start: salehash.Num(v[3]) == 1, closed: salehash.Num(v[4]) == 1, open: salehash.Num(v[5]) == 1, started: salehash.Num(v[6]) == 1,
		pre: salehash.Num(v[7]), late: salehash.Num(v[8]), ranked: salehash.Num(v[9]) == 1, k: salehash.Num(v[10]), e: salehash.Num(v[11]), maxnum: salehash.Num(v[12]),
		backlog: x.Val(), latency: time.Since(t),
	}, nil
}

// queueTick runs one step of every fair sale's queue; the leader calls it
// every tick.
func (s *Service) queueTick(ctx context.Context) {
	sales, err := s.store.LiveSales(ctx) // archived sales are closed: nothing to run
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("fair queue: listing sales", "err", err)
		}
		return
	}
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
func (s *Service) QueueStep(ctx context.Context, sale flashgate.Sale, fence int64) error {
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
		*run = queueRun{}
	}
	opensAt := sale.StartsAt.Add(-time.Duration(sale.Prequeue()) * time.Second)
	if !f.open {
		if now.Before(opensAt) {
			return nil
		}
		return s.openQueue(ctx, sale)
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

// openQueue draws the seed and opens the queue.
func (s *Service) openQueue(ctx context.Context, sale flashgate.Sale) error {
	var seed [32]byte
	if _, err := rand.Read(seed[:]); err != nil {
		return fmt.Errorf("drawing the seed: %w", err)
	}
	sum := sha256.Sum256(seed[:])
	n, err := lua.QueueOpen.Run(ctx, s.rdb, lua.SaleKeys(sale.ID), hex.EncodeToString(seed[:]), hex.EncodeToString(sum[:]),
		sale.ChallengeMaxNumber, sale.AdmitWindow()).Int()
	if err != nil {
		return fmt.Errorf("opening the queue: %w: %w", flashgate.ErrUnavailable, err)
	}
	if n == 1 {
		s.log.Info("fair queue open", "sale", sale.ID, "seed_sha256", hex.EncodeToString(sum[:]))
	}
	return nil
}

// startQueue ends the pre-queue and reveals the seed; it returns the
// pre-start entrants.
func (s *Service) startQueue(ctx context.Context, id string) (int64, error) {
	v, err := lua.QueueStart.Run(ctx, s.rdb, lua.SaleKeys(id)).Slice()
	if err != nil || len(v) != 2 {
		return 0, fmt.Errorf("starting the queue: %w: %w", flashgate.ErrUnavailable, err)
	}
	pre, _ := v[0].(int64)
	if pre < 0 {
		return 0, fmt.Errorf("starting the queue: not open: %w", flashgate.ErrUnavailable)
	}
	s.log.Info("fair queue started: seed revealed", "sale", id, "pre_start_entrants", pre)
	return pre, nil
}

// rankQueue reads every pre-start entrant, sorts them by rank key and,
// unless Redis holds the ranks already, writes them.
func (s *Service) rankQueue(ctx context.Context, id string, run *queueRun, f queueFigures, fence int64) error {
	seedHex, err := s.rdb.HGet(ctx, lua.SaleKey(id), lua.FieldQSeed).Result()
	if err != nil {
		return fmt.Errorf("reading the seed: %w: %w", flashgate.ErrUnavailable, err)
	}
	seed, err := hex.DecodeString(seedHex)
	if err != nil || len(seed) != 32 {
		return fmt.Errorf("sale %s: malformed seed in redis", id)
	}
	pre := make([]queueEntrant, 0, f.pre)
	var cursor uint64
	for {
		kv, next, err := s.rdb.HScan(ctx, lua.QueueKey(id), cursor, "", queueScanCount).Result()
		if err != nil {
			return fmt.Errorf("reading the queue: %w: %w", flashgate.ErrUnavailable, err)
		}
		for i := 0; i+1 < len(kv); i += 2 {
			if v := kv[i+1]; v == "p" || strings.HasPrefix(v, "r") {
				pre = append(pre, queueEntrant{key: rankKey(seed, id, kv[i]), user: kv[i]})
			}
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	slices.SortFunc(pre, func(a, b queueEntrant) int { return bytes.Compare(a.key[:], b.key[:]) })
	if int64(len(pre)) != f.pre {
		return fmt.Errorf("sale %s: %d pre-start entrants in the queue, q_pre says %d", id, len(pre), f.pre)
	}
	if !f.ranked {
		if err := lua.QueueRank.Load(ctx, s.rdb).Err(); err != nil {
			return fmt.Errorf("ranking the queue: %w: %w", flashgate.ErrUnavailable, err)
		}
		// queueRankPipeline chunks per round trip, in order: the last
		// chunk, which marks the queue ranked, goes last.
		for i := 0; i == 0 || i < len(pre); {
			pipe := s.rdb.Pipeline()
			var cmds []*redis.Cmd
			for c := 0; c < queueRankPipeline && (i == 0 || i < len(pre)); c++ {
				chunk := pre[i:min(i+queueRankChunk, len(pre))]
				last := "0"
				if i+queueRankChunk >= len(pre) {
					last = "1"
				}
				args := make([]any, 0, 2+2*len(chunk))
				args = append(args, fence, last)
				for j, e := range chunk {
					args = append(args, e.user, "r"+strconv.Itoa(i+j+1))
				}
				cmds = append(cmds, lua.QueueRank.EvalSha(ctx, pipe, lua.QueueRankKeys(id), args...))
				i += queueRankChunk
			}
			if _, err := pipe.Exec(ctx); err != nil {
				return fmt.Errorf("ranking the queue: %w: %w", flashgate.ErrUnavailable, err)
			}
			for _, c := range cmds {
				if n, _ := c.Int(); n < 0 {
					return fmt.Errorf("ranking the queue: a newer leader's fencing token: %w", flashgate.ErrUnavailable)
				}
			}
		}
		s.log.Info("fair queue ranked", "sale", id, "pre_start_entrants", len(pre))
	}
	run.pre, run.ranked = pre, true
	run.base, run.admittedAt = f.e, nil
	return nil
}

// rankKey is flashgate.QueueRank's HMAC as bytes.
func rankKey(seed []byte, sale, user string) (k [sha256.Size]byte) {
	m := hmac.New(sha256.New, seed)
	m.Write([]byte(sale))
	m.Write([]byte{'/'})
	m.Write([]byte(user))
	m.Sum(k[:0])
	return k
}

// user returns the user at position pos (1-based), reading the late list
// as far as needed.
func (s *Service) queueUser(ctx context.Context, id string, run *queueRun, pos int64) (string, error) {
	if pos <= int64(len(run.pre)) {
		return run.pre[pos-1].user, nil
	}
	n := pos - int64(len(run.pre)) // arrival number
	if n > int64(len(run.late)) {
		more, err := s.rdb.LRange(ctx, lua.QueueLateKey(id), int64(len(run.late)), n-1+queueScanCount).Result()
		if err != nil {
			return "", fmt.Errorf("reading late entrants: %w: %w", flashgate.ErrUnavailable, err)
		}
		run.late = append(run.late, more...)
	}
	if n > int64(len(run.late)) {
		return "", fmt.Errorf("sale %s: late entrant %d missing", id, n)
	}
	return run.late[n-1], nil
}

// admit ends the windows that passed and admits the positions the free
// stock allows, in one QueueAdvance.
func (s *Service) admit(ctx context.Context, sale flashgate.Sale, run *queueRun, f queueFigures, fence int64, now time.Time) error {
	ms := now.UnixMilli()
	// Positions this process has not seen admitted count from now.
	for p := run.base + int64(len(run.admittedAt)); p < f.k; p++ {
		run.admittedAt = append(run.admittedAt, ms)
	}
	window := int64(sale.AdmitWindow()) * 1000
	e := max(f.e, run.base)
	for e < f.k && run.admittedAt[e-run.base]+window <= ms {
		e++
	}
	// Positions in (e, k] whose buyer holds no order are promised a bound.
	users := make([]string, 0, f.k-e)
	for p := e + 1; p <= f.k; p++ {
		u, err := s.queueUser(ctx, sale.ID, run, p)
		if err != nil {
			return err
		}
		users = append(users, u)
	}
	pending := int64(0)
	if len(users) > 0 {
		held, err := s.rdb.HMGet(ctx, lua.BuyersKey(sale.ID), users...).Result()
		if err != nil {
			return fmt.Errorf("reading buyers: %w: %w", flashgate.ErrUnavailable, err)
		}
		for _, h := range held {
			if h == nil {
				pending++
			}
		}
	}
	free := max(f.total-f.booked, 0)/f.perUser - pending
	n := min(max(free, 0), f.pre+f.late-f.k)
	if f.backlog > s.queueBacklog || f.latency > s.queueLatency {
		n = 0 // hold admission while the system is behind
	}
	if apm := sale.AdmitPerMinute; apm > 0 {
		burst := max(float64(apm)/60, 1)
		if !run.refilled.IsZero() {
			run.tokens += now.Sub(run.refilled).Minutes() * float64(apm)
		} else {
			run.tokens = burst
		}
		run.tokens = min(run.tokens, burst)
		run.refilled = now
		n = min(n, int64(run.tokens))
		run.tokens -= float64(n)
	}
	if n <= 0 && e == f.e {
		return nil
	}
	k := f.k + n
	rate := int64(0)
	for p := k; p > run.base && p > 0; p-- {
		if p > f.k {
			rate++ // admitted now
			continue
		}
		if run.admittedAt[p-run.base-1] <= ms-60_000 {
			break
		}
		rate++
	}
	res, err := lua.QueueAdvance.Run(ctx, s.rdb, lua.SaleKeys(sale.ID), fence, f.k, k, run.theta(k), e, run.theta(e),
		rate, f.maxnum).Int()
	if err != nil {
		return fmt.Errorf("advancing the queue: %w: %w", flashgate.ErrUnavailable, err)
	}
	switch res {
	case 1:
		for range n {
			run.admittedAt = append(run.admittedAt, ms)
		}
		// Forget the times of positions whose window ended.
		if drop := e - run.base; drop > 0 {
			run.admittedAt = run.admittedAt[drop:]
			run.base = e
		}
		if n > 0 {
			s.log.Debug("fair queue admitted", "sale", sale.ID, "admitted_position", k, "pending", pending)
		}
	case 0:
		// Another writer moved q_k: read again next tick.
	default:
		return fmt.Errorf("advancing the queue: refused (%d)", res)
	}
	return nil
}

// theta is the rank key of pre-start position min(k, pre), "" for none.
func (r *queueRun) theta(k int64) string {
	k = min(k, int64(len(r.pre)))
	if k <= 0 {
		return ""
	}
	return hex.EncodeToString(r.pre[k-1].key[:])
}

// tuneChallenge sets the proof-of-work's maxnumber: the sale's
// challenge_maxnumber, raised with challenge_auto by one step per
// autoRatePerStep entries per second the queue grows by (at most
// maxAutoFactor times). It returns the maxnumber now in force.
func (s *Service) tuneChallenge(ctx context.Context, sale flashgate.Sale, run *queueRun, f queueFigures, now time.Time) int64 {
	base := sale.ChallengeMaxNumber
	if base <= 0 || !sale.ChallengeAutoOn() {
		return f.maxnum
	}
	entrants := f.pre + f.late
	if !run.seenAt.IsZero() {
		if dt := now.Sub(run.seenAt).Seconds(); dt > 0 {
			r := float64(entrants-run.entrants) / dt
			run.growth = 0.7*run.growth + 0.3*r
		}
	}
	run.entrants, run.seenAt = entrants, now
	factor := min(1+int64(run.growth/autoRatePerStep), maxAutoFactor)
	want := base * factor
	if want == f.maxnum {
		return want
	}
	if err := s.rdb.HSet(ctx, lua.SaleKey(sale.ID), lua.FieldQMaxNumber, want).Err(); err != nil {
		if ctx.Err() == nil {
			s.log.Warn("fair queue: setting the challenge's maxnumber", "sale", sale.ID, "err", err)
		}
		return f.maxnum
	}
	return want
}

// QueueStatus is a fair queue's figures for GET /admin/sales/{id}.
type QueueStatus struct {
	Open             bool   `json:"open"`
	Started          bool   `json:"started"`
	Entrants         int64  `json:"entrants"`
	PrequeueEntrants int64  `json:"prequeue_entrants"`
	AdmittedPosition int64  `json:"admitted_position"`
	ExpiredPosition  int64  `json:"expired_position"`
	RatePerMinute    int64  `json:"rate_per_minute"`
	ETASeconds       *int64 `json:"eta_seconds"`
	MaxNumber        int64  `json:"challenge_maxnumber"`
	SeedSHA256       string `json:"seed_sha256,omitempty"`
}

// queueStatus reads a fair sale's queue figures; ETASeconds is the time the
// last entrant waits at the recent rate.
func (s *Service) queueStatus(ctx context.Context, id string) (*QueueStatus, error) {
	v, err := s.rdb.HMGet(ctx, lua.SaleKey(id), lua.FieldQOpen, lua.FieldQStarted, lua.FieldQPre, lua.FieldQLate,
		lua.FieldQAdmitted, lua.FieldQExpired, lua.FieldQRate, lua.FieldQMaxNumber, lua.FieldQSeedSHA).Result()
	if err != nil {
		return nil, fmt.Errorf("reading the queue: %w: %w", flashgate.ErrUnavailable, err)
	}
	q := &QueueStatus{Open: salehash.Num(v[0]) == 1, Started: salehash.Num(v[1]) == 1, PrequeueEntrants: salehash.Num(v[2]),
		AdmittedPosition: salehash.Num(v[4]), ExpiredPosition: salehash.Num(v[5]), RatePerMinute: salehash.Num(v[6]), MaxNumber: salehash.Num(v[7])}
	q.Entrants = q.PrequeueEntrants + salehash.Num(v[3])
	if sha, ok := v[8].(string); ok {
		q.SeedSHA256 = sha
	}
	if q.RatePerMinute > 0 {
		eta := max(q.Entrants-q.AdmittedPosition, 0) * 60 / q.RatePerMinute
		q.ETASeconds = &eta
	}
	return q, nil
}
