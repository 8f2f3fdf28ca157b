// Package inventory is the only writer of stock. Its Service runs the lua
// Reserve and Release scripts on the Redis primary, so that checking a sale,
// taking its units and enqueueing the order are one atomic step. NewHandler and
// Client carry the same two calls over HTTP when the gateway and the inventory
// tier run as separate processes.
package inventory

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
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
	errPaused     = fmt.Errorf("reserving: sale paused for a rebuild: %w", flashgate.ErrUnavailable)
	errSoldOut    = fmt.Errorf("reserving: %w", flashgate.ErrSoldOut)
	errUnadmitted = fmt.Errorf("reserving: %w", flashgate.ErrNotAdmitted)
	errQtyPerUser = fmt.Errorf("reserving: %w", &flashgate.FieldError{Field: "quantity", Reason: "outside 1..per_user"})
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
	// WaitReplicas, when > 0, makes Reserve send `WAIT WaitReplicas
	// WaitTimeout` on the same connection right after the script (in a
	// cluster, on the connection to the sale's primary), so that a
	// reservation answered with an order id has reached that many replicas.
	// When WAIT falls short, Reserve answers ErrUnavailable instead: the
	// reservation stands in Redis, and the buyer's retry finds it as
	// ErrAlreadyPurchased with its order id. Zero: no WAIT.
	WaitReplicas int
	// WaitTimeout bounds the WAIT; keep it below the Redis client's read
	// timeout. Zero means DefaultWaitTimeout (only used when WaitReplicas
	// > 0).
	WaitTimeout time.Duration
	// Metrics, when set, receives flashgate_reserve_total{outcome} and
	// flashgate_redis_call_seconds{op}. Nil: no metrics.
	Metrics prometheus.Registerer
	// NoAutoPipeline turns off go-redis's automatic pipelining of concurrent
	// reserves. By default, when primary is a *redis.Client or a
	// *redis.ClusterClient (which groups each batch by slot) and WaitReplicas
	// is 0, reserves running at the same time share one pipelined round trip
	// (each still one atomic script); the pipeliner belongs to the client and
	// closes with it. With WaitReplicas the pipeliner is never used: it would
	// send WAIT on another connection than the write's.
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
	waitReplicas int
	waitMillis   int64
	m            *metrics // nil without Config.Metrics

	layoutMu sync.RWMutex
	layouts  map[string]lua.Layout // sale → its fixed bucket layout

	batchMax      int // Config.MaxReserveBatch; 1: no batching
	batchInFlight int // Config.ReserveCallsInFlight

	batchMu sync.Mutex
	lanes   map[string]*lane // tag → its batches; guarded by batchMu
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
	s.waitMillis = cfg.WaitTimeout.Milliseconds()
	if s.waitMillis < 1 {
		s.waitMillis = 1 // WAIT 0 would block forever
	}
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

// Reserve takes qty units of sale saleID for userID and enqueues the order,
// returning its id. Errors are flashgate sentinels: ErrNotFound (unknown or
// malformed sale), ErrNotStarted, ErrClosed, ErrSoldOut, a
// *flashgate.PurchasedError carrying the user's live order, ErrBadRequest
// (bad user id or quantity) and ErrUnavailable (Redis unreachable).
func (s *Service) Reserve(ctx context.Context, saleID, userID string, qty int64) (string, error) {
	return s.reserve(ctx, "", saleID, userID, qty)
}

// ReserveOrder is Reserve with an order id the caller minted, so that a
// call whose answer was lost can be sent again: a second call with the same
// order id finds the first one's reservation and answers it as its own
// (never a second reservation). orderID must satisfy
// flashgate.ValidOrderID, or the error wraps ErrBadRequest.
func (s *Service) ReserveOrder(ctx context.Context, orderID, saleID, userID string, qty int64) (string, error) {
	if !flashgate.ValidOrderID(orderID) {
		s.m.outcome(outBadRequest)
		return "", errBadOrderID
	}
	return s.reserve(ctx, orderID, saleID, userID, qty)
}

