package buckets

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/internal/cptest"
	"github.com/flashgate/flashgate/controlplane/internal/fencing"
	"github.com/flashgate/flashgate/internal/testenv/pgtest"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/internal/testenv/testclock"
	"github.com/flashgate/flashgate/lua"
	"github.com/flashgate/flashgate/sqldb"
)

// Points of a bucketed re-sync where a test runs a step of a release:
// before and after its database snapshot, after each read of the pending
// releases (the last one comes just before the buckets' scripts), and
// after the pass.
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

// TestBucketResyncRacingRelease is the unbucketed re-sync's race test
// (controlplane/resync) for a bucketed sale: a release (its database
// transition, then its Redis release in the order's bucket) at every pair
// of points of a re-sync leaves the bucket's booked exact once both are
// done, never hiding the freed unit and never counting it twice. On a sale
// of one stock and one in variants, on SQLite and PostgreSQL.
func TestBucketResyncRacingRelease(t *testing.T) {
	backends := []struct {
		name string
		dsn  func(t *testing.T) string
	}{
		{"sqlite", cptest.SQLiteDSN},
		{"postgres", func(t *testing.T) string { return pgtest.New(t) }},
	}
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			for _, variants := range []bool{false, true} {
				for db := range atCount {
					for rd := db; rd < atCount; rd++ {
						name := fmt.Sprintf("variants=%v/db-%s/redis-%s", variants, pointNames[db], pointNames[rd])
						t.Run(name, func(t *testing.T) { testBucketResyncRacingRelease(t, be.dsn(t), variants, db, rd) })
					}
				}
			}
		})
	}
}

func testBucketResyncRacingRelease(t *testing.T, dsn string, variants bool, dbAt, redisAt int) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db := cptest.OpenDB(t, dsn)
	store := &hookStore{DB: db}
	e := &env{t: t, ctx: ctx, db: db, clock: testclock.New(time.Date(2030, 5, 1, 12, 0, 0, 0, time.UTC))}
	e.rdb = redistest.Start(t).Client(t)
	e.k = New(Config{Redis: e.rdb, Store: store, Logger: cptest.QuietLogger(), Clock: e.clock})
	sale := flashgate.Sale{ID: "race", Name: "Race", Total: 4, Buckets: 2, PerUser: 1, PriceCents: 100}
	if variants {
		sale.Variants = []flashgate.Variant{{ID: "A", Name: "A", Total: 2}, {ID: "B", Name: "B", Total: 2}}
	}
	sale = e.startBucketed(sale)
	l := Layout(sale)
	// Two orders of two buyers at home in bucket 0: "stay" (variant B)
	// stays live, "go" (variant A) is cancelled while the re-sync runs.
	var users []string
	for i := 0; len(users) < 2; i++ {
		if u := "u" + strconv.Itoa(i); l.Home(u) == 0 {
			users = append(users, u)
		}
	}
	tag := l.Tag(0)
	for i, o := range []struct{ id, variant string }{{"stay", "B"}, {"go", "A"}} {
		v := o.variant
		if !variants {
			v = ""
		}
		res, err := lua.Reserve.Run(ctx, e.rdb, lua.ReserveKeys(tag), o.id, users[i], 1, e.clock.Now().UnixMilli(), sale.ID, 0, "", v).Slice()
		if err != nil || res[0] != int64(0) {
			t.Fatalf("reserve %s: %v, %v", o.id, res, err)
		}
	}
	var gone flashgate.Order
	for _, o := range cptest.Persist(t, ctx, e.rdb, db, tag) {
		if o.ID == "go" {
			gone = o
		}
	}
	store.at[dbAt] = append(store.at[dbAt], func() {
		if _, err := db.Transition(ctx, gone.ID, []flashgate.OrderStatus{flashgate.StatusPendingPayment}, flashgate.StatusCancelled, e.clock.Now()); err != nil {
			t.Errorf("Transition: %v", err)
		}
	})
	store.at[redisAt] = append(store.at[redisAt], func() {
		if err := lua.Release.Run(ctx, e.rdb, lua.ReleaseKeys(tag), gone.ID, gone.UserID, gone.Quantity, gone.Variant).Err(); err != nil {
			t.Errorf("Release: %v", err)
		}
	})
	rctx := fencing.WithValue(ctx, e.takeFence())
	_, after, err := e.k.Resync(rctx, sale)
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
	check := func(when string) {
		t.Helper()
		if got := cptest.Field(t, e.rdb, tag, lua.FieldBooked); got != 1 {
			t.Fatalf("%s: bucket booked %d, want 1", when, got)
		}
		if !variants {
			return
		}
		for v, want := range map[string]int64{"A": 0, "B": 1} {
			if got := cptest.Field(t, e.rdb, tag, lua.VariantField(v, lua.FieldBooked)); got != want {
				t.Fatalf("%s: variant %s booked %d, want %d", when, v, got, want)
			}
		}
	}
	check("after the release")
	if _, _, err := e.k.Resync(fencing.WithValue(ctx, e.takeFence()), sale); err != nil {
		t.Fatalf("second Resync: %v", err)
	}
	check("after a second re-sync")
}
