package controlplane

import (
	"context"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/orders"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/lua"
)

// logCounter is a slog.Handler that counts records by message, and keeps
// those at WARN or above.
type logCounter struct {
	mu    sync.Mutex
	msgs  map[string]int
	warns []string
}

func (h *logCounter) Enabled(context.Context, slog.Level) bool { return true }
func (h *logCounter) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.msgs[r.Message]++
	if r.Level >= slog.LevelWarn {
		line := r.Message
		r.Attrs(func(a slog.Attr) bool { line += " " + a.String(); return true })
		h.warns = append(h.warns, line)
	}
	return nil
}
func (h *logCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logCounter) WithGroup(string) slog.Handler      { return h }

// TestExpiryStorm: 20,000 unpaid orders (5,000 on PostgreSQL under the race
// detector; FLASHGATE_TEST_STORM=N sets another number, as for the 100,000
// of docs/internals.md) reach the end of the payment window together while
// new buyers keep buying. The leader's loops expire them all, in batches,
// with one log line per pass and no loop running out of time; every unit
// comes back exactly once.
func TestExpiryStorm(t *testing.T) {
	dsn, n := sqliteDSN(t), 20_000
	if raceEnabled {
		dsn, n = postgresDSN(t), 5_000
	}
	if v, err := strconv.Atoi(os.Getenv("FLASHGATE_TEST_STORM")); err == nil && v > 0 {
		n = v
	}
	logs := &logCounter{msgs: map[string]int{}}
	e := newEnv(t, dsn, func(c *Config) {
		c.Logger = slog.New(logs)
		c.TickEvery = 20 * time.Millisecond
		c.ResyncEvery = 100 * time.Millisecond
	})
	const sale = "storm"
	total := int64(n) + 100
	e.openSale(sale, total, 0)
	// n live orders, reserved in Redis and persisted unpaid 20 minutes ago.
	at := t0.Add(-20 * time.Minute)
	start := time.Now()
	for from := 0; from < n; from += 10000 {
		var orders []flashgate.Order
		var buyers []any
		for i := from; i < min(from+10000, n); i++ {
			id, user := "x"+strconv.Itoa(1000000+i), "old"+strconv.Itoa(i)
			orders = append(orders, flashgate.Order{ID: id, SaleID: sale, UserID: user, Quantity: 1,
				PriceCents: 500, Status: flashgate.StatusPendingPayment, CreatedAt: at})
			buyers = append(buyers, user, id)
		}
		if _, err := e.db.InsertOrders(e.ctx, orders); err != nil {
			t.Fatal(err)
		}
		if err := e.rdb.HSet(e.ctx, lua.BuyersKey(sale), buyers...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.rdb.HSet(e.ctx, lua.SaleKey(sale), lua.FieldBooked, n, lua.FieldReserved, n).Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d unpaid orders built in %v", n, time.Since(start).Round(time.Millisecond))

	ctx, stop := context.WithCancel(e.ctx)
	var wg sync.WaitGroup
	var bought atomic.Int64
	wg.Add(2)
	go func() {
		defer wg.Done()
		_ = e.svc.Run(ctx)
	}()
	go func() { // buying goes on
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			keys := lua.ReserveKeys(sale)
			v, err := lua.Reserve.Run(ctx, e.rdb, keys, "n"+strconv.Itoa(i), "new"+strconv.Itoa(i), 1, 0, sale).Slice()
			if err == nil && v[0] == int64(lua.ReserveOK) {
				bought.Add(1)
			}
			time.Sleep(2 * time.Millisecond) // a buyer every 2ms: load, not a wait
		}
	}()
	start = time.Now()
	testwait.Eventually(t, 120*time.Second, func() bool {
		f, err := e.db.Figures(e.ctx, sale)
		return err == nil && f.Expired == int64(n)
	}, "%d orders expired", n)
	took := time.Since(start)
	// Let a re-sync pass deliver the pending releases, then stop the loops.
	testwait.Eventually(t, 10*time.Second, func() bool {
		q, _, err := e.db.PendingReleases(e.ctx, sale, 1)
		return err == nil && len(q) == 0
	}, "the pending releases to drain")
	stop()
	wg.Wait()
	t.Logf("%d expiries done in %v while %d units were bought", n, took.Round(time.Millisecond), bought.Load())

	logs.mu.Lock()
	passes, warns := logs.msgs["expired unpaid orders"], logs.warns
	logs.mu.Unlock()
	if passes == 0 || passes > n/orders.ExpireBatch {
		t.Errorf("%d expiry log lines for %d orders, want one per pass (at most %d)", passes, n, n/orders.ExpireBatch)
	}
	for _, w := range warns {
		if !strings.Contains(w, "re-sync: delivering") {
			t.Errorf("warning during the storm: %s", w)
		}
	}
	// Every unit came back once: booked, kept by releases and reserves
	// since the last re-sync, is the new buyers' units, as is the re-sync's
	// figure from the database; every old order is in the released set.
	if got := field(t, e.rdb, sale, lua.FieldBooked); got != bought.Load() {
		t.Fatalf("booked %d after the storm, want %d (the new buyers)", got, bought.Load())
	}
	e.persist(sale)
	_, after := e.resyncSettled(sale)
	if after.Booked != bought.Load() {
		t.Fatalf("booked %d after a re-sync, want %d", after.Booked, bought.Load())
	}
	if k, _ := e.rdb.SCard(e.ctx, lua.ReleasedKey(sale)).Result(); k != int64(n) {
		t.Errorf("released set holds %d orders, want %d", k, n)
	}
	if code, _ := e.reserve(sale, "old0"); code != lua.ReserveOK {
		t.Errorf("an expired buyer buying again: code %d, want %d", code, lua.ReserveOK)
	}
}
