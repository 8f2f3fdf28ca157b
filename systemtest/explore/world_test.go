package explore

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane"
	"github.com/flashgate/flashgate/controlplane/buckets"
	"github.com/flashgate/flashgate/internal/testenv/pgtest"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/internal/testenv/testclock"
	"github.com/flashgate/flashgate/inventory"
	"github.com/flashgate/flashgate/lua"
	"github.com/flashgate/flashgate/ordersink"
	"github.com/flashgate/flashgate/sqldb"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// The payment window and grace of every schedule: the clock actor moves
// the test clock past them.
const (
	window = 15 * time.Minute
	grace  = 30 * time.Second
)

// env is what the schedules of one test share: a redis-server and one
// database, emptied before each schedule.
type env struct {
	name  string
	addr  string
	raw   *redis.Client // no hooks: flushes between schedules
	db    *sqldb.DB
	sql   *sql.DB // empties the tables between schedules
	pg    bool
	fence int64 // the last fencing token handed out; each schedule takes a higher one
}

// newEnv starts Redis and opens a database of backend (sqlite or postgres).
func newEnv(t testing.TB, backend string) *env {
	t.Helper()
	srv := redistest.Start(t)
	e := &env{name: backend, addr: srv.Addr, raw: srv.Client(t)}
	ctx := context.Background()
	var dsn, rawDriver, rawDSN string
	switch backend {
	case "postgres":
		dsn = pgtest.New(t)
		rawDriver, rawDSN, e.pg = "pgx", dsn, true
	default:
		path := filepath.Join(t.TempDir(), "explore.db")
		dsn = "sqlite://" + path
		rawDriver, rawDSN = "sqlite", path+"?_pragma=busy_timeout(10000)"
	}
	db, err := sqldb.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	e.db = db
	if e.sql, err = sql.Open(rawDriver, rawDSN); err != nil {
		t.Fatal(err)
	}
	e.sql.SetMaxOpenConns(1)
	t.Cleanup(func() { _ = e.sql.Close() })
	return e
}

