package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/inventory"
	"github.com/flashgate/flashgate/lua"
)

// prepBucketed creates a bucketed sale in Redis, open, with the units of
// each bucket as given.
func prepBucketed(t testing.TB, rdb redis.UniversalClient, id string, units ...int64) lua.Layout {
	t.Helper()
	l := lua.Layout{Sale: id}
	var total int64
	for b, u := range units {
		l.Salts = append(l.Salts, b+1)
		total += u
	}
	if err := lua.Prepare.Run(context.Background(), rdb, lua.SaleKeys(id), total, total*2, 1, 500, l.String()).Err(); err != nil {
		t.Fatal(err)
	}
	for b, u := range units {
		prepSale(t, rdb, l.Tag(b), u, 1, "open")
	}
	return l
}

// homeUsers returns n user ids whose home bucket is b.
func homeUsers(l lua.Layout, b, n int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		if u := "user" + strconv.Itoa(i); l.Home(u) == b {
			out = append(out, u)
		}
	}
	return out
}

// TestSpill: a buyer whose home bucket is sold out buys in another bucket
// (marker at home, the order's entry carrying its own bucket), hears their
// order when trying again, hears "retry" while a spill of theirs is
// pending, and hears sold out, leaving no claim, once no bucket has units;
// a release of a spilled order clears its marker.
func TestSpill(t *testing.T) {
	_, rdb := newRedis(t)
	ctx := context.Background()
	svc := inventory.New(rdb, inventory.Config{Logger: quiet()})
	l := prepBucketed(t, rdb, "sp", 1, 2)
	u := homeUsers(l, 0, 5)
	home := l.Tag(0)

	if _, err := svc.Reserve(ctx, "sp", u[0], "", 1); err != nil {
		t.Fatalf("home reserve: %v", err)
	}
	spilled, err := svc.Reserve(ctx, "sp", u[1], "", 1)
	if err != nil {
		t.Fatalf("spill reserve: %v", err)
	}
	if v, _ := rdb.HGet(ctx, lua.BuyersKey(home), u[1]).Result(); v != lua.SpillMarker(spilled, 1) {
		t.Fatalf("home entry: got %q, want %q", v, lua.SpillMarker(spilled, 1))
	}
	if v, _ := rdb.HGet(ctx, lua.BuyersKey(l.Tag(1)), u[1]).Result(); v != spilled {
		t.Fatalf("spill bucket entry: got %q, want %q", v, spilled)
	}
	entries, err := rdb.XRange(ctx, lua.OrdersKey(l.Tag(1)), "-", "+").Result()
	if err != nil || len(entries) != 1 || entry(entries[0]).Bucket != "1" || entry(entries[0]).Order != spilled {
		t.Fatalf("spill bucket stream: got %v, %v; want one entry of %s in bucket 1", entries, err, spilled)
	}
	var pe *flashgate.PurchasedError
	if _, err := svc.Reserve(ctx, "sp", u[1], "", 1); !errors.As(err, &pe) || pe.OrderID != spilled {
		t.Fatalf("second reserve: got %v, want already purchased %s", err, spilled)
	}
	if id, err := svc.ReserveOrder(ctx, spilled, "sp", u[1], "", 1); err != nil || id != spilled {
		t.Fatalf("retried reserve: got %q, %v; want %s", id, err, spilled)
	}

	// A spill of u[2] in flight: its other attempts are told to retry.
	if err := lua.Claim.Run(ctx, rdb, lua.ClaimKeys(home), u[2], "pending1", 1).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Reserve(ctx, "sp", u[2], "", 1); !errors.Is(err, flashgate.ErrUnavailable) {
		t.Fatalf("reserve during a pending spill: got %v, want ErrUnavailable", err)
	}
	if err := lua.Unclaim.Run(ctx, rdb, lua.UnclaimKeys(home), u[2], "pending1").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Reserve(ctx, "sp", u[2], "", 1); err != nil {
		t.Fatalf("spill of the last unit: %v", err)
	}
	if _, err := svc.Reserve(ctx, "sp", u[3], "", 1); !errors.Is(err, flashgate.ErrSoldOut) {
		t.Fatalf("reserve with no unit anywhere: got %v, want sold out", err)
	}
	if v, _ := rdb.HGet(ctx, lua.BuyersKey(home), u[3]).Result(); v != "" {
		t.Errorf("a sold-out buyer's home entry: got %q, want none", v)
	}
	if n, _ := rdb.ZCard(ctx, lua.ClaimsKey(home)).Result(); n != 0 {
		t.Errorf("claims left: %d", n)
	}

	// A release of the spilled order: the unit goes back to bucket 1 and
	// the marker goes, so the buyer may buy again.
	o := flashgate.Order{ID: spilled, SaleID: "sp", UserID: u[1], Quantity: 1, Bucket: 1}
	if ok, err := svc.Release(ctx, o); !ok || err != nil {
		t.Fatalf("release: got %v, %v", ok, err)
	}
	if v, _ := rdb.HGet(ctx, lua.BuyersKey(home), u[1]).Result(); v != "" {
		t.Fatalf("home entry after the release: got %q, want none", v)
	}
	again, err := svc.Reserve(ctx, "sp", u[1], "", 1)
	if err != nil {
		t.Fatalf("reserve after the release: %v", err)
	}
	if n, err := svc.ReleaseBatch(ctx, []flashgate.Order{{ID: again, SaleID: "sp", UserID: u[1], Quantity: 1, Bucket: 1}}); n != 1 || err != nil {
		t.Fatalf("batch release: got %d, %v", n, err)
	}
	if v, _ := rdb.HGet(ctx, lua.BuyersKey(home), u[1]).Result(); v != "" {
		t.Fatalf("home entry after the batch release: got %q, want none", v)
	}

	// A buyer holding an order in bucket 1 whose marker their home lost:
	// the spill finds that order, answers it and puts its marker back.
	if err := rdb.HSet(ctx, lua.BuyersKey(l.Tag(1)), u[4], "lost1").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Reserve(ctx, "sp", u[4], "", 1); !errors.As(err, &pe) || pe.OrderID != "lost1" {
		t.Fatalf("reserve of a buyer holding an order elsewhere: got %v, want already purchased lost1", err)
	}
	if v, _ := rdb.HGet(ctx, lua.BuyersKey(home), u[4]).Result(); v != lua.SpillMarker("lost1", 1) {
		t.Fatalf("home entry: got %q, want %q", v, lua.SpillMarker("lost1", 1))
	}
}

