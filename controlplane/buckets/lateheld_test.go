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

// readsStore is the database with the pending retakes a test says, one
// answer per read (the last one repeated).
type readsStore struct {
	*sqldb.DB
	reads [][]flashgate.Order
}

func (p *readsStore) PendingRetakes(context.Context, string) ([]flashgate.Order, error) {
	r := p.reads[0]
	if len(p.reads) > 1 {
		p.reads = p.reads[1:]
	}
	return r, nil
}

// TestBucketRebuildHoldsLateRowInShare: a late payment's retake whose
// pending row is written after a bucketed rebuild's first read (and whose
// retake took the unit in the lost bucket before the loss) is held by the
// rebuild's second read, in its order's bucket. The bucket's rebuilt total
// must leave room for it: else the held unit is clamped away (booked <=
// total) while the free unit the shares computed from the first read alone
// goes to another bucket, which sells it; the settler past the retake then
// honours it and the sale ends with total + 1 live units.
func TestBucketRebuildHoldsLateRowInShare(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db := cptest.OpenDB(t, cptest.SQLiteDSN(t))
	store := &readsStore{DB: db}
	e := &env{t: t, ctx: ctx, db: db, clock: testclock.New(time.Date(2030, 5, 1, 12, 0, 0, 0, time.UTC))}
	e.rdb = redistest.Start(t).Client(t)
	e.k = New(Config{Redis: e.rdb, Store: store, Logger: cptest.QuietLogger(), Clock: e.clock})
	sale := e.startBucketed(flashgate.Sale{ID: "lateheld", Name: "Late", Total: 2, Buckets: 2, PerUser: 1, PriceCents: 100})
	l := Layout(sale)
	// home is the (skip+1)th user at home in bucket b.
	home := func(b, skip int) string {
		for i := 0; ; i++ {
			if u := "u" + strconv.Itoa(i); l.Home(u) == b {
				if skip == 0 {
					return u
				}
				skip--
			}
		}
	}
	// Each bucket holds one of the sale's two units. o0, at home in
	// bucket 0, holds its unit (stored, live); o1, at home in bucket 1,
	// reserves that bucket's unit and expires (its release delivered).
	res0, err := lua.Reserve.Run(ctx, e.rdb, lua.ReserveKeys(l.Tag(0)), "o0", home(0, 0), 1, e.clock.Now().UnixMilli(), sale.ID, 0, "", "").Slice()
	if err != nil || res0[0] != int64(0) {
		t.Fatalf("reserve o0: %v, %v", res0, err)
	}
	cptest.Persist(t, ctx, e.rdb, db, l.Tag(0))
	u1 := home(1, 0)
	res, err := lua.Reserve.Run(ctx, e.rdb, lua.ReserveKeys(l.Tag(1)), "o1", u1, 1, e.clock.Now().UnixMilli(), sale.ID, 1, "", "").Slice()
	if err != nil || res[0] != int64(0) {
		t.Fatalf("reserve o1: %v, %v", res, err)
	}
	o1 := cptest.Persist(t, ctx, e.rdb, db, l.Tag(1))[0]
	if _, err := db.Transition(ctx, o1.ID, []flashgate.OrderStatus{flashgate.StatusPendingPayment}, flashgate.StatusExpired, e.clock.Now()); err != nil {
		t.Fatalf("Transition: %v", err)
	}
	if n, err := lua.Release.Run(ctx, e.rdb, lua.ReleaseKeys(l.Tag(1)), o1.ID, o1.UserID, 1, "").Int(); err != nil || n != 1 {
		t.Fatalf("release o1: %d, %v", n, err)
	}
	// The rebuild's first read finds no pending row; then the settler
	// writes o1's pending row and its retake takes the unit in bucket 1;
	// then Redis loses the sale; the rebuild's second read finds the row.
	store.reads = [][]flashgate.Order{nil, {o1}}
	if code, err := lua.Retake.Run(ctx, e.rdb, lua.RetakeKeys(l.Tag(1)), o1.ID, o1.UserID, 1, "").Int(); err != nil || code != lua.RetakeOK {
		t.Fatalf("retake: got %d, %v; want %d", code, err, lua.RetakeOK)
	}
	if err := e.rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for i := range 2 { // rebuilt, then reopened
		if _, _, err := e.k.Resync(fencing.WithValue(ctx, e.takeFence()), sale); err != nil {
			t.Fatalf("Resync %d: %v", i, err)
		}
	}
	var free int64
	for _, tag := range l.Tags() {
		tot, bk := cptest.Field(t, e.rdb, tag, lua.FieldTotal), cptest.Field(t, e.rdb, tag, lua.FieldBooked)
		t.Logf("%s: total %d booked %d", tag, tot, bk)
		free += tot - bk
	}
	if got := e.rdb.HGet(ctx, lua.RetakeRefusedKey(l.Tag(1)), o1.ID).Val(); got != "6" {
		t.Fatalf("o1's refusal in bucket 1: got %q, want 6 (held)", got)
	}
	// The settler past the retake may still honour o1: its unit is held,
	// and none is left to sell. Before, bucket 1 was rebuilt with total 0
	// (its held unit clamped away) and bucket 0 with the unit free: a
	// buyer at home there takes it, and o1's honour makes three live
	// units of two.
	if free != 0 {
		res, err := lua.Reserve.Run(ctx, e.rdb, lua.ReserveKeys(l.Tag(0)), "o2", home(0, 1), 1, e.clock.Now().UnixMilli(), sale.ID, 0, "", "").Slice()
		t.Fatalf("after the rebuild: %d unit(s) free in the buckets, want 0 (o0 live, o1's retake held); a reserve in bucket 0 then answers %v, %v", free, res, err)
	}
}