// reserve is Reserve and ReserveOrder; an empty orderID is minted here.
func (s *Service) reserve(ctx context.Context, orderID, saleID, userID string, qty int64) (string, error) {
	if !flashgate.ValidSaleID(saleID) {
		s.m.outcome(outNotFound)
		return "", errBadSaleID
	}
	if !flashgate.ValidUserID(userID) {
		s.m.outcome(outBadRequest)
		return "", errBadUserID
	}
	if qty < 1 {
		s.m.outcome(outBadRequest)
		return "", errBadQty
	}
	if orderID == "" {
		orderID = s.newID()
	}
	l, err := s.layout(ctx, saleID)
	if err != nil {
		s.m.outcome(outError)
		return "", err
	}
	now := s.clock.Now().UnixMilli()
	// A buyer of a bucketed sale reserves in their home bucket only, so
	// that one live order per user stays one atomic script; a sold-out
	// answer there also counts the bucket's "want" (reserve.lua).
	tag, home := saleID, 0
	if l.Bucketed() {
		home = l.Home(userID)
		tag = l.Tag(home)
	}
	var code int64
	var existing string
	if s.batchMax > 1 {
		code, existing, err = s.reserveBatched(ctx, tag, saleID, bucketArg(l.Bucketed(), home), orderID, userID, qty)
	} else {
		args := []any{orderID, userID, qty, now, saleID}
		if l.Bucketed() {
			args = append(args, home)
		}
		code, existing, err = s.reserveIn(ctx, "reserving", lua.ReserveKeys(tag), args...)
	}
	if err != nil {
		return "", err
	}
	switch {
	case code == lua.ReserveOK:
		s.m.outcome(outOK)
		return orderID, nil
	case code == lua.ReservePurchased:
		// A retried call whose first attempt had reserved finds its own
		// order; on a bucketed sale the entry may be a spill's marker.
		return s.purchased(existing, orderID)
	case code == lua.ReserveSoldOut && l.Bucketed():
		// The end game: another bucket may still have units.
		return s.spill(ctx, l, home, orderID, userID, qty, now)
	}
	return s.answer(code)
}

// answer maps a refusing reserve code (not OK, not purchased) to its error.
func (s *Service) answer(code int64) (string, error) {
	switch code {
	case lua.ReserveNoSale:
		s.m.outcome(outNotFound)
		return "", errNoSale
	case lua.ReserveNotStarted:
		s.m.outcome(outNotStarted)
		return "", errNotStarted
	case lua.ReserveClosed:
		s.m.outcome(outClosed)
		return "", errClosed
	case lua.ReserveSoldOut:
		s.m.outcome(outSoldOut)
		return "", errSoldOut
	case lua.ReserveBadQuantity:
		s.m.outcome(outBadRequest)
		return "", errQtyPerUser
	case lua.ReservePaused:
		s.m.outcome(outPaused)
		return "", errPaused
	case lua.ReserveNotAdmitted:
		s.m.outcome(outNotAdmitted)
		return "", errUnadmitted
	default:
		s.m.outcome(outError)
		return "", fmt.Errorf("reserving: unknown script code %d", code)
	}
}

// reserveIn runs lua.Reserve on keys (what names the step in errors) and
// returns its code and the existing order it names; a failed call or an
// answer it cannot read counts as an error outcome.
func (s *Service) reserveIn(ctx context.Context, what string, keys []string, args ...any) (code int64, existing string, err error) {
	start := time.Now()
	res, acked, err := s.runReserve(ctx, lua.Reserve, keys, args...)
	s.m.call(opReserve, start)
	if err != nil {
		s.m.outcome(outError)
		return 0, "", s.redisError(what, err)
	}
	code, existing, ok := reserveResult(res)
	if !ok {
		s.m.outcome(outError)
		return 0, "", fmt.Errorf("%s: unexpected script answer %v", what, res)
	}
	order, _ := args[0].(string)
	sale, _ := args[4].(string)
	if err := s.confirm(ctx, sale, acked, code, existing, order); err != nil {
		s.m.outcome(outError)
		return 0, "", err
	}
	return code, existing, nil
}

