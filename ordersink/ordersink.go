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
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/lua"
)

// Store is where orders go; *sqldb.DB satisfies it.
type Store interface {
	// InsertOrders stores the orders in one transaction, skipping any that
	// are stored already, and returns how many rows it inserted.
	InsertOrders(ctx context.Context, orders []flashgate.Order) (inserted int, err error)
}

// Config tunes a Drainer. The zero value works.
type Config struct {
	// Consumer is this drainer's name in the consumer group; default the
	// host name, which survives a restart. A drainer that restarts under the
	// same name re-reads its own pending entries at once; under another name
	// they are claimed by a live drainer after ClaimIdle. Two drainers that
	// share a name are safe (inserts are idempotent) but may store the same
	// entries twice over; give each its own.
	Consumer string
	// Batch is the most entries read from one stream, and orders inserted,
	// at once; default 1024. A poll reads what the stream holds up to Batch,
	// so batches grow only while the stream is busy, where each commit's
	// cost is shared by more orders.
	Batch int
	// Block is how long Run pauses after a poll that found no new entries:
	// the longest an idle drainer takes to see a new one; default 50ms.
	Block time.Duration
	// Linger is how long Run lets pass between the starts of two polls
	// when the first read entries but filled no batch: the stream is busy,
	// and waiting for more shares each commit's cost (a transaction, a
	// commit, a round trip per command) among more orders; a poll that
	// fills a batch is followed by the next at once. It adds at most Linger
	// to the time an order takes to reach the database (buyers are answered
	// at reserve time, before). Default 50ms, as Block; a negative value
	// turns it off.
	Linger time.Duration
	// ClaimIdle is how long an entry must have sat unacknowledged in another
	// consumer before it is claimed (XAUTOCLAIM); default 30s.
	ClaimIdle time.Duration
	// RefreshSales is how often Run re-reads the set of sales to learn new
	// sale streams; default 1s.
	RefreshSales time.Duration
	// BackoffMin and BackoffMax bound the wait between retries while the
	// database or Redis fails; defaults 50ms and 2s.
	BackoffMin, BackoffMax time.Duration
	// Logger receives warnings and errors; default slog.Default().
	Logger *slog.Logger
	// Clock tells the time for lag figures; default flashgate.SystemClock.
	Clock flashgate.Clock
	// WaitReplicas is how many replicas must hold a batch before it is
	// committed: the drainer re-claims the batch's entries (XCLAIM JUSTID, a
	// write replicated after the entries themselves) and sends `WAIT n
	// WaitTimeout` on that same connection to the stream's primary. When
	// fewer replicas acknowledge, the batch is not committed: it stays
	// pending and is tried again after a backoff.
	//
	// Default (0, WaitAuto): n is the number of replicas the stream's
	// primary reports online (INFO replication, sent with the re-claims, in
	// the same round trip); a lagging replica holds the commit. A primary
	// without replicas needs no WAIT and is asked again at most once a
	// second (a replica that came online within that second may miss a
	// batch); a store that cannot tell (miniredis) is taken to have none. A
	// number > 0 waits for exactly that many; WaitOff (< 0) never waits.
	WaitReplicas int
	// WaitTimeout bounds each WAIT; default 500ms.
	WaitTimeout time.Duration
	// Metrics, when set, receives flashgate_sink_orders_total,
	// flashgate_sink_batches_total{result}, flashgate_sink_lag_seconds,
	// flashgate_sink_backlog and flashgate_sink_dead_letters_total{sale};
	// default none.
	Metrics prometheus.Registerer
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
	// replicas (WaitAuto); blind is set once the drainer has noted that
	// the store cannot tell. Only passes use them, under mu.
	replicas map[string]replicaCount
	blind    bool

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

// A stream whose last quietAfter polls found nothing is polled only every
// quietEvery-th poll (about once a second at the default Block), so that
// the sales of the past, which stay in the set of sales, cost Redis little;
// a busy stream is polled every time.
const (
	quietAfter = 20
	quietEvery = 20
)

// New returns a Drainer reading with rdb (a *redis.Client, or a
// *redis.ClusterClient for a cluster), best a client of its own: each WAIT
// holds a connection for up to WaitTimeout.
func New(rdb redis.UniversalClient, store Store, cfg Config) *Drainer {
	if cfg.Consumer == "" {
		cfg.Consumer = DefaultConsumer("")
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 1024
	}
	if cfg.Block <= 0 {
		cfg.Block = 50 * time.Millisecond
	}
	if cfg.Linger == 0 {
		cfg.Linger = 50 * time.Millisecond
	}
	if cfg.WaitTimeout <= 0 {
		cfg.WaitTimeout = 500 * time.Millisecond
	}
	if cfg.ClaimIdle <= 0 {
		cfg.ClaimIdle = 30 * time.Second
	}
	if cfg.RefreshSales <= 0 {
		cfg.RefreshSales = time.Second
	}
	if cfg.BackoffMin <= 0 {
		cfg.BackoffMin = 50 * time.Millisecond
	}
	if cfg.BackoffMax < cfg.BackoffMin {
		cfg.BackoffMax = max(2*time.Second, cfg.BackoffMin)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = flashgate.SystemClock{}
	}
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
func (d *Drainer) Run(ctx context.Context) error {
	wait := d.cfg.BackoffMin
	for ctx.Err() == nil {
		_, err := d.pass(ctx, true)
		if err == nil || isStoreError(err) {
			wait = d.cfg.BackoffMin
			continue
		}
		if ctx.Err() != nil {
			break
		}
		d.log.Warn("draining failed; retrying", "err", err, "wait", wait)
		if !sleep(ctx, wait) {
			break
		}
		wait = min(2*wait, d.cfg.BackoffMax)
	}
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

// Backlog returns the number of reserved orders not yet in the database:
// the sum of the lengths of the sale streams (committed entries are removed).
func (d *Drainer) Backlog(ctx context.Context) (int64, error) {
	sales, err := d.rdb.SMembers(ctx, lua.SalesKey()).Result()
	if err != nil {
		return 0, fmt.Errorf("ordersink: listing sales: %w", err)
	}
	n, err := d.backlog(ctx, sales)
	if err != nil {
		return 0, fmt.Errorf("ordersink: backlog: %w", err)
	}
	return n, nil
}

func (d *Drainer) backlog(ctx context.Context, sales []string) (int64, error) {
	lens, err := d.streamLens(ctx, sales)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, l := range lens {
		n += l
	}
	return n, nil
}

// streamLens returns the length of each sale's stream, by one pipeline of
// XLEN.
func (d *Drainer) streamLens(ctx context.Context, sales []string) ([]int64, error) {
	if len(sales) == 0 {
		return nil, nil
	}
	cmds := make([]*redis.IntCmd, len(sales))
	_, err := d.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, s := range sales {
			cmds[i] = p.XLen(ctx, lua.OrdersKey(s))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	lens := make([]int64, len(cmds))
	for i, c := range cmds {
		lens[i] = c.Val()
	}
	return lens, nil
}

// pass drains every sale stream once. Blocking passes (Run) poll each stream
// for new entries once, pausing for Block when none came, and re-read
// pending lists and claim only when needed; non-blocking passes (DrainOnce)
// do all and read until the streams are empty.
func (d *Drainer) pass(ctx context.Context, blocking bool) (total int, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	defer func() {
		if err != nil {
			// Whatever was read and not acknowledged is in this consumer's
			// pending list: read it again first next time.
			for _, s := range d.sales {
				d.needPending[s] = true
			}
			if isNoGroup(err) {
				clear(d.groups)
			}
		}
	}()
	if err := d.refresh(ctx, !blocking); err != nil {
		return 0, err
	}
	if len(d.sales) == 0 {
		if blocking {
			sleep(ctx, d.cfg.Block)
		}
		return 0, nil
	}
	for _, s := range d.sales {
		if err := d.ensureGroup(ctx, s); err != nil {
			return 0, err
		}
	}
	// One sale whose orders the store fails does not hold up the others:
	// its error is kept (and returned, so that Run backs off) and the pass
	// goes on; any other error (Redis) ends the pass.
	var failed []error
	defer func() {
		if len(failed) > 0 {
			err = errors.Join(append(failed, err)...)
		}
	}()
	// A blocking pass leaves alone the sales whose backoff (backOff) has
	// not ended when it starts; a sale whose backoff ends now is tried
	// whole: its pending entries, and its new ones even if those fail.
	var skip map[string]bool
	if blocking && len(d.retry) > 0 {
		skip = map[string]bool{}
		for s, r := range d.retry {
			if time.Now().Before(r.at) {
				skip[s] = true
			}
		}
	}
	for _, s := range d.sales {
		if blocking && (!d.needPending[s] || skip[s]) {
			continue
		}
		n, err := d.drainPending(ctx, s)
		total += n
		if isStoreError(err) {
			failed = append(failed, err)
			continue
		}
		if err != nil {
			return total, err
		}
		delete(d.needPending, s)
	}
	now := time.Now()
	if !blocking || now.Sub(d.claimedAt) >= min(d.cfg.ClaimIdle/2, time.Second) {
		for _, s := range d.sales {
			if skip[s] {
				continue
			}
			n, err := d.claim(ctx, s)
			total += n
			if isStoreError(err) {
				failed = append(failed, err)
				continue
			}
			if err != nil {
				return total, err
			}
		}
		d.claimedAt = now
	}
	// A blocking pass polls once; DrainOnce reads what the streams held when
	// it started (the longest, in Batch-sized reads, plus one read to see
	// them empty), not what keeps arriving.
	rounds := 1
	if !blocking {
		longest, err := d.longestStream(ctx)
		if err != nil {
			return total, err
		}
		rounds = int(longest/int64(d.cfg.Batch)) + 2
	}
	for round := 0; round < rounds; round++ {
		polled := time.Now()
		read, full, n, err := d.readNew(ctx, !blocking, skip)
		total += n
		if isStoreError(err) {
			failed = append(failed, err)
			continue
		}
		if err != nil {
			return total, err
		}
		if read == 0 {
			if blocking {
				sleep(ctx, d.cfg.Block)
			}
			break
		}
		if wait := d.cfg.Linger - time.Since(polled); blocking && !full && wait > 0 {
			sleep(ctx, wait)
		}
	}
	return total, nil
}

// longestStream returns the length of the longest sale stream.
func (d *Drainer) longestStream(ctx context.Context) (int64, error) {
	lens, err := d.streamLens(ctx, d.sales)
	if err != nil {
		return 0, fmt.Errorf("ordersink: XLEN: %w", err)
	}
	var longest int64
	for _, l := range lens {
		longest = max(longest, l)
	}
	return longest, nil
}

// refresh re-reads the set of sales when RefreshSales has passed, or always
// when force is set, and then updates the backlog gauge.
func (d *Drainer) refresh(ctx context.Context, force bool) error {
	now := time.Now()
	if !force && d.sales != nil && now.Sub(d.salesAt) < d.cfg.RefreshSales {
		return nil
	}
	sales, err := d.rdb.SMembers(ctx, lua.SalesKey()).Result()
	if err != nil {
		return fmt.Errorf("ordersink: listing sales: %w", err)
	}
	if sales == nil {
		sales = []string{}
	}
	for _, s := range sales {
		if !contains(d.sales, s) {
			d.needPending[s] = true
		}
	}
	for s := range d.quiet {
		if !contains(sales, s) {
			delete(d.quiet, s)
		}
	}
	for s := range d.failed {
		if !contains(sales, s) {
			delete(d.failed, s)
		}
	}
	for s := range d.suspect {
		if !contains(sales, s) {
			delete(d.suspect, s)
		}
	}
	for s := range d.retry {
		if !contains(sales, s) {
			delete(d.retry, s)
		}
	}
	d.sales, d.salesAt = sales, now
	if d.m != nil {
		n, err := d.pendingHere(ctx, sales)
		if err != nil {
			return fmt.Errorf("ordersink: pending entries: %w", err)
		}
		d.m.setBacklog(n)
	}
	return nil
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// ensureGroup creates the sink's consumer group on a sale stream (and the
// stream) unless it is known to exist; a Redis that lost its data gets it
// back after the first NOGROUP.
func (d *Drainer) ensureGroup(ctx context.Context, sale string) error {
	if d.groups[sale] {
		return nil
	}
	err := d.rdb.XGroupCreateMkStream(ctx, lua.OrdersKey(sale), lua.SinkGroup, "0").Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("ordersink: creating group on %s: %w", lua.OrdersKey(sale), err)
	}
	d.groups[sale] = true
	return nil
}

func isNoGroup(err error) bool {
	return err != nil && strings.Contains(err.Error(), "NOGROUP")
}

// batch is entries read from one sale's stream.
type batch struct {
	sale string
	msgs []redis.XMessage
}

// drainPending re-reads the entries delivered to this consumer and never
// acknowledged, and stores them.
func (d *Drainer) drainPending(ctx context.Context, sale string) (int, error) {
	key := lua.OrdersKey(sale)
	total := 0
	// Each round acknowledges what it read, so the pending list shrinks;
	// the bound only guards against a list that never does.
	for round := 0; round < 1000; round++ {
		res, err := d.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group: lua.SinkGroup, Consumer: d.cfg.Consumer,
			Streams: []string{key, "0"}, Count: int64(d.cfg.Batch), Block: -1,
		}).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return total, fmt.Errorf("ordersink: reading pending entries of %s: %w", key, err)
		}
		if len(res) == 0 || len(res[0].Messages) == 0 {
			delete(d.failed, sale)
			delete(d.suspect, sale)
			delete(d.retry, sale)
			return total, nil
		}
		n, err := d.commit(ctx, []batch{{sale, res[0].Messages}})
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// claim takes over entries idle for longer than ClaimIdle in other
// consumers (dead ones, presumably) and stores them.
func (d *Drainer) claim(ctx context.Context, sale string) (int, error) {
	key := lua.OrdersKey(sale)
	total, start := 0, "0-0"
	for round := 0; round < 1000; round++ {
		msgs, next, err := d.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{
			Stream: key, Group: lua.SinkGroup, Consumer: d.cfg.Consumer,
			MinIdle: d.cfg.ClaimIdle, Start: start, Count: int64(d.cfg.Batch),
		}).Result()
		if err != nil {
			return total, fmt.Errorf("ordersink: claiming entries of %s: %w", key, err)
		}
		if len(msgs) > 0 {
			d.log.Info("claimed idle entries", "stream", key, "entries", len(msgs))
			n, err := d.commit(ctx, []batch{{sale, msgs}})
			total += n
			if err != nil {
				return total, err
			}
		}
		if next == "0-0" || next == "" {
			return total, nil
		}
		start = next
	}
	return total, nil
}

// readNew reads up to Batch entries never delivered to any consumer from
// each sale's stream (all, or only those not quiet, see quietAfter, and not
// in skip), each
// stream by its own XREADGROUP (a cluster refuses one read over keys of
// several slots), all in one pipeline: one round trip per node. It stores
// what it read and reports how many entries it read, whether a stream
// filled a batch, and how many it stored.
func (d *Drainer) readNew(ctx context.Context, all bool, skip map[string]bool) (read int, full bool, stored int, err error) {
	d.polls++
	d.pollsSeen.Add(1)
	sales := d.sales
	if !all && (d.polls%quietEvery != 0 || len(skip) > 0) {
		every := d.polls%quietEvery == 0
		sales = make([]string, 0, len(d.sales))
		for _, s := range d.sales {
			if (every || d.quiet[s] < quietAfter) && !skip[s] {
				sales = append(sales, s)
			}
		}
	}
	cmds := make([]*redis.XStreamSliceCmd, len(sales))
	_, _ = d.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, s := range sales {
			cmds[i] = p.XReadGroup(ctx, &redis.XReadGroupArgs{
				Group: lua.SinkGroup, Consumer: d.cfg.Consumer,
				Streams: []string{lua.OrdersKey(s), ">"}, Count: int64(d.cfg.Batch), Block: -1,
			})
		}
		return nil
	})
	var batches []batch
	var first error
	for i, c := range cmds {
		res, err := c.Result()
		if errors.Is(err, redis.Nil) {
			d.quiet[sales[i]]++
			continue
		}
		if err != nil {
			if first == nil {
				first = fmt.Errorf("ordersink: reading new entries of %s: %w", lua.OrdersKey(sales[i]), err)
			}
			continue
		}
		if len(res) > 0 && len(res[0].Messages) > 0 {
			batches = append(batches, batch{sales[i], res[0].Messages})
			read += len(res[0].Messages)
			full = full || len(res[0].Messages) >= d.cfg.Batch
			d.quiet[sales[i]] = 0
		} else {
			d.quiet[sales[i]]++
		}
	}
	// What was read is in this consumer's pending list whatever else failed:
	// store it now rather than after a backoff.
	stored, err = d.commit(ctx, batches)
	if err == nil {
		err = first
	}
	if err != nil && ctx.Err() != nil && read == 0 {
		return 0, false, 0, nil
	}
	return read, full, stored, err
}

