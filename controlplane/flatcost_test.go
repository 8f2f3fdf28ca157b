package controlplane

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/lua"
)

// tickCost is what the leader's ticks cost over a measured run.
type tickCost struct {
	ticks    int
	perTick  time.Duration      // mean wall time of one tick
	commands int64              // Redis commands of all ticks (INFO and CONFIG left out)
	byName   map[string]int64   // commands by name
	inSales  int64              // members of fg:sales
	stats    map[string]float64 // commands per tick by name, for the log
	// lookupCommands are the Redis commands of lookups of unknown orders.
	lookupCommands int64
	// listed is how many sale rows the ticks' listings of sales read from
	// the database (all of them, live or not).
	listed int64
}

// listCounter is a Store that counts the sale rows its listings return.
type listCounter struct {
	Store
	rows  atomic.Int64
	lists atomic.Int64 // calls of LiveSales
}

func (l *listCounter) Sales(ctx context.Context) ([]flashgate.Sale, error) {
	v, err := l.Store.Sales(ctx)
	l.rows.Add(int64(len(v)))
	return v, err
}

func (l *listCounter) LiveSales(ctx context.Context) ([]flashgate.Sale, error) {
	v, err := l.Store.LiveSales(ctx)
	l.lists.Add(1)
	l.rows.Add(int64(len(v)))
	return v, err
}