// TestSpillOneUserAtOnce: many attempts of one buyer whose home bucket is
// sold out, at once, while another bucket has units: exactly one order.
func TestSpillOneUserAtOnce(t *testing.T) {
	_, rdb := newRedis(t)
	ctx := context.Background()
	svc := inventory.New(rdb, inventory.Config{Logger: quiet()})
	l := prepBucketed(t, rdb, "sp1", 0, 20)
	u := homeUsers(l, 0, 1)[0]
	var (
		mu  sync.Mutex
		ids = map[string]bool{}
		wg  sync.WaitGroup
	)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id, err := svc.Reserve(ctx, "sp1", u, "", 1)
			var pe *flashgate.PurchasedError
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ids[id] = true
			case errors.As(err, &pe), errors.Is(err, flashgate.ErrUnavailable):
			default:
				t.Errorf("reserve: %v", err)
			}
		}()
	}
	wg.Wait()
	if len(ids) != 1 {
		t.Fatalf("orders of one user: got %v, want one", ids)
	}
	if n, _ := rdb.HGet(ctx, lua.SaleKey(l.Tag(1)), lua.FieldBooked).Int64(); n != 1 {
		t.Errorf("bucket 1 booked: got %d, want 1", n)
	}
}

// BenchmarkReserveBucketed compares one reserve of a new buyer of a
// 2-bucket sale in their home bucket, through the spill path (home sold
// out, the other bucket stocked), and turned away with no unit anywhere
// (a home sold-out answer and the read of the other bucket).
func BenchmarkReserveBucketed(b *testing.B) {
	for _, bc := range []struct {
		name       string
		home, away int64
		want       error
	}{{"home", 1 << 50, 0, nil}, {"spill", 0, 1 << 50, nil}, {"sold-out", 0, 0, flashgate.ErrSoldOut}} {
		b.Run(bc.name, func(b *testing.B) {
			_, rdb := newRedis(b)
			l := lua.Layout{Sale: "bench", Salts: []int{1, 2}}
			if err := lua.Prepare.Run(context.Background(), rdb, lua.SaleKeys("bench"), 1<<50, 1<<50, 1, 500, l.String()).Err(); err != nil {
				b.Fatal(err)
			}
			prepSale(b, rdb, l.Tag(0), bc.home, 1, "open")
			prepSale(b, rdb, l.Tag(1), bc.away, 1, "open")
			svc := inventory.New(rdb, inventory.Config{Logger: quiet()})
			users := homeUsers(l, 0, b.N)
			var n atomic.Int64
			ctx := context.Background()
			b.SetParallelism(16)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := svc.Reserve(ctx, "bench", users[n.Add(1)-1], "", 1); !errors.Is(err, bc.want) {
						b.Errorf("got %v, want %v", err, bc.want)
						return
					}
				}
			})
		})
	}
}

