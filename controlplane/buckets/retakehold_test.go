package buckets

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/internal/cptest"
	"github.com/flashgate/flashgate/controlplane/internal/fencing"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/internal/testenv/testclock"
	"github.com/flashgate/flashgate/lua"
	"github.com/flashgate/flashgate/sqldb"
)

// pendingStore is the database with the pending retakes a test says.
type pendingStore struct {
	*sqldb.DB
	pending []flashgate.Order
}

func (p *pendingStore) PendingRetakes(context.Context, string) ([]flashgate.Order, error) {
	return p.pending, nil
}

// TestBucketRebuildHoldsPendingRetake: a bucketed sale Redis lost while a
// late payment's retake was pending (recorded in the database, taken in
// the lost bucket) is rebuilt with the retake's unit held in its order's
// bucket, as the one-bucket re-sync holds it: the settler past the retake
// may still honour it, so the unit does not sell again; the refund's
// unretake gives it back. Before, a bucket's rebuild read no pending
// retakes and the unit was free in the rebuilt bucket.
func TestBucketRebuildHoldsPendingRetake(t *testing.T) {
	for _, variants := range []bool{false, true} {
		t.Run("variants="+strconv.FormatBool(variants), func(t *testing.T) { testBucketRebuildHoldsPendingRetake(t, variants) })
	}
}

func testBucketRebuildHoldsPendingRetake(t *testing.T, variants bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db := cptest.OpenDB(t, cptest.SQLiteDSN(t))
	store := &pendingStore{DB: db}
	e := &env{t: t, ctx: ctx, db: db, clock: testclock.New(time.Date(2030, 5, 1, 12, 0, 0, 0, time.UTC))}
	e.rdb = redistest.Start(t).Client(t)
	e.k = New(Config{Redis: e.rdb, Store: store, Logger: cptest.QuietLogger(), Clock: e.clock})
	sale := flashgate.Sale{ID: "held", Name: "Held", Total: 2, Buckets: 2, PerUser: 1, PriceCents: 100}
	v := ""
	if variants {
		sale.Variants = []flashgate.Variant{{ID: "A", Name: "A", Total: 1}, {ID: "B", Name: "B", Total: 1}}
		v = "A"
	}
	sale = e.startBucketed(sale)
	l := Layout(sale)
	// o1, of a buyer whose home is bucket 0, reserved and stored; it
	// expires, and its late payment's retake is pending when Redis loses
	// the sale.
	u := "u0"
	for i := 0; l.Home(u) != 0; i++ {
		u = "u" + strconv.Itoa(i)
	}
	res, err := lua.Reserve.Run(ctx, e.rdb, lua.ReserveKeys(l.Tag(0)), "o1", u, 1, e.clock.Now().UnixMilli(), sale.ID, 0, "", v).Slice()
	if err != nil || res[0] != int64(0) {
		t.Fatalf("reserve o1: %v, %v", res, err)
	}
	o1 := cptest.Persist(t, ctx, e.rdb, db, l.Tag(0))[0]
	if _, err := db.Transition(ctx, o1.ID, []flashgate.OrderStatus{flashgate.StatusPendingPayment}, flashgate.StatusExpired, e.clock.Now()); err != nil {
		t.Fatalf("Transition: %v", err)
	}
	store.pending = []flashgate.Order{o1}
	if err := e.rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	booked := func() (sum int64) {
		for _, tag := range l.Tags() {
			sum += cptest.Field(t, e.rdb, tag, lua.FieldBooked)
		}
		return sum
	}
	for i := range 2 { // rebuilt, then reopened
		if _, _, err := e.k.Resync(fencing.WithValue(ctx, e.takeFence()), sale); err != nil {
			t.Fatalf("Resync %d: %v", i, err)
		}
	}
	if got := cptest.Field(t, e.rdb, l.Tag(0), lua.FieldBooked); got != 1 {
		t.Fatalf("after the rebuild: bucket 0 booked %d, want 1 (o1's pending retake held)", got)
	}
	if variants {
		if got := cptest.Field(t, e.rdb, l.Tag(0), lua.VariantField("A", lua.FieldBooked)); got != 1 {
			t.Fatalf("after the rebuild: bucket 0's variant A booked %d, want 1", got)
		}
	}
	// The late payment is refunded: its unretake gives the unit back.
	store.pending = nil
	if n, err := lua.Unretake.Run(ctx, e.rdb, lua.UnretakeKeys(l.Tag(0)), o1.ID, o1.UserID, 1, o1.Variant, "1").Int(); err != nil || n != 1 {
		t.Fatalf("unretake: got %d, %v; want 1 (given back)", n, err)
	}
	if _, _, err := e.k.Resync(fencing.WithValue(ctx, e.takeFence()), sale); err != nil {
		t.Fatalf("Resync after the refund: %v", err)
	}
	if got := booked(); got != 0 {
		t.Fatalf("after the refund: buckets' booked add up to %d, want 0", got)
	}
}