// commit makes sure the batches reached the replicas, when configured, and
// then stores them.
func (d *Drainer) commit(ctx context.Context, batches []batch) (int, error) {
	if len(batches) == 0 {
		return 0, nil
	}
	if err := d.awaitReplicas(ctx, batches); err != nil {
		if errors.Is(err, ErrReplicasBehind) {
			d.m.batch("replicas_behind")
		}
		return 0, err
	}
	total := 0
	var failed []error
	for _, b := range batches {
		n, err := d.process(ctx, b.sale, b.msgs)
		total += n
		if isStoreError(err) {
			failed = append(failed, err)
			continue
		}
		if err != nil {
			return total, errors.Join(append(failed, err)...)
		}
	}
	return total, errors.Join(failed...)
}

// awaitReplicas returns nil once the replicas it waits for (WaitReplicas)
// hold everything the batches hold, or at once when there are none. On each
// primary concerned it re-claims the batches' entries for this consumer
// (XCLAIM JUSTID: a write, replicated after the entries themselves, which
// sets the connection's replication offset even when the entries were read
// by an earlier connection or process) and then sends WAIT on that same
// connection. Replication is ordered: once a replica acknowledged the
// XCLAIM it holds the entries.
func (d *Drainer) awaitReplicas(ctx context.Context, batches []batch) error {
	if d.cfg.WaitReplicas < 0 {
		return nil
	}
	type nodeBatches struct {
		node *redis.Client
		bs   []batch
	}
	var nodes []*nodeBatches
	for _, b := range batches {
		node, err := d.primaryFor(ctx, lua.OrdersKey(b.sale))
		if err != nil {
			return err
		}
		i := slices.IndexFunc(nodes, func(n *nodeBatches) bool { return n.node == node })
		if i < 0 {
			nodes = append(nodes, &nodeBatches{node: node})
			i = len(nodes) - 1
		}
		nodes[i].bs = append(nodes[i].bs, b)
	}
	for _, n := range nodes {
		if d.cfg.WaitReplicas == WaitAuto {
			// A primary that had no replica a moment ago is not asked
			// again for every batch; one that had is, in waitOn.
			had, err := d.onlineReplicas(ctx, n.node)
			if err != nil {
				return err
			}
			if had == 0 {
				continue
			}
		}
		if err := d.waitOn(ctx, n.node, n.bs); err != nil {
			return err
		}
	}
	return nil
}