// TestSpillVariant: on a bucketed sale sold in variants, a buyer whose
// home bucket sold out of their size buys it in a bucket that still has
// it (the entry names the size), never in a bucket that has only other
// sizes; once no bucket has their size they hear sold out while other
// sizes still sell. Both the batched and the single reserve.
func TestSpillVariant(t *testing.T) {
	for _, c := range []struct {
		name  string
		batch int
	}{{"single", 1}, {"batched", 0}} {
		t.Run(c.name, func(t *testing.T) {
			_, rdb := newRedis(t)
			ctx := context.Background()
			svc := inventory.New(rdb, inventory.Config{Logger: quiet(), MaxReserveBatch: c.batch})
			id := "spv"
			l := lua.Layout{Sale: id, Salts: []int{1, 2, 3}}
			if err := lua.Prepare.Run(ctx, rdb, lua.SaleKeys(id), 6, 12, 1, 500, l.String(), "", "S:3,M:3").Err(); err != nil {
				t.Fatal(err)
			}
			// Bucket 0 holds one S, bucket 1 two M, bucket 2 two S and one M.
			for b, spec := range []string{"S:1,M:0", "S:0,M:2", "S:2,M:1"} {
				total := []int64{1, 2, 3}[b]
				if err := lua.Prepare.Run(ctx, rdb, lua.SaleKeys(l.Tag(b)), total, 0, 1, 500, "", "", spec).Err(); err != nil {
					t.Fatal(err)
				}
				if err := lua.SetState.Run(ctx, rdb, lua.SaleKeys(l.Tag(b)), "open").Err(); err != nil {
					t.Fatal(err)
				}
			}
			u := homeUsers(l, 0, 6)
			want := func(user, variant string, bucket int) {
				t.Helper()
				order, err := svc.Reserve(ctx, id, user, variant, 1)
				if err != nil {
					t.Fatalf("%s buying %s: %v", user, variant, err)
				}
				entries, err := rdb.XRange(ctx, lua.OrdersKey(l.Tag(bucket)), "-", "+").Result()
				if err != nil {
					t.Fatal(err)
				}
				for _, m := range entries {
					if e := entry(m); e.Order == order {
						if e.Variant != variant || e.Bucket != strconv.Itoa(bucket) {
							t.Errorf("%s's order: got variant %q bucket %q, want %s in %d", user, e.Variant, e.Bucket, variant, bucket)
						}
						return
					}
				}
				t.Errorf("%s's order %s is not in bucket %d's stream", user, order, bucket)
			}
			want(u[0], "S", 0) // home has it
			want(u[1], "S", 2) // home sold out of S: bucket 2 has two
			want(u[2], "M", 1) // home never had M: bucket 1 has the most
			want(u[3], "S", 2)
			if _, err := svc.Reserve(ctx, id, u[4], "S", 1); !errors.Is(err, flashgate.ErrSoldOut) {
				t.Errorf("S everywhere sold out: got %v, want sold out", err)
			}
			if v, _ := rdb.HGet(ctx, lua.BuyersKey(l.Tag(0)), u[4]).Result(); v != "" {
				t.Errorf("a sold-out spill left %q in the home bucket", v)
			}
			want(u[5], "M", 1) // M still sells
			for b, w := range []string{"1,0", "0,2", "2,0"} {
				h, _ := rdb.HMGet(ctx, lua.SaleKey(l.Tag(b)), lua.VariantField("S", lua.FieldBooked), lua.VariantField("M", lua.FieldBooked)).Result()
				if got := fmt.Sprintf("%v,%v", h[0], h[1]); got != w {
					t.Errorf("bucket %d booked S,M: got %s, want %s", b, got, w)
				}
			}
		})
	}
}
