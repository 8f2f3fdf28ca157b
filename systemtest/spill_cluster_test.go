package systemtest

import (
	"errors"
	"strconv"
	"sync"
	"testing"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/lua"
)

// TestSpillOnCluster: a sale of 30 units in 3 buckets on a real Redis
// Cluster of 3 primaries, and a crowd whose buyers all have bucket 0 as
// their home, 8 at a time. Through the spill path they buy every unit, the
// 20 held by the other buckets (on the other primaries) included, nobody
// twice; each spilled order's row carries its own bucket, its home holds
// its marker, and no claim is left.
func TestSpillOnCluster(t *testing.T) {
	cl := testCluster.Get(t)
	cc := cl.Client(t, false)
	s := newBucketSystem(t, cc)
	ctx := s.ctx
	const sale, total, n, buyers = "spill-hot", 30, 3, 120
	created, err := s.cp.CreateSale(ctx, flashgate.Sale{ID: sale, Name: "Hot", PriceCents: 100, Total: total, Buckets: n})
	if err != nil {
		t.Fatal(err)
	}
	l := lua.Layout{Sale: sale, Salts: created.BucketSalts}
	primaries := map[string]bool{}
	for _, tag := range l.Tags() {
		c, err := cc.MasterForKey(ctx, lua.SaleKey(tag))
		if err != nil {
			t.Fatal(err)
		}
		primaries[c.Options().Addr] = true
	}
	if len(primaries) != n {
		t.Fatalf("buckets on %d primaries, want %d", len(primaries), n)
	}
	if err := s.cp.Start(ctx, sale); err != nil {
		t.Fatal(err)
	}
	var users []string
	for i := 0; len(users) < buyers; i++ {
		if u := "b" + strconv.Itoa(i); l.Home(u) == 0 {
			users = append(users, u)
		}
	}
	var (
		mu      sync.Mutex
		sold    = map[string]string{} // order → user
		failure error
		wg      sync.WaitGroup
		next    = make(chan string)
	)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for u := range next {
				id, err := s.inv.Reserve(ctx, sale, u, "", 1)
				mu.Lock()
				switch {
				case err == nil:
					sold[id] = u
				case errors.Is(err, flashgate.ErrSoldOut):
				default:
					if failure == nil {
						failure = err
					}
				}
				mu.Unlock()
			}
		}()
	}
	for _, u := range users {
		next <- u
	}
	close(next)
	wg.Wait()
	if failure != nil {
		t.Fatalf("reserve: %v", failure)
	}
	if len(sold) != total {
		t.Fatalf("sold: got %d, want every one of %d", len(sold), total)
	}
	totals, booked := bucketBooked(t, ctx, cc, l)
	for b := range totals {
		if booked[b] != totals[b] {
			t.Errorf("bucket %d: booked %d of %d, want sold out", b, booked[b], totals[b])
		}
	}
	s.drain(t)
	live, err := s.db.LiveOrders(ctx, sale)
	if err != nil {
		t.Fatal(err)
	}
	if len(live) != total {
		t.Fatalf("rows: got %d, want %d", len(live), total)
	}
	users2 := map[string]bool{}
	perBucket := make([]int, n)
	for _, o := range live {
		if users2[o.UserID] {
			t.Errorf("user %s holds two orders", o.UserID)
		}
		users2[o.UserID] = true
		if sold[o.ID] != o.UserID {
			t.Errorf("row %s of %s was not a reserve's answer", o.ID, o.UserID)
		}
		perBucket[o.Bucket]++
		if o.Bucket != 0 {
			if v, _ := cc.HGet(ctx, lua.BuyersKey(l.Tag(0)), o.UserID).Result(); v != lua.SpillMarker(o.ID, o.Bucket) {
				t.Errorf("spilled row %s of %s in bucket %d: home holds %q, want its marker", o.ID, o.UserID, o.Bucket, v)
			}
		}
	}
	for b := range perBucket {
		if int64(perBucket[b]) != totals[b] {
			t.Errorf("bucket %d: %d rows, want its %d units", b, perBucket[b], totals[b])
		}
	}
	if c, _ := cc.ZCard(ctx, lua.ClaimsKey(l.Tag(0))).Result(); c != 0 {
		t.Errorf("claims left: %d, want none", c)
	}
	// A spilled buyer who tries again hears their order.
	for id, u := range sold {
		var pe *flashgate.PurchasedError
		if _, err := s.inv.Reserve(ctx, sale, u, "", 1); !errors.As(err, &pe) || pe.OrderID != id {
			t.Errorf("second reserve of %s: got %v, want already purchased %s", u, err, id)
		}
	}
}
