package resync

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/internal/cptest"
	"github.com/flashgate/flashgate/controlplane/internal/fencing"
	"github.com/flashgate/flashgate/controlplane/internal/salehash"
	"github.com/flashgate/flashgate/internal/testenv/pgtest"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/lua"
	"github.com/flashgate/flashgate/sqldb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Points of a re-sync where a test runs a step of a release: before and
// after its database snapshot, after each read of the pending releases
// (the last one comes just before the script), and after the pass.
const (
	atBeforeSnapshot = iota
	atAfterSnapshot
	atAfterPending
	atAfterPass
	atCount
)

var pointNames = [atCount]string{"before-snapshot", "after-snapshot", "after-pending", "after-pass"}

// hookStore is the database with a release's steps run at given points
// of a re-sync's reads, each once.
type hookStore struct {
	*sqldb.DB
	at [atCount][]func()
}

func (h *hookStore) fire(p int) {
	fs := h.at[p]
	h.at[p] = nil
	for _, f := range fs {
		f()
	}
}

// Snapshot runs the steps of atBeforeSnapshot before the pass's database
// snapshot begins (its first read, the pending retakes, fixes it: a step
// run in the figures' read would land after it), and those of
// atAfterSnapshot once its reads are done.
func (h *hookStore) Snapshot(ctx context.Context, read func(ctx context.Context) error) error {
	h.fire(atBeforeSnapshot)
	defer h.fire(atAfterSnapshot)
	return h.DB.Snapshot(ctx, read)
}

func (h *hookStore) PendingReleases(ctx context.Context, id string, limit int) ([]flashgate.Order, int64, error) {
	defer h.fire(atAfterPending)
	return h.DB.PendingReleases(ctx, id, limit)
}

// backends are the databases the tests run on: SQLite always, PostgreSQL
// when the harness started one (pgtest skips it otherwise).
var backends = []struct {
	name string
	dsn  func(t *testing.T) string
}{
	{"sqlite", cptest.SQLiteDSN},
	{"postgres", func(t *testing.T) string { return pgtest.New(t) }},
}

// TestResyncRacingRelease: a release (its database transition, then its
// Redis release) placed at every pair of points of a re-sync leaves the
// sale's booked exact once both are done: the freed unit shows free at
// once (a fair queue's admitted buyer is never answered sold out while it
// is free), and it is never counted twice (booked never falls below the
// live order that stays). On a sale of one stock and one in variants.
func TestResyncRacingRelease(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			for _, variants := range []bool{false, true} {
				for db := range atCount {
					for rd := db; rd < atCount; rd++ {
						name := fmt.Sprintf("variants=%v/db-%s/redis-%s", variants, pointNames[db], pointNames[rd])
						t.Run(name, func(t *testing.T) {
							testResyncRacingRelease(t, be.dsn(t), variants, db, rd)
						})
					}
				}
			}
		})
	}
}

func testResyncRacingRelease(t *testing.T, dsn string, variants bool, dbAt, redisAt int) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db := cptest.OpenDB(t, dsn)
	rdb := redistest.Start(t).Client(t)
	sale := flashgate.Sale{ID: "race", Name: "Race", Total: 2, PerUser: 1, PriceCents: 100, State: flashgate.StateOpen}
	variant := ""
	if variants {
		sale.Variants = []flashgate.Variant{{ID: "A", Name: "A", Total: 1}, {ID: "B", Name: "B", Total: 1}}
		variant = "A"
	}
	if err := db.CreateSale(ctx, sale); err != nil {
		t.Fatalf("CreateSale: %v", err)
	}
	tok, err := lua.TakeFence.Run(ctx, rdb, lua.FenceKeys(), time.Now().UnixMilli()).Int64()
	if err != nil {
		t.Fatalf("TakeFence: %v", err)
	}
	ctx = fencing.WithValue(ctx, tok)
	if err := lua.Prepare.Run(ctx, rdb, lua.SaleKeys(sale.ID), sale.Total, flashgate.AdmitCap(sale.Total, 0), 1, sale.PriceCents,
		"", "", salehash.VariantSpec(sale.Variants, nil, nil)).Err(); err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	if err := lua.SetState.Run(ctx, rdb, lua.SaleKeys(sale.ID), "open", tok).Err(); err != nil {
		t.Fatalf("SetState: %v", err)
	}
	// Two orders: "stay" (variant B) stays live, "go" (variant A) is
	// cancelled while the re-sync runs.
	now := time.Now()
	for _, o := range []struct{ id, user, variant string }{{"stay", "u1", "B"}, {"go", "u2", variant}} {
		v := o.variant
		if !variants {
			v = ""
		}
		res, err := lua.Reserve.Run(ctx, rdb, lua.ReserveKeys(sale.ID), o.id, o.user, 1, now.UnixMilli(), sale.ID, "", "", v).Slice()
		if err != nil || res[0] != int64(0) {
			t.Fatalf("reserve %s: %v, %v", o.id, res, err)
		}
	}
	orders := cptest.Persist(t, ctx, rdb, db, sale.ID)
	var gone flashgate.Order
	for _, o := range orders {
		if o.ID == "go" {
			gone = o
		}
	}
	rel := &cptest.Releaser{RDB: rdb}
	store := &hookStore{DB: db}
	store.at[dbAt] = append(store.at[dbAt], func() {
		if _, err := db.Transition(ctx, gone.ID, []flashgate.OrderStatus{flashgate.StatusPendingPayment}, flashgate.StatusCancelled, time.Now()); err != nil {
			t.Errorf("Transition: %v", err)
		}
	})
	store.at[redisAt] = append(store.at[redisAt], func() {
		if _, err := rel.Release(ctx, gone); err != nil {
			t.Errorf("Release: %v", err)
		}
	})
	s := New(rdb, store, nil, cptest.QuietLogger(), prometheus.NewCounter(prometheus.CounterOpts{Name: "resyncs"}))
	_, after, err := s.Resync(ctx, sale.ID)
	if err != nil {
		t.Fatalf("Resync: %v", err)
	}
	if after.Booked < 1 {
		t.Fatalf("re-sync set booked %d: the live order's unit is sold again", after.Booked)
	}
	if redisAt < atAfterPass && after.Booked != 1 {
		t.Fatalf("re-sync set booked %d after the release was done, want 1: the freed unit stays hidden", after.Booked)
	}
	store.fire(atAfterPass)
	checkBooked(t, rdb, sale.ID, variants, "after the release")
	if _, _, err := s.Resync(ctx, sale.ID); err != nil {
		t.Fatalf("second Resync: %v", err)
	}
	checkBooked(t, rdb, sale.ID, variants, "after a second re-sync")
}

// checkBooked wants one unit booked in the sale (and, with variants, that
// of variant B only).
func checkBooked(t *testing.T, rdb redis.UniversalClient, sale string, variants bool, when string) {
	t.Helper()
	if got := cptest.Field(t, rdb, sale, lua.FieldBooked); got != 1 {
		t.Fatalf("%s: booked %d, want 1", when, got)
	}
	if !variants {
		return
	}
	for v, want := range map[string]int64{"A": 0, "B": 1} {
		if got := cptest.Field(t, rdb, sale, lua.VariantField(v, lua.FieldBooked)); got != want {
			t.Fatalf("%s: variant %s booked %d, want %d", when, v, got, want)
		}
	}
}
