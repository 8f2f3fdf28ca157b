package systemtest

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/inventory"
	"github.com/flashgate/flashgate/lua"
	"github.com/flashgate/flashgate/ordersink"
	"github.com/flashgate/flashgate/sqldb"
)

// bucketSystem is a control plane, an inventory service and an order sink
// over one redis-server and SQLite, without HTTP.
type bucketSystem struct {
	ctx  context.Context
	rdb  redis.UniversalClient
	db   *sqldb.DB
	inv  *inventory.Service
	cp   *controlplane.Service
	sink *ordersink.Drainer
}

func newBucketSystem(t testing.TB, rdb redis.UniversalClient) *bucketSystem {
	t.Helper()
	ctx := context.Background()
	db, err := sqldb.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "fg.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	s := &bucketSystem{ctx: ctx, rdb: rdb, db: db}
	s.inv = inventory.New(rdb, inventory.Config{Logger: quiet})
	s.cp, err = controlplane.New(controlplane.Config{
		Redis: rdb, Store: db, Releaser: s.inv, AdminToken: "bucket-test-token-0123456789", Logger: quiet, PersistWait: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	s.sink = ordersink.New(rdb, db, ordersink.Config{Consumer: "sink", Logger: quiet})
	return s
}

// drain runs the sink until every stream is empty.
func (s *bucketSystem) drain(t testing.TB) {
	t.Helper()
	for i := 0; i < 100; i++ {
		if _, err := s.sink.DrainOnce(s.ctx); err != nil {
			t.Fatalf("DrainOnce: %v", err)
		}
		n, err := s.sink.Backlog(s.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
	}
	t.Fatal("the sink did not drain every bucket's stream")
}

// fataler is what both *testing.T and *rapid.T offer.
type fataler interface {
	Helper()
	Fatal(args ...any)
}

// bucketBooked is each bucket's (total, booked) in Redis.
func bucketBooked(t fataler, ctx context.Context, rdb redis.UniversalClient, l lua.Layout) (totals, booked []int64) {
	t.Helper()
	for _, tag := range l.Tags() {
		v, err := rdb.HMGet(ctx, lua.SaleKey(tag), lua.FieldTotal, lua.FieldBooked).Result()
		if err != nil {
			t.Fatal(err)
		}
		n := func(x any) int64 { s, _ := x.(string); k, _ := strconv.ParseInt(s, 10, 64); return k }
		totals = append(totals, n(v[0]))
		booked = append(booked, n(v[1]))
	}
	return totals, booked
}

// TestBucketedSaleLayer covers a bucketed sale end to end on one Redis:
// placement and shares at creation, reserves in the buyer's home bucket
// only, orders carrying their bucket into the database, a cancel that gives
// the unit back to the order's own bucket, the admin figures summed over
// buckets, and a re-sync that rebuilds every bucket after FLUSHALL without
// letting an earlier buyer buy twice. An unbucketed sale alongside keeps
// today's keys.
func TestBucketedSaleLayer(t *testing.T) {
	srv := redistest.Start(t)
	s := newBucketSystem(t, srv.Client(t))
	ctx := s.ctx
	const sale, total, n = "hot", 10, 4
	created, err := s.cp.CreateSale(ctx, flashgate.Sale{ID: sale, Name: "Hot", PriceCents: 100, Total: total, Buckets: n})
	if err != nil {
		t.Fatal(err)
	}
	if len(created.BucketSalts) != n {
		t.Fatalf("salts: got %v, want %d", created.BucketSalts, n)
	}
	if _, err := s.cp.CreateSale(ctx, flashgate.Sale{ID: "plain", Name: "Plain", PriceCents: 100, Total: 3, Buckets: 1}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []int{-1, 65} {
		_, err := s.cp.CreateSale(ctx, flashgate.Sale{ID: "bad" + strconv.Itoa(bad+1), Name: "Bad", Total: 100, Buckets: bad})
		if !errors.Is(err, flashgate.ErrBadRequest) {
			t.Errorf("buckets %d: got %v, want ErrBadRequest", bad, err)
		}
	}
	row, err := s.db.Sale(ctx, sale)
	if err != nil {
		t.Fatal(err)
	}
	if row.Buckets != n || len(row.BucketSalts) != n {
		t.Fatalf("stored sale: got buckets %d salts %v, want %d of each", row.Buckets, row.BucketSalts, n)
	}
	l := lua.Layout{Sale: sale, Salts: row.BucketSalts}
	slots := map[int]bool{}
	for _, tag := range l.Tags() {
		slots[lua.Slot(lua.SaleKey(tag))] = true
	}
	if len(slots) != n {
		t.Errorf("bucket slots: got %d distinct, want %d", len(slots), n)
	}
	totals, _ := bucketBooked(t, ctx, s.rdb, l)
	var sum int64
	for b, tt := range totals {
		if tt != 2 && tt != 3 {
			t.Errorf("bucket %d holds %d units, want an even split of %d (2 or 3)", b, tt, total)
		}
		sum += tt
	}
	if sum != total {
		t.Fatalf("buckets' totals: got %d, want %d", sum, total)
	}
	if plain, _ := s.rdb.HGet(ctx, lua.SaleKey("plain"), lua.FieldLayout).Result(); plain != "" {
		t.Errorf("an unbucketed sale has layout %q, want none", plain)
	}
	for _, id := range []string{sale, "plain"} {
		if err := s.cp.Start(ctx, id); err != nil {
			t.Fatal(err)
		}
	}

	// 60 buyers: each bucket sells out, no user twice, each order in its
	// buyer's home bucket or, once that is sold out, spilled to another
	// with a marker at home.
	sold := map[string]string{} // user → order
	for i := 0; i < 60; i++ {
		u := "user" + strconv.Itoa(i)
		id, err := s.inv.Reserve(ctx, sale, u, "", 1)
		switch {
		case err == nil:
			sold[u] = id
		case errors.Is(err, flashgate.ErrSoldOut):
		default:
			t.Fatalf("reserve %s: %v", u, err)
		}
	}
	if len(sold) != total {
		t.Fatalf("sold: got %d, want %d", len(sold), total)
	}
	for u := range sold {
		var pe *flashgate.PurchasedError
		if _, err := s.inv.Reserve(ctx, sale, u, "", 1); !errors.As(err, &pe) || pe.OrderID != sold[u] {
			t.Errorf("second reserve of %s: got %v, want already purchased %s", u, err, sold[u])
		}
	}
	if _, err := s.inv.Reserve(ctx, "plain", "user0", "", 1); err != nil {
		t.Fatalf("unbucketed reserve: %v", err)
	}
	if n, _ := s.rdb.HGet(ctx, lua.SaleKey("plain"), lua.FieldBooked).Int64(); n != 1 {
		t.Errorf("unbucketed sale booked: got %d, want 1 in its own hash", n)
	}
	s.drain(t)
	live, err := s.db.LiveOrders(ctx, sale)
	if err != nil {
		t.Fatal(err)
	}
	if len(live) != total {
		t.Fatalf("live rows: got %d, want %d", len(live), total)
	}
	var spilled []flashgate.Order
	for _, o := range live {
		if h := l.Home(o.UserID); o.Bucket != h {
			spilled = append(spilled, o)
			if v, _ := s.rdb.HGet(ctx, lua.BuyersKey(l.Tag(h)), o.UserID).Result(); v != lua.SpillMarker(o.ID, o.Bucket) {
				t.Errorf("spilled order %s of %s in bucket %d: home %d holds %q, want its marker", o.ID, o.UserID, o.Bucket, h, v)
			}
		}
		if sold[o.UserID] != o.ID {
			t.Errorf("row %s of %s was not a reserve's answer", o.ID, o.UserID)
		}
	}
	if len(spilled) == 0 {
		t.Fatalf("no order spilled out of its home bucket")
	}
	st, err := s.cp.SaleStatus(ctx, sale)
	if err != nil {
		t.Fatal(err)
	}
	if st.Booked != total || st.Remaining != 0 || st.Buckets != n || len(st.BucketFigures) != n {
		t.Fatalf("status: got booked %d remaining %d buckets %d figures %d, want %d, 0, %d, %d",
			st.Booked, st.Remaining, st.Buckets, len(st.BucketFigures), total, n, n)
	}

	// A cancel gives the unit back to the order's own bucket.
	victim := live[0]
	if _, err := s.cp.Cancel(ctx, victim.ID, victim.UserID); err != nil {
		t.Fatal(err)
	}
	_, booked := bucketBooked(t, ctx, s.rdb, l)
	totals, _ = bucketBooked(t, ctx, s.rdb, l)
	if booked[victim.Bucket] != totals[victim.Bucket]-1 {
		t.Fatalf("after the cancel bucket %d: booked %d of %d, want one free", victim.Bucket, booked[victim.Bucket], totals[victim.Bucket])
	}
	var again string
	for i := 60; again == "" && i < 400; i++ {
		u := "user" + strconv.Itoa(i)
		if l.Home(u) != victim.Bucket {
			continue
		}
		id, err := s.inv.Reserve(ctx, sale, u, "", 1)
		if err != nil {
			t.Fatalf("reserve of the freed unit by %s: %v", u, err)
		}
		again, sold[u] = u, id
	}
	s.drain(t)

	// Redis loses everything: the re-sync rebuilds the sale hash with its
	// layout and every bucket, paused one pass, then open; buyers restored.
	if err := s.rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, _, err := s.cp.Resync(ctx, sale); err != nil {
			t.Fatal(err)
		}
	}
	if v, _ := s.rdb.HGet(ctx, lua.SaleKey(sale), lua.FieldLayout).Result(); v != l.String() {
		t.Fatalf("rebuilt layout: got %q, want %q", v, l.String())
	}
	totals, booked = bucketBooked(t, ctx, s.rdb, l)
	sum = 0
	for b := range totals {
		if booked[b] != totals[b] {
			t.Errorf("rebuilt bucket %d: booked %d of %d, want sold out", b, booked[b], totals[b])
		}
		sum += totals[b]
	}
	if sum != total {
		t.Errorf("rebuilt buckets' totals: got %d, want %d", sum, total)
	}
	var pe *flashgate.PurchasedError
	if _, err := s.inv.Reserve(ctx, sale, again, "", 1); !errors.As(err, &pe) {
		t.Errorf("after the rebuild %s reserves again: got %v, want already purchased", again, err)
	}
	if _, err := s.inv.Reserve(ctx, sale, victim.UserID, "", 1); !errors.Is(err, flashgate.ErrSoldOut) {
		t.Errorf("after the rebuild the cancelled buyer's home bucket: got %v, want sold out", err)
	}
	// A spilled buyer's marker came back with their home bucket.
	for _, o := range spilled {
		if o.ID == victim.ID {
			continue
		}
		if _, err := s.inv.Reserve(ctx, sale, o.UserID, "", 1); !errors.As(err, &pe) || pe.OrderID != o.ID {
			t.Errorf("after the rebuild spilled buyer %s reserves again: got %v, want already purchased %s", o.UserID, err, o.ID)
		}
	}
	// The settlement of the closed sale adds its buckets up.
	if err := s.cp.Stop(ctx, sale); err != nil {
		t.Fatal(err)
	}
	st, err = s.cp.SaleStatus(ctx, sale)
	if err != nil {
		t.Fatal(err)
	}
	if se := st.Settlement; se == nil || !se.Settled || se.RedisBooked != total || se.DBLiveUnits != total || se.Difference != 0 {
		t.Errorf("settlement: got %+v, want settled, %d booked and live, difference 0", se, total)
	}
}

// TestBucketLayoutHome pins the home bucket hash (FNV-1a 64 mod N): buyers
// never move between buckets across releases of the code.
func TestBucketLayoutHome(t *testing.T) {
	l := lua.Layout{Sale: "s", Salts: []int{0, 1, 2}}
	for _, tc := range []struct {
		user string
		n    int
		want int
	}{{"alice", 3, 2}, {"bob", 3, 0}, {"u1", 7, 2}} {
		if got := lua.HomeBucket(tc.user, tc.n); got != tc.want {
			t.Errorf("HomeBucket(%q, %d): got %d, want %d", tc.user, tc.n, got, tc.want)
		}
	}
	if got := (lua.Layout{Sale: "s"}).Home("alice"); got != 0 {
		t.Errorf("unbucketed Home: got %d, want 0", got)
	}
	counts := make([]int, 3)
	for i := 0; i < 30000; i++ {
		counts[l.Home("u"+strconv.Itoa(i))]++
	}
	for b, c := range counts {
		if c < 9000 || c > 11000 {
			t.Errorf("bucket %d is home to %d of 30000 users, want about 10000", b, c)
		}
	}
}