// runReserve runs script (lua.Reserve or lua.ReserveMany) and, when
// WaitReplicas is set, WAIT on the same connection; acked is the number of
// replicas WAIT counted (0 when WAIT failed), or -1 without WAIT.
func (s *Service) runReserve(ctx context.Context, script *redis.Script, keys []string, args ...any) (res any, acked int64, err error) {
	if s.waitReplicas <= 0 {
		res, err = script.Run(ctx, s.scripter, keys, args...).Result()
		return res, -1, err
	}
	// A pipeline holds one connection for all its commands, and WAIT counts
	// the writes of its own connection. In a cluster the pipeline must go
	// to the sale's master itself, or WAIT would go to a random node.
	var node redis.Cmdable = s.rdb
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		c, err := cc.MasterForKey(ctx, keys[0])
		if err != nil {
			return nil, 0, err
		}
		node = c
	}
	for attempt := 0; ; attempt++ {
		pipe := node.Pipeline()
		var cmd *redis.Cmd
		if attempt == 0 {
			cmd = script.EvalSha(ctx, pipe, keys, args...)
		} else {
			cmd = script.Eval(ctx, pipe, keys, args...)
		}
		wait := pipe.Do(ctx, "WAIT", s.waitReplicas, s.waitMillis)
		start := time.Now()
		_, _ = pipe.Exec(ctx)
		s.m.call(opWait, start)
		res, err := cmd.Result()
		if attempt == 0 && redis.HasErrorPrefix(err, "NOSCRIPT") {
			continue
		}
		if err != nil {
			return nil, 0, err
		}
		n, werr := wait.Int64()
		if werr != nil {
			s.log.WarnContext(ctx, "WAIT after a reserve failed", "err", werr)
			n = 0
		}
		return res, n, nil
	}
}

// errWaitShort answers a reserve that WAIT could not confirm on enough
// replicas: the order stands in Redis but might not survive a failover, so
// the buyer hears 503 and their retry finds it (ErrAlreadyPurchased).
var errWaitShort = fmt.Errorf("reserving: not on enough replicas: %w", flashgate.ErrUnavailable)

// reserveResult unpacks the {code, order id} answer of lua.Reserve.
func reserveResult(res any) (code int64, orderID string, ok bool) {
	vals, isSlice := res.([]any)
	if !isSlice || len(vals) != 2 {
		return 0, "", false
	}
	code, ok1 := vals[0].(int64)
	orderID, ok2 := vals[1].(string)
	return code, orderID, ok1 && ok2
}

// Release gives the units of order o back to its sale, once. It reports
// whether this call released them: a second release of the same order, or a
// sale Redis no longer holds (a later re-sync from the database fixes Redis),
// returns false and no error.
func (s *Service) Release(ctx context.Context, o flashgate.Order) (bool, error) {
	if !flashgate.ValidSaleID(o.SaleID) {
		return false, fmt.Errorf("releasing: sale id: %w", flashgate.ErrNotFound)
	}
	if o.ID == "" || o.UserID == "" || o.Quantity < 1 {
		return false, fmt.Errorf("releasing: %w", &flashgate.FieldError{Field: "order", Reason: "needs order_id, user_id and quantity >= 1"})
	}
	tag, err := s.tagOf(ctx, o.SaleID, o.Bucket)
	if err != nil {
		return false, err
	}
	keys := lua.ReleaseKeys(tag)
	start := time.Now()
	code, err := lua.Release.Run(ctx, s.rdb, keys, o.ID, o.UserID, o.Quantity).Int64()
	s.m.call(opRelease, start)
	if err != nil {
		return false, s.redisError("releasing", err)
	}
	if code != lua.ReleaseDone && code != lua.ReleaseAlready && code != lua.ReleaseNoSale {
		return false, fmt.Errorf("releasing: unknown script code %d", code)
	}
	// A spilled order's home marker goes after its units are back: a
	// crash in between keeps the user out of the home bucket until the
	// re-sync delivers the release again, never lets them hold two orders.
	if l, err := s.layout(ctx, o.SaleID); err != nil {
		return false, err
	} else if l.Bucketed() {
		if err := s.unmark(ctx, l, []flashgate.Order{o}); err != nil {
			return false, err
		}
	}
	switch code {
	case lua.ReleaseDone:
		return true, nil
	case lua.ReleaseAlready:
		return false, nil
	default:
		s.log.DebugContext(ctx, "release of an order whose sale is not in redis", "sale", o.SaleID, "order", o.ID)
		return false, nil
	}
}

// MaxReleaseBatch is the most orders one ReleaseBatch script call carries;
// longer lists take several calls, so no call holds Redis for long.
const MaxReleaseBatch = 500