// reset empties Redis (keys and scripts: each schedule starts from the
// same state, so that its steps replay) and every table but the schema's
// version and the leader fence.
func (e *env) reset(ctx context.Context) error {
	if err := e.raw.FlushAll(ctx).Err(); err != nil {
		return err
	}
	if err := e.raw.ScriptFlush(ctx).Err(); err != nil {
		return err
	}
	q := `SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'`
	if e.pg {
		q = `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'`
	}
	rows, err := e.sql.QueryContext(ctx, q)
	if err != nil {
		return err
	}
	var tables []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			_ = rows.Close()
			return err
		}
		if n != "schema_migrations" && n != "leader_fence" {
			tables = append(tables, n)
		}
	}
	if err := rows.Close(); err != nil {
		return err
	}
	if e.pg {
		_, err = e.sql.ExecContext(ctx, "TRUNCATE "+strings.Join(tables, ", "))
		return err
	}
	// The orders first: their triggers write the counters emptied after.
	for _, first := range []bool{true, false} {
		for _, n := range tables {
			if (n == "orders") == first {
				if _, err := e.sql.ExecContext(ctx, "DELETE FROM "+n); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// world is one schedule: its sale, its services (every Redis command,
// database call and provider call of an actor yields to its scheduler),
// and what the actors learned on the way.
type world struct {
	e     *env
	seed  uint64
	rng   *rand.Rand
	s     *Sched
	rdb   *redis.Client // hooked
	clock *testclock.Clock
	prov  *provider
	inv   *inventory.Service
	cp    *controlplane.Service // the gateways' and the admin's control plane
	store cpStore
	pays  payStore
	sink  sinkStore
	sale  flashgate.Sale
	users []string
	// orders are the order ids the buyers were given, in that order.
	orders []string
	owner  map[string]string // order → buyer
	notes  []string          // what the set-up chose
	// quiet is set for the quiet phase after the schedule, whose events
	// wait in queued for their delivery.
	quiet  bool
	queued [][]byte
	// flushed is set once a FLUSHALL lost what Redis held: reserved
	// orders not yet stored are lost with it, by design.
	flushed bool
	moved   bool     // the clock passed the payment window
	cancels int      // how often, in percent, a buyer cancels before (and after) paying
	refused []string // admitted buyers of a fair sale answered sold out
	// aux draws what the rebuild-window actors do (stall): a generator of
	// its own, so that a schedule without them takes the same steps from
	// its seed as before they were added.
	aux *rand.Rand
	// stall is set for a schedule that stalls the first settler past its
	// retake's Redis step, across a FLUSHALL, a rebuild and a new buyer's
	// purchase (redisLoss, lateBuyer): the window between a retake and
	// its honour step. retook is set once that settler ran the retake.
	stall, retook bool
	lateTried     bool // the new buyer of a stall schedule tried to reserve
	rebuilt       bool // redisLoss re-synced the sale twice after its FLUSHALL
	atLeastOnce   bool // the events emitted now are delivered at least once
	// online holds what the checks between steps found (afterStep).
	online []finding
	// dw is a draw schedule's (draw_test.go); nil in any other.
	dw *drawWorld
}

// newWorld builds the schedule of seed on e.
func newWorld(ctx context.Context, e *env, seed uint64) (*world, error) {
	if err := e.reset(ctx); err != nil {
		return nil, fmt.Errorf("reset: %w", err)
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	w := &world{e: e, seed: seed, rng: rng, s: newSched(rng), owner: map[string]string{},
		clock: testclock.New(time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)), prov: newProvider()}
	w.rdb = redis.NewClient(&redis.Options{Addr: e.addr, MaxRetries: -1})
	w.rdb.AddHook(redisHook{s: w.s})
	w.store = cpStore{Store: e.db, s: w.s}
	w.pays = payStore{PaymentStore: e.db, s: w.s}
	w.sink = sinkStore{Store: e.db, s: w.s}
	w.prov.emit = w.deliver
	n := 0
	w.inv = inventory.New(w.rdb, inventory.Config{Clock: w.clock, Logger: quiet, WaitReplicas: -1, NoAutoPipeline: true,
		MaxReserveBatch: 1, NewOrderID: func() string { n++; return fmt.Sprintf("o%d", n) }})
	if pickDraw(seed) {
		w.dw = &drawWorld{entrant: map[string]string{}, calls: map[string]int{}}
	}
	var err error
	if w.cp, err = w.newCP(); err != nil {
		return nil, err
	}
	e.fence++
	if w.dw != nil {
		w.sale = w.drawSale()
	} else {
		w.sale = w.pickSale()
		w.pickBuckets()
	}
	w.aux = rand.New(rand.NewPCG(seed^0x2545f4914f6cdd1d, seed))
	w.stall = w.dw == nil && !w.sale.Fair() && w.aux.IntN(4) == 0
	w.s.after = w.afterStep
	sctx := controlplane.WithFencingToken(ctx, w.token())
	created, err := w.cp.CreateSale(sctx, w.sale)
	if err != nil {
		return nil, fmt.Errorf("creating sale: %w", err)
	}
	w.sale.BucketSalts = created.BucketSalts
	if w.dw != nil {
		w.sale = created // its window as stored: the close reads it so
		return w, nil
	}
	if w.sale.Fair() {
		return w, w.openQueue(sctx)
	}
	if err := w.cp.Start(sctx, w.sale.ID); err != nil {
		return nil, fmt.Errorf("starting sale: %w", err)
	}
	return w, nil
}

// fairUsers is how many buyers a fair sale has: all of them enter its
// queue before the start.
const fairUsers = 3

// openQueue takes a fair sale to its start: the queue opens, every buyer
// enters it, the sale starts and the leader ranks the queue and admits as
// many positions as there are units.
func (w *world) openQueue(ctx context.Context) error {
	w.clock.Set(w.sale.StartsAt.Add(-time.Second))
	if err := w.queueStep(ctx); err != nil {
		return fmt.Errorf("opening the queue: %w", err)
	}
	for i := range fairUsers {
		u := fmt.Sprintf("u%d", i)
		if err := lua.QueueEnter.Run(ctx, w.rdb, lua.QueueEnterKeys(w.sale.ID, "none"), u, 0).Err(); err != nil {
			return fmt.Errorf("entering the queue: %w", err)
		}
	}
	w.clock.Set(*w.sale.StartsAt)
	if err := w.cp.Start(ctx, w.sale.ID); err != nil {
		return fmt.Errorf("starting sale: %w", err)
	}
	for range 2 { // the start, then the ranking and the first admissions
		if err := w.queueStep(ctx); err != nil {
			return fmt.Errorf("starting the queue: %w", err)
		}
	}
	return nil
}

// queueStep is one step of the fair queue's leader.
func (w *world) queueStep(ctx context.Context) error {
	sale, err := w.store.Sale(ctx, w.sale.ID)
	if err != nil {
		return err
	}
	return w.cp.QueueStep(ctx, sale, w.token())
}

// token is the schedule's fencing token: one leader's term.
func (w *world) token() int64 { return w.e.fence + 1_000_000 }

// close releases the schedule's client.
func (w *world) close() { _ = w.rdb.Close() }

// newCP is a control plane process of the schedule: the services share
// Redis and the database, each has its own locks.
func (w *world) newCP() (*controlplane.Service, error) {
	cfg := controlplane.Config{Redis: w.rdb, Store: w.store, Releaser: w.inv, AdminToken: "explore-admin-token",
		Clock: w.clock, Logger: quiet, PaymentWindow: window, PaymentGrace: grace, PersistWait: -1,
		Payments: gated{PaymentProvider: w.prov, s: w.s, rng: w.rng}, PaymentStore: w.pays}
	if w.dw != nil {
		// A draw's close: one capture and one release at a time, orders
		// made through the schedule's inventory, the holds' read path
		// unpaced (the test clock stands still between steps).
		cfg.DrawReserver, cfg.DrawCapturer, cfg.DrawWorkers = drawReserver{w: w}, closeCapturer{w: w}, 1
		cfg.PaymentReconcileRate = 1e6
	}
	return controlplane.New(cfg)
}

// newSink is an order sink process of the schedule (one consumer name:
// a restarted sink reads its own pending entries again).
func (w *world) newSink() *ordersink.Drainer {
	return ordersink.New(w.rdb, w.sink, ordersink.Config{Consumer: "sink", WaitReplicas: ordersink.WaitOff, Logger: quiet, Clock: w.clock})
}

// pickSale draws the schedule's sale: one unit, or one unit of each of
// two variants.
func (w *world) pickSale() flashgate.Sale {
	sale := flashgate.Sale{ID: fmt.Sprintf("x%d", w.seed), Name: "Explore", PriceCents: 1000, Total: 1}
	switch w.rng.IntN(4) {
	case 3:
		starts := w.clock.Now().Add(time.Minute)
		sale.Queue, sale.StartsAt, sale.PrequeueSeconds, sale.AdmitSeconds = flashgate.QueueFair, &starts, 30, 1200
		w.notes = append(w.notes, "sale: one unit through a fair queue")
	case 0:
		sale.Variants = []flashgate.Variant{{ID: "S", Name: "Small", Total: 1}, {ID: "M", Name: "Medium", Total: 1}}
		sale.Total = 2
		w.notes = append(w.notes, "sale: two variants of one unit")
	default:
		w.notes = append(w.notes, "sale: one unit")
	}
	return sale
}

// pickBuckets splits, with -buckets (the default), one in three sales over
// two buckets (not a fair sale's, nor a seed's of corpus, found before
// buckets were drawn: each keeps the schedule that found its defect; a
// seed of bucketedCorpus is drawn as any other), a one-unit sale then
// having two units, one a bucket. It draws from a generator of its own, so
// that a schedule of an unbucketed sale takes the same steps from its seed
// as before buckets were drawn.
func (w *world) pickBuckets() {
	shape := rand.New(rand.NewPCG(w.seed^0x5851f42d4c957f2d, w.seed+1))
	if !*flagBuckets || w.sale.Fair() || slices.Contains(corpus, w.seed) || shape.IntN(3) != 0 {
		return
	}
	w.sale.Buckets = 2
	if !w.sale.HasVariants() {
		w.sale.Total = 2
	}
	w.notes = append(w.notes, "over two buckets")
}

// tags are the hash tags of the sale's stock in Redis: its own, or its
// buckets'.
func (w *world) tags() []string { return buckets.Layout(w.sale).Tags() }

// variant draws a variant of the sale for a buyer ("" without variants).
func (w *world) variant() string {
	if !w.sale.HasVariants() {
		return ""
	}
	return w.sale.Variants[w.rng.IntN(len(w.sale.Variants))].ID
}

// think lets n steps of others pass: a buyer's pause, a slow network.
func (w *world) think(ctx context.Context, n int) error {
	for range n {
		if err := w.s.Yield(ctx, "think"); err != nil {
			return err
		}
	}
	return nil
}