// measureTicks runs the leader's full tick (scheduling, failover watch,
// expiry, and a re-sync pass of every live sale) over live sales that stay
// the same and archived past sales, and counts its Redis commands with
// INFO commandstats on the real redis-server.
func measureTicks(t *testing.T, archived, ticks int) tickCost {
	counter := &listCounter{}
	e := newEnv(t, sqliteDSN(t), func(c *Config) { counter.Store = c.Store; c.Store = counter })
	// The live sales: four open, one open bucketed, one closed whose order
	// waits for its payment (so it is settled and not archived).
	for i := range 4 {
		e.openSale("live"+strconv.Itoa(i), 100, 1)
		e.reserveMany("live"+strconv.Itoa(i), "u", 3)
		e.persist("live" + strconv.Itoa(i))
	}
	e.startBucketed(flashgate.Sale{ID: "livebkt", Name: "Bucketed", Total: 90, Buckets: 3})
	e.openSale("unpaid", 10, 1)
	e.reserveMany("unpaid", "u", 2)
	e.persist("unpaid")
	if err := e.svc.Stop(e.ctx, "unpaid"); err != nil {
		t.Fatal(err)
	}
	// The past sales: closed and archived rows, with their hashes in Redis.
	start := time.Now()
	for i := range archived {
		id := fmt.Sprintf("past%05d", i)
		if err := e.db.CreateSale(e.ctx, flashgate.Sale{ID: id, Name: "Past", PriceCents: 100, Total: 10, State: flashgate.StateClosed}); err != nil {
			t.Fatal(err)
		}
		if ok, err := e.db.ArchiveSale(e.ctx, id); err != nil || !ok {
			t.Fatalf("ArchiveSale(%s): %v, %v", id, ok, err)
		}
	}
	pipe := e.rdb.Pipeline()
	for i := range archived {
		pipe.HSet(e.ctx, lua.SaleKey(fmt.Sprintf("past%05d", i)), lua.FieldTotal, 10, lua.FieldBooked, 10, lua.FieldClosed, 1)
	}
	if archived > 0 {
		if _, err := pipe.Exec(e.ctx); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d archived sales made in %v", archived, time.Since(start).Round(time.Millisecond))

	tick := func() {
		var last time.Time // zero: every tick runs the re-sync pass too
		e.svc.tick(e.ctx, &last)
	}
	for range 3 { // warm up: leader lease, primary markers, settlement
		tick()
	}
	if !e.svc.Leading() {
		t.Fatal("the service does not lead")
	}
	if err := e.rdb.ConfigResetStat(e.ctx).Err(); err != nil {
		t.Fatal(err)
	}
	counter.rows.Store(0)
	begin := time.Now()
	for range ticks {
		tick()
	}
	took := time.Since(begin)
	listed := counter.rows.Load()
	c := tickCost{ticks: ticks, perTick: took / time.Duration(ticks), byName: map[string]int64{}, stats: map[string]float64{}, listed: listed}
	for name, st := range redistest.Commands(t, e.srv.Client(t)) {
		if name == "info" || strings.HasPrefix(name, "config") {
			continue
		}
		c.byName[name] = st.Calls
		c.commands += st.Calls
		c.stats[name] = float64(st.Calls) / float64(ticks)
	}
	c.inSales = e.rdb.SCard(e.ctx, lua.SalesKey()).Val()

	// The lookup of an order not in the database reads the live sales'
	// buyers, whatever the number of past sales.
	if err := e.rdb.ConfigResetStat(e.ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for i := range lookups {
		if _, err := e.svc.Order(e.ctx, "nosuchorder"+strconv.Itoa(i), "someone"); !errors.Is(err, flashgate.ErrNotFound) {
			t.Fatalf("Order of an unknown id: %v", err)
		}
	}
	for name, st := range redistest.Commands(t, e.srv.Client(t)) {
		if name != "info" && !strings.HasPrefix(name, "config") {
			c.lookupCommands += st.Calls
		}
	}
	return c
}

// lookups is how many lookups of unknown orders measureTicks counts.
const lookups = 10

// TestTickCostFlat: the leader's tick costs as many Redis commands with
// 10,000 past (archived) sales as with 10: the passes read only live sales.
// It reports the tick's mean wall time and its commands per tick for both
// (the times are only reported, never asserted). FLASHGATE_TEST_PAST_N sets
// another number of past sales; under the race detector (make test) the
// default is 1,000.
//
//	go test -run TestTickCostFlat -v ./controlplane
func TestTickCostFlat(t *testing.T) {
	many := 10_000
	if raceEnabled {
		// Under the race detector each SQLite transaction of the fixture
		// costs ten times as much: 1,000 past sales (100 times the few)
		// still show whether the tick's cost follows them.
		many = 1_000
	}
	if v, err := strconv.Atoi(os.Getenv("FLASHGATE_TEST_PAST_N")); err == nil && v > 0 {
		many = v
	}
	const ticks = 100
	few := measureTicks(t, 10, ticks)
	lots := measureTicks(t, many, ticks)
	for _, c := range []struct {
		n    int
		cost tickCost
	}{{10, few}, {many, lots}} {
		names := make([]string, 0, len(c.cost.stats))
		for n := range c.cost.stats {
			names = append(names, n)
		}
		sort.Strings(names)
		var parts []string
		for _, n := range names {
			parts = append(parts, fmt.Sprintf("%s %.1f", n, c.cost.stats[n]))
		}
		t.Logf("%6d past sales: tick %v, %.1f Redis commands per tick (%s); fg:sales holds %d",
			c.n, c.cost.perTick.Round(10*time.Microsecond), float64(c.cost.commands)/ticks, strings.Join(parts, ", "), c.cost.inSales)
	}
	t.Logf("tick time with %d past sales / with 10: %.2f", many, float64(lots.perTick)/float64(few.perTick))
	// Counts, not times: the same commands within one per tick (a lease
	// taken or renewed).
	if d := lots.commands - few.commands; d > ticks || d < -ticks {
		t.Errorf("Redis commands over %d ticks: %d with %d past sales, %d with 10; want the same within %d",
			ticks, lots.commands, many, few.commands, ticks)
	}
	t.Logf("a lookup of an order not in the database: %.1f Redis commands with 10 past sales, %.1f with %d",
		float64(few.lookupCommands)/lookups, float64(lots.lookupCommands)/lookups, many)
	if lots.lookupCommands != few.lookupCommands {
		t.Errorf("Redis commands of %d lookups: %d with %d past sales, %d with 10; want the same", lookups, lots.lookupCommands, many, few.lookupCommands)
	}
	// And the database: the ticks list only live sales (a listing of every
	// sale, live or past, made the tick 15 times slower at 10,000).
	t.Logf("sale rows listed per tick: %.1f with 10 past sales, %.1f with %d", float64(few.listed)/ticks, float64(lots.listed)/ticks, many)
	if lots.listed != few.listed {
		t.Errorf("sale rows the ticks listed: %d with %d past sales, %d with 10; want the same", lots.listed, many, few.listed)
	}
	if lots.inSales != few.inSales {
		t.Errorf("fg:sales: %d members with %d past sales, %d with 10; want the same", lots.inSales, many, few.inSales)
	}
}

// TestTickListsLiveSalesOnce: a tick without its re-sync pass reads the live
// sales from the database once, for the failover watch, the scheduler and
// the fair queues alike; and the scheduler's moves reach the queues' view.
func TestTickListsLiveSalesOnce(t *testing.T) {
	counter := &listCounter{}
	e := newEnv(t, sqliteDSN(t), func(c *Config) { counter.Store = c.Store; c.Store = counter })
	e.openSale("once", 10, 1)
	last := time.Now() // the re-sync pass is not due
	for range 3 {
		counter.lists.Store(0)
		e.svc.tick(e.ctx, &last)
		if got := counter.lists.Load(); got != 1 {
			t.Fatalf("LiveSales calls in one tick: got %d, want 1", got)
		}
	}
	if !e.svc.Leading() {
		t.Fatal("the service does not lead")
	}
}