// waitOn re-claims the batches' entries and sends WAIT on one connection of
// node. With WaitAuto the re-claims' pipeline also reads INFO replication,
// so the WAIT asks for the replicas the primary has online now (none: no
// WAIT), at no extra round trip.
func (d *Drainer) waitOn(ctx context.Context, node *redis.Client, bs []batch) error {
	conn := node.Conn()
	defer conn.Close()
	want := d.cfg.WaitReplicas
	var info *redis.StringCmd
	_, err := conn.Pipelined(ctx, func(p redis.Pipeliner) error {
		if want == WaitAuto {
			info = p.Info(ctx, "replication")
		}
		for _, b := range bs {
			ids := make([]string, len(b.msgs))
			for i, m := range b.msgs {
				ids[i] = m.ID
			}
			p.XClaimJustID(ctx, &redis.XClaimArgs{
				Stream: lua.OrdersKey(b.sale), Group: lua.SinkGroup, Consumer: d.cfg.Consumer,
				MinIdle: 0, Messages: ids,
			})
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("ordersink: re-claiming a batch before WAIT: %w", err)
	}
	if info != nil {
		want = countOnline(info.Val())
		d.noteReplicas(node.Options().Addr, want)
		if want == 0 {
			return nil
		}
	}
	// A WAIT of its own, not in the pipeline: go-redis gives it a read
	// deadline of WaitTimeout plus a margin, whatever the client's.
	acked, err := conn.Wait(ctx, want, d.cfg.WaitTimeout).Result()
	if err != nil {
		return fmt.Errorf("ordersink: WAIT: %w", err)
	}
	if acked < int64(want) {
		return fmt.Errorf("%w: %d of %d replicas within %v; not committing %d streams' batches yet",
			ErrReplicasBehind, acked, want, d.cfg.WaitTimeout, len(bs))
	}
	return nil
}

// primaryFor returns the client of the primary that holds key: the client
// itself, or for a cluster the master of key's slot.
func (d *Drainer) primaryFor(ctx context.Context, key string) (*redis.Client, error) {
	switch c := d.rdb.(type) {
	case *redis.Client:
		return c, nil
	case *redis.ClusterClient:
		n, err := c.MasterForKey(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("ordersink: finding the primary of %s: %w", key, err)
		}
		return n, nil
	}
	return nil, fmt.Errorf("ordersink: WAIT needs a *redis.Client or *redis.ClusterClient, not %T", d.rdb)
}

// deadEntry is an entry the drainer cannot store, and why.
type deadEntry struct {
	msg    redis.XMessage
	reason string
}

// splitAfter is how many failed inserts in a row of one batch make the
// drainer store its orders one at a time, so that one order the store
// fails without calling it a refusal holds up only itself.
const splitAfter = 3

// storeError is a failure of the store (not of Redis) for one sale's
// batch: the pass goes on with the other sales.
type storeError struct{ err error }

func (e *storeError) Error() string { return e.err.Error() }
func (e *storeError) Unwrap() error { return e.err }

// isStoreError reports whether err is one or more storeErrors and nothing
// else.
func isStoreError(err error) bool {
	if err == nil {
		return false
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if !isStoreError(e) {
				return false
			}
		}
		return true
	}
	var se *storeError
	return errors.As(err, &se)
}

// process stores the orders of msgs, read from sale's stream, and only then
// acknowledges and removes their entries (ackDel). Malformed entries, and
// those the store refuses (flashgate.ErrBadRequest), move to the sale's
// dead-letter stream at once, so they never block the stream: a batch the
// store refuses is stored again one order at a time, and so is a batch
// whose insert failed splitAfter times in a row for another reason. Other
// failures are returned as a storeError; the batch stays pending and is
// never dead-lettered for them.
func (d *Drainer) process(ctx context.Context, sale string, msgs []redis.XMessage) (int, error) {
	orders := make([]flashgate.Order, 0, len(msgs))
	kept := make([]redis.XMessage, 0, len(msgs))
	var dead []deadEntry
	for _, m := range msgs {
		o, err := parseEntry(sale, m.Values)
		if err != nil {
			dead = append(dead, deadEntry{m, "malformed entry: " + err.Error()})
			continue
		}
		orders = append(orders, o)
		kept = append(kept, m)
	}
	if err := d.deadLetter(ctx, sale, dead); err != nil {
		return 0, err
	}
	if len(orders) == 0 {
		return 0, nil
	}
	first := msgs[0].ID
	if d.failed[sale][first] < splitAfter && !d.holdsSuspect(sale, kept) {
		inserted, err := d.store.InsertOrders(ctx, orders)
		switch {
		case err == nil:
			delete(d.failed[sale], first)
			d.m.batch("ok")
			d.m.stored(inserted, orders, d.cfg.Clock.Now())
			if err := d.ackDel(ctx, sale, ids(kept)); err != nil {
				return 0, err
			}
			return len(kept), nil
		case errors.Is(err, flashgate.ErrBadRequest):
			// The store refused the batch for some order's sake.
		default:
			d.m.batch("error")
			tries := d.fail(sale, first)
			if tries < splitAfter {
				return 0, d.backOff(sale, fmt.Errorf("ordersink: storing %d orders of sale %s: %w", len(orders), sale, err))
			}
			d.log.Warn("storing a batch one order at a time after failed inserts", "sale", sale, "orders", len(orders), "tries", tries, "err", err)
		}
	}
	// Store the orders one by one: dead-letter those the store refuses,
	// keep those it fails pending.
	stored, dead, inserted, err := d.oneByOne(ctx, sale, orders, kept)
	if err := d.deadLetter(ctx, sale, dead); err != nil {
		return 0, err
	}
	if ackErr := d.ackDel(ctx, sale, ids(stored)); ackErr != nil {
		return 0, ackErr
	}
	if err != nil {
		d.m.batch("error")
		return len(stored), d.backOff(sale, fmt.Errorf("ordersink: storing orders of sale %s one at a time: %w", sale, err))
	}
	delete(d.failed[sale], first)
	d.m.batch("ok")
	d.m.stored(inserted, orders, d.cfg.Clock.Now())
	return len(stored), nil
}

// backOff sets when Run tries sale again after the store failed its
// orders with err (twice the last wait, between BackoffMin and
// BackoffMax), logs it, and returns err as a storeError. A sale's backoff
// ends when its pending list is found empty.
func (d *Drainer) backOff(sale string, err error) error {
	r := d.retry[sale]
	r.wait = max(d.cfg.BackoffMin, min(2*r.wait, d.cfg.BackoffMax))
	r.at = time.Now().Add(r.wait)
	d.retry[sale] = r
	d.log.Warn("storing orders failed; retrying the sale later", "sale", sale, "err", err, "wait", r.wait)
	return &storeError{err}
}

// fail counts a failed insert of sale's batch whose first entry is first
// and returns the failures in a row so far.
func (d *Drainer) fail(sale, first string) int {
	m := d.failed[sale]
	if m == nil {
		m = map[string]int{}
		d.failed[sale] = m
	}
	m[first]++
	return m[first]
}

// holdsSuspect reports whether msgs hold an entry of sale whose insert
// alone failed before.
func (d *Drainer) holdsSuspect(sale string, msgs []redis.XMessage) bool {
	sus := d.suspect[sale]
	if len(sus) == 0 {
		return false
	}
	for _, m := range msgs {
		if sus[m.ID] {
			return true
		}
	}
	return false
}

func ids(msgs []redis.XMessage) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

// oneByOne stores orders (read as msgs) of sale one at a time and returns
// the entries of those stored (to be acknowledged) and of those the store
// refuses (to be dead-lettered). An order the store fails otherwise stays
// pending and becomes a suspect, its error is returned, and the others are
// tried; suspects are tried last, so that orders that fail do not keep the
// others out. After splitAfter such failures in a row (the store is down,
// most likely) it stops.
func (d *Drainer) oneByOne(ctx context.Context, sale string, orders []flashgate.Order, msgs []redis.XMessage) (stored []redis.XMessage, dead []deadEntry, inserted int, err error) {
	sus := d.suspect[sale]
	if sus == nil {
		sus = map[string]bool{}
		d.suspect[sale] = sus
	}
	order := make([]int, 0, len(orders))
	for i := range orders {
		if !sus[msgs[i].ID] {
			order = append(order, i)
		}
	}
	for i := range orders {
		if sus[msgs[i].ID] {
			order = append(order, i)
		}
	}
	inARow := 0
	for _, i := range order {
		n, ierr := d.store.InsertOrders(ctx, []flashgate.Order{orders[i]})
		switch {
		case ierr == nil:
			inARow = 0
			inserted += n
			stored = append(stored, msgs[i])
			delete(sus, msgs[i].ID)
		case errors.Is(ierr, flashgate.ErrBadRequest):
			inARow = 0
			dead = append(dead, deadEntry{msgs[i], "refused by the database: " + ierr.Error()})
			delete(sus, msgs[i].ID)
		default:
			err = ierr
			inARow++
			sus[msgs[i].ID] = true
		}
		if inARow >= splitAfter || ctx.Err() != nil {
			break
		}
	}
	return stored, dead, inserted, err
}

// maxReason bounds the reason stored with a dead letter.
const maxReason = 500

// deadLetter moves entries of sale's order stream to its dead-letter stream
// (lua.DeadKey): in one MULTI, each is added there with its fields and
// DeadSource, DeadReason and DeadTime, then acknowledged and deleted.
func (d *Drainer) deadLetter(ctx context.Context, sale string, dead []deadEntry) error {
	if len(dead) == 0 {
		return nil
	}
	key, dkey := lua.OrdersKey(sale), lua.DeadKey(sale)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	now := d.cfg.Clock.Now().UnixMilli()
	ids := make([]string, len(dead))
	_, err := d.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for i, e := range dead {
			ids[i] = e.msg.ID
			vals := make([]any, 0, 2*len(e.msg.Values)+6)
			for _, k := range slices.Sorted(maps.Keys(e.msg.Values)) {
				vals = append(vals, k, e.msg.Values[k])
			}
			reason := e.reason
			if len(reason) > maxReason {
				reason = reason[:maxReason]
			}
			vals = append(vals, lua.DeadSource, e.msg.ID, lua.DeadReason, reason, lua.DeadTime, now)
			p.XAdd(ctx, &redis.XAddArgs{Stream: dkey, Values: vals})
		}
		p.XAck(ctx, key, lua.SinkGroup, ids...)
		p.XDel(ctx, key, ids...)
		return nil
	})
	if err != nil {
		return fmt.Errorf("ordersink: dead-lettering %d entries of %s: %w", len(dead), key, err)
	}
	for _, e := range dead {
		d.log.Error("order entry moved to the dead-letter stream", "stream", key, "dead", dkey, "id", e.msg.ID, "reason", e.reason)
	}
	d.m.dead(sale, len(dead))
	return nil
}

