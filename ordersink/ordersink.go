// Package ordersink drains the sales' order streams into the database. It
// reads with a consumer group, acknowledges (and deletes) entries only after
// their rows are committed, re-reads its own pending entries on restart and
// claims those a dead consumer left behind, so delivery is at-least-once and,
// because inserts are idempotent, the effect is exactly-once.
package ordersink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
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
	// Consumer is this drainer's name in the consumer group; default
	// "<hostname>-<pid>". A drainer that restarts under the same name picks
	// up its own pending entries at once; under another name they are
	// claimed after ClaimIdle.
	Consumer string
	// Batch is the most entries read, and orders inserted, at once; default 256.
	Batch int
	// Block is how long Run waits for new entries in one read; default 100ms.
	Block time.Duration
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
	// Metrics, when set, receives flashgate_sink_orders_total,
	// flashgate_sink_batches_total{result}, flashgate_sink_lag_seconds and
	// flashgate_sink_backlog; default none.
	Metrics prometheus.Registerer
}

// Drainer moves reserved orders from the sale streams into a Store. Its
// methods may be called from several goroutines; passes are serialised.
type Drainer struct {
	rdb   redis.UniversalClient
	store Store
	cfg   Config
	log   *slog.Logger
	m     *metrics

	// mu serialises passes and guards the fields below.
	mu          sync.Mutex
	sales       []string
	salesAt     time.Time
	groups      map[string]bool // streams whose group is known to exist
	needPending map[string]bool // streams whose own pending list must be re-read
	claimedAt   time.Time
}

// New returns a Drainer reading with rdb, which should be a client of its
// own: blocking reads hold a connection for up to Block.
func New(rdb redis.UniversalClient, store Store, cfg Config) *Drainer {
	if cfg.Consumer == "" {
		h, _ := os.Hostname()
		if h == "" {
			h = "ordersink"
		}
		cfg.Consumer = h + "-" + strconv.Itoa(os.Getpid())
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 256
	}
	if cfg.Block <= 0 {
		cfg.Block = 100 * time.Millisecond
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
		m:           newMetrics(cfg.Metrics),
		groups:      map[string]bool{},
		needPending: map[string]bool{},
	}
}