// ReleaseBatch gives the units of many orders back, each once, with one
// script call per sale and per MaxReleaseBatch orders (lua.ReleaseBatch). It
// returns how many orders this call released; orders released before, and
// orders of a sale Redis no longer holds (a later re-sync from the database
// fixes Redis), are skipped without error. An order without id, user or a
// quantity >= 1 is skipped too and reported, with ErrBadRequest, in the
// error, after the others were released; a Redis failure stops the call.
func (s *Service) ReleaseBatch(ctx context.Context, orders []flashgate.Order) (released int, err error) {
	var bad error
	var spilled map[string][]flashgate.Order // sale → its bucketed orders (unmark skips the unspilled)
	bySale := make(map[string][]any)
	var sales []string
	for _, o := range orders {
		if !flashgate.ValidSaleID(o.SaleID) || o.ID == "" || o.UserID == "" || o.Quantity < 1 {
			if bad == nil {
				bad = fmt.Errorf("releasing order %q: %w", o.ID, &flashgate.FieldError{Field: "order", Reason: "needs a sale id, order_id, user_id and quantity >= 1"})
			}
			continue
		}
		// Each order goes back to its own bucket (the sale's own keys when
		// unbucketed).
		tag, err := s.tagOf(ctx, o.SaleID, o.Bucket)
		if errors.Is(err, errBadBucket) {
			if bad == nil {
				bad = fmt.Errorf("releasing order %q: %w", o.ID, err)
			}
			continue
		}
		if err != nil {
			return released, err
		}
		if _, ok := bySale[tag]; !ok {
			sales = append(sales, tag)
		}
		if tag != o.SaleID {
			if spilled == nil {
				spilled = make(map[string][]flashgate.Order)
			}
			spilled[o.SaleID] = append(spilled[o.SaleID], o)
		}
		bySale[tag] = append(bySale[tag], o.ID, o.UserID, o.Quantity)
	}
	for _, sale := range sales {
		keys := lua.ReleaseKeys(sale)
		args := bySale[sale]
		for start := 0; start < len(args); start += 3 * MaxReleaseBatch {
			chunk := args[start:min(start+3*MaxReleaseBatch, len(args))]
			call := make([]any, 0, 1+len(chunk))
			call = append(call, "")
			call = append(call, chunk...)
			t := time.Now()
			res, err := lua.ReleaseBatch.Run(ctx, s.rdb, keys, call...).Int64Slice()
			s.m.call(opRelease, t)
			if err != nil {
				return released, s.redisError("releasing", err)
			}
			if len(res) != 3 {
				return released, fmt.Errorf("releasing: unexpected script answer %v", res)
			}
			switch res[0] {
			case lua.ReleaseBatchDone:
				released += int(res[1])
			case lua.ReleaseBatchNoSale:
				s.log.DebugContext(ctx, "release of orders whose sale is not in redis", "sale", sale, "orders", len(chunk)/3)
			default:
				return released, fmt.Errorf("releasing: unknown script code %d", res[0])
			}
		}
	}
	// Spilled orders' home markers go once their units are back.
	for sale, os := range spilled {
		l, err := s.layout(ctx, sale)
		if err != nil {
			return released, err
		}
		if err := s.unmark(ctx, l, os); err != nil {
			return released, err
		}
	}
	return released, bad
}

// Ping reports whether the Redis primary answers.
func (s *Service) Ping(ctx context.Context) error {
	start := time.Now()
	err := s.rdb.Ping(ctx).Err()
	s.m.call(opPing, start)
	if err != nil {
		return fmt.Errorf("pinging redis: %w (%w)", flashgate.ErrUnavailable, err)
	}
	return nil
}

// redisError classifies a failed Redis call. Connection failures, timeouts,
// cancellations and the server's "cannot serve now" answers are
// ErrUnavailable; other server errors (a script bug, a wrong key type) are
// internal and keep no sentinel. Either way the Redis text stays in the
// error for logs; clients only ever see flashgate.ErrorStatus's code.
func (s *Service) redisError(op string, err error) error {
	var rerr redis.Error
	if errors.As(err, &rerr) && !unavailableReply(rerr.Error()) {
		s.log.Error("redis error", "op", op, "err", err)
		return fmt.Errorf("%s: %w", op, err)
	}
	return fmt.Errorf("%s: %w (%w)", op, flashgate.ErrUnavailable, err)
}

// unavailableReply reports whether a Redis error reply means the server
// cannot serve writes right now rather than that the call is wrong.
func unavailableReply(msg string) bool {
	for _, p := range [...]string{"LOADING", "BUSY", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "OOM", "NOREPLICAS", "MOVED", "ASK", "ERR max number of clients"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}