// ackDel acknowledges entries whose rows are committed and removes them
// from the stream, so a stream's length is its backlog of orders not yet in
// the database: one lua.AckTrim, which trims the stream below the group's
// oldest pending entry (XTRIM MINID) and deletes one by one only the entries
// committed ahead of an older batch still pending elsewhere.
func (d *Drainer) ackDel(ctx context.Context, sale string, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	// The rows are committed: acknowledge even while shutting down, or the
	// entries would be delivered (harmlessly, but needlessly) again.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	args := make([]any, 1+len(ids))
	args[0] = lua.SinkGroup
	for i, id := range ids {
		args[1+i] = id
	}
	if err := lua.AckTrim.Run(ctx, d.rdb, lua.AckTrimKeys(sale), args...).Err(); err != nil {
		return fmt.Errorf("ordersink: acknowledging %d entries of %s: %w", len(ids), lua.OrdersKey(sale), err)
	}
	return nil
}

// parseEntry turns the fields of an order entry (lua.ReadEntry, either
// form) into an order in status reserved, created at the entry's time.
func parseEntry(sale string, v map[string]any) (flashgate.Order, error) {
	if len(v) == 0 {
		return flashgate.Order{}, errors.New("entry has no fields (deleted?)")
	}
	e, ok := lua.ReadEntry(v)
	if !ok {
		return flashgate.Order{}, fmt.Errorf("field %s: want six space-separated values", lua.EntryCompact)
	}
	num := func(k, s string) (int64, error) {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("field %s: %q is not an integer", k, s)
		}
		return n, nil
	}
	// A bucket's stream (its member of fg:sales is the bucket's tag) holds
	// orders of the bucket's sale that carry the bucket's index.
	saleOf, bucket := lua.SaleOfTag(sale)
	o := flashgate.Order{ID: e.Order, SaleID: e.Sale, UserID: e.User, Status: flashgate.StatusReserved}
	if e.Compact {
		o.SaleID = saleOf
	}
	if bucket >= 0 {
		if e.Bucket != strconv.Itoa(bucket) {
			return o, fmt.Errorf("field %s: %q on the stream of bucket %q", lua.EntryBucket, e.Bucket, sale)
		}
		o.Bucket = bucket
	}
	switch {
	case !flashgate.ValidOrderID(o.ID):
		return o, fmt.Errorf("field %s: bad order id %q", lua.EntryOrder, o.ID)
	case o.SaleID != saleOf:
		return o, fmt.Errorf("field %s: %q on the stream of sale %q", lua.EntrySale, o.SaleID, sale)
	case o.UserID == "":
		return o, fmt.Errorf("field %s: empty", lua.EntryUser)
	}
	var err error
	if o.Quantity, err = num(lua.EntryQuantity, e.Quantity); err != nil {
		return o, err
	}
	if o.Quantity < 1 {
		return o, fmt.Errorf("field %s: %d below 1", lua.EntryQuantity, o.Quantity)
	}
	if o.PriceCents, err = num(lua.EntryPrice, e.Price); err != nil {
		return o, err
	}
	ms, err := num(lua.EntryTime, e.Time)
	if err != nil {
		return o, err
	}
	o.CreatedAt = time.UnixMilli(ms).UTC()
	o.UpdatedAt = o.CreatedAt
	return o, nil
}