// Run drains the streams until ctx is done, then returns nil. While the
// database or Redis fails it retries with backoff and acknowledges nothing.
func (d *Drainer) Run(ctx context.Context) error {
	wait := d.cfg.BackoffMin
	for ctx.Err() == nil {
		_, err := d.pass(ctx, true)
		if err == nil {
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
// the sum of the lengths of the sale streams (committed entries are deleted).
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
	if len(sales) == 0 {
		d.m.setBacklog(0)
		return 0, nil
	}
	cmds := make([]*redis.IntCmd, len(sales))
	_, err := d.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, s := range sales {
			cmds[i] = p.XLen(ctx, lua.OrdersKey(s))
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	var n int64
	for _, c := range cmds {
		n += c.Val()
	}
	d.m.setBacklog(n)
	return n, nil
}

// pass drains every sale stream once. Blocking passes (Run) read new entries
// from all streams in one read that waits up to Block, and re-read pending
// lists and claim only when needed; non-blocking passes (DrainOnce) do all.
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
	for _, s := range d.sales {
		if blocking && !d.needPending[s] {
			continue
		}
		n, err := d.drainPending(ctx, s)
		total += n
		if err != nil {
			return total, err
		}
		delete(d.needPending, s)
	}
	now := time.Now()
	if !blocking || now.Sub(d.claimedAt) >= min(d.cfg.ClaimIdle/2, time.Second) {
		for _, s := range d.sales {
			n, err := d.claim(ctx, s)
			total += n
			if err != nil {
				return total, err
			}
		}
		d.claimedAt = now
	}
	if blocking {
		n, err := d.readNew(ctx, d.sales, d.cfg.Block)
		return total + n, err
	}
	for _, s := range d.sales {
		left, err := d.rdb.XLen(ctx, lua.OrdersKey(s)).Result()
		if err != nil {
			return total, fmt.Errorf("ordersink: XLEN: %w", err)
		}
		for i := int64(0); i <= left/int64(d.cfg.Batch)+1; i++ {
			n, err := d.readNew(ctx, []string{s}, -1)
			total += n
			if err != nil {
				return total, err
			}
			if n == 0 {
				break
			}
		}
	}
	return total, nil
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
	d.sales, d.salesAt = sales, now
	if d.m != nil {
		if _, err := d.backlog(ctx, sales); err != nil {
			return fmt.Errorf("ordersink: backlog: %w", err)
		}
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
			return total, nil
		}
		n, err := d.process(ctx, sale, res[0].Messages)
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
			n, err := d.process(ctx, sale, msgs)
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

// readNew reads entries never delivered to any consumer from the streams of
// sales, waiting up to block (no wait when block < 0), and stores them.
func (d *Drainer) readNew(ctx context.Context, sales []string, block time.Duration) (int, error) {
	streams := make([]string, 0, 2*len(sales))
	bykey := make(map[string]string, len(sales))
	for _, s := range sales {
		k := lua.OrdersKey(s)
		streams = append(streams, k)
		bykey[k] = s
	}
	for range sales {
		streams = append(streams, ">")
	}
	res, err := d.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: lua.SinkGroup, Consumer: d.cfg.Consumer,
		Streams: streams, Count: int64(d.cfg.Batch), Block: block,
	}).Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		if ctx.Err() != nil {
			return 0, nil
		}
		return 0, fmt.Errorf("ordersink: reading new entries: %w", err)
	}
	total := 0
	for _, st := range res {
		n, err := d.process(ctx, bykey[st.Stream], st.Messages)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// process stores the orders of msgs, read from sale's stream, and only then
// acknowledges and deletes their entries. Malformed entries are logged,
// acknowledged and deleted at once, so they never block the stream.
func (d *Drainer) process(ctx context.Context, sale string, msgs []redis.XMessage) (int, error) {
	key := lua.OrdersKey(sale)
	orders := make([]flashgate.Order, 0, len(msgs))
	ids := make([]string, 0, len(msgs))
	var bad []string
	for _, m := range msgs {
		o, err := parseEntry(sale, m.Values)
		if err != nil {
			d.log.Error("dropping malformed order entry", "stream", key, "id", m.ID, "err", err)
			bad = append(bad, m.ID)
			continue
		}
		orders = append(orders, o)
		ids = append(ids, m.ID)
	}
	if err := d.ackDel(ctx, key, bad); err != nil {
		return 0, err
	}
	if len(orders) == 0 {
		return 0, nil
	}
	inserted, err := d.store.InsertOrders(ctx, orders)
	if errors.Is(err, flashgate.ErrBadRequest) {
		// The store refused the batch for one order's sake: store them one
		// by one and drop those it refuses.
		orders, ids, inserted, err = d.oneByOne(ctx, key, orders, ids)
	}
	if err != nil {
		d.m.batch("error")
		return 0, fmt.Errorf("ordersink: storing %d orders: %w", len(orders), err)
	}
	d.m.batch("ok")
	d.m.stored(inserted, orders, d.cfg.Clock.Now())
	if err := d.ackDel(ctx, key, ids); err != nil {
		return 0, err
	}
	return len(ids), nil
}

func (d *Drainer) oneByOne(ctx context.Context, key string, orders []flashgate.Order, ids []string) ([]flashgate.Order, []string, int, error) {
	var keptO []flashgate.Order
	var keptI, bad []string
	total := 0
	for i, o := range orders {
		n, err := d.store.InsertOrders(ctx, []flashgate.Order{o})
		if errors.Is(err, flashgate.ErrBadRequest) {
			d.log.Error("dropping order the store refuses", "stream", key, "id", ids[i], "err", err)
			bad = append(bad, ids[i])
			continue
		}
		if err != nil {
			return orders, ids, 0, err
		}
		total += n
		keptO, keptI = append(keptO, o), append(keptI, ids[i])
	}
	if err := d.ackDel(ctx, key, bad); err != nil {
		return orders, ids, 0, err
	}
	return keptO, keptI, total, nil
}

// ackDel acknowledges and deletes entries in one round trip, so a stream's
// length is its backlog of orders not yet in the database.
func (d *Drainer) ackDel(ctx context.Context, key string, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	// The rows are committed: acknowledge even while shutting down, or the
	// entries would be delivered (harmlessly, but needlessly) again.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, err := d.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.XAck(ctx, key, lua.SinkGroup, ids...)
		p.XDel(ctx, key, ids...)
		return nil
	})
	if err != nil {
		return fmt.Errorf("ordersink: acknowledging %d entries of %s: %w", len(ids), key, err)
	}
	return nil
}

// parseEntry turns the fields of an order entry (lua/keys.go) into an order
// in status reserved, created at the entry's time.
func parseEntry(sale string, v map[string]any) (flashgate.Order, error) {
	str := func(k string) string { s, _ := v[k].(string); return s }
	num := func(k string) (int64, error) {
		n, err := strconv.ParseInt(str(k), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("field %s: %q is not an integer", k, str(k))
		}
		return n, nil
	}
	if len(v) == 0 {
		return flashgate.Order{}, errors.New("entry has no fields (deleted?)")
	}
	o := flashgate.Order{
		ID:     str(lua.EntryOrder),
		SaleID: str(lua.EntrySale),
		UserID: str(lua.EntryUser),
		Status: flashgate.StatusReserved,
	}
	switch {
	case !flashgate.ValidOrderID(o.ID):
		return o, fmt.Errorf("field %s: bad order id %q", lua.EntryOrder, o.ID)
	case o.SaleID != sale:
		return o, fmt.Errorf("field %s: %q on the stream of sale %q", lua.EntrySale, o.SaleID, sale)
	case o.UserID == "":
		return o, fmt.Errorf("field %s: empty", lua.EntryUser)
	}
	var err error
	if o.Quantity, err = num(lua.EntryQuantity); err != nil {
		return o, err
	}
	if o.Quantity < 1 {
		return o, fmt.Errorf("field %s: %d below 1", lua.EntryQuantity, o.Quantity)
	}
	if o.PriceCents, err = num(lua.EntryPrice); err != nil {
		return o, err
	}
	ms, err := num(lua.EntryTime)
	if err != nil {
		return o, err
	}
	o.CreatedAt = time.UnixMilli(ms).UTC()
	o.UpdatedAt = o.CreatedAt
	return o, nil
}
