package lua_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strconv"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/lua"
)

// backend is one Redis the scripts must behave the same on.
type backend struct {
	name string
	rdb  *redis.Client
	real bool
}

// backends returns a real redis-server and a miniredis (the demo's store).
// Each case flushes the store first.
func backends(t *testing.T) []backend {
	t.Helper()
	srv := redistest.Start(t)
	m := miniredis.RunT(t)
	mc := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = mc.Close() })
	return []backend{
		{name: "redis-server", rdb: srv.Client(t), real: true},
		{name: "miniredis", rdb: mc},
	}
}

// forEach runs fn on each backend with an empty store.
func forEach(t *testing.T, bs []backend, name string, fn func(t *testing.T, ctx context.Context, rdb *redis.Client)) {
	t.Helper()
	for _, b := range bs {
		t.Run(b.name+"/"+name, func(t *testing.T) {
			ctx := context.Background()
			if err := b.rdb.FlushAll(ctx).Err(); err != nil {
				t.Fatalf("FLUSHALL: %v", err)
			}
			fn(t, ctx, b.rdb)
		})
	}
}

// sale describes the sale a case starts from.
type sale struct {
	absent  bool
	total   int
	perUser int
	price   int
	state   string // "" (as prepared: not started), "open" or "close"
	resume  string // "" none, else the resume field (a paused sale)
}

const saleID = "s1"

func prepare(t *testing.T, ctx context.Context, rdb *redis.Client, s sale) {
	t.Helper()
	if s.absent {
		return
	}
	if s.perUser == 0 {
		s.perUser = 1
	}
	n, err := lua.Prepare.Run(ctx, rdb, lua.SaleKeys(saleID),
		s.total, s.total*3/2, s.perUser, s.price).Int64()
	if err != nil || n != 1 {
		t.Fatalf("Prepare: got %d, %v; want 1, nil", n, err)
	}
	if s.state != "" {
		if n, err := lua.SetState.Run(ctx, rdb, lua.SaleKeys(saleID), s.state).Int64(); err != nil || n != 1 {
			t.Fatalf("SetState %s: got %d, %v; want 1, nil", s.state, n, err)
		}
	}
	if s.resume != "" {
		if err := rdb.HSet(ctx, lua.SaleKey(saleID), lua.FieldResume, s.resume).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

func reserve(ctx context.Context, rdb *redis.Client, order, user, qty string) ([]any, error) {
	return lua.Reserve.Run(ctx, rdb,
		lua.ReserveKeys(saleID),
		order, user, qty, 1700000000123, saleID).Slice()
}

func release(ctx context.Context, rdb *redis.Client, order, user, qty string) (int64, error) {
	return lua.Release.Run(ctx, rdb,
		lua.ReleaseKeys(saleID),
		order, user, qty).Int64()
}

func hget(t *testing.T, ctx context.Context, rdb *redis.Client, key, field string) string {
	t.Helper()
	v, err := rdb.HGet(ctx, key, field).Result()
	if err == redis.Nil {
		return ""
	}
	if err != nil {
		t.Fatalf("HGET %s %s: %v", key, field, err)
	}
	return v
}

type call struct{ order, user, qty string }

func TestReserve(t *testing.T) {
	bs := backends(t)
	open := sale{total: 3, perUser: 2, price: 999, state: "open"}
	cases := []struct {
		name       string
		sale       sale
		before     []call // each must reserve
		call       call
		wantCode   int64
		wantOrder  string
		wantBooked string // "" when the sale is absent
	}{
		{"reserved", open, nil, call{"o1", "u1", "1"}, lua.ReserveOK, "o1", "1"},
		{"reserved two", open, nil, call{"o1", "u1", "2"}, lua.ReserveOK, "o1", "2"},
		{"last units", open, []call{{"o1", "u1", "2"}}, call{"o2", "u2", "1"}, lua.ReserveOK, "o2", "3"},
		{"no sale", sale{absent: true}, nil, call{"o1", "u1", "1"}, lua.ReserveNoSale, "", ""},
		{"not started", sale{total: 3}, nil, call{"o1", "u1", "1"}, lua.ReserveNotStarted, "", "0"},
		{"closed", sale{total: 3, state: "close"}, nil, call{"o1", "u1", "1"}, lua.ReserveClosed, "", "0"},
		{"paused for a rebuild", sale{total: 3, resume: "2"}, nil, call{"o1", "u1", "1"}, lua.ReservePaused, "", "0"},
		{"sold out", open, []call{{"o1", "u1", "2"}, {"o2", "u2", "1"}}, call{"o3", "u3", "1"}, lua.ReserveSoldOut, "", "3"},
		{"not enough left", open, []call{{"o1", "u1", "2"}}, call{"o2", "u2", "2"}, lua.ReserveSoldOut, "", "2"},
		{"already purchased", open, []call{{"o1", "u1", "1"}}, call{"o2", "u1", "1"}, lua.ReservePurchased, "o1", "1"},
		{"quantity zero", open, nil, call{"o1", "u1", "0"}, lua.ReserveBadQuantity, "", "0"},
		{"quantity negative", open, nil, call{"o1", "u1", "-1"}, lua.ReserveBadQuantity, "", "0"},
		{"quantity over per_user", open, nil, call{"o1", "u1", "3"}, lua.ReserveBadQuantity, "", "0"},
		{"quantity not a number", open, nil, call{"o1", "u1", "x"}, lua.ReserveBadQuantity, "", "0"},
		{"quantity fractional", open, nil, call{"o1", "u1", "1.5"}, lua.ReserveBadQuantity, "", "0"},
		{"per_user default one", sale{total: 3, state: "open"}, nil, call{"o1", "u1", "2"}, lua.ReserveBadQuantity, "", "0"},
	}
	for _, tc := range cases {
		forEach(t, bs, tc.name, func(t *testing.T, ctx context.Context, rdb *redis.Client) {
			prepare(t, ctx, rdb, tc.sale)
			for _, c := range tc.before {
				res, err := reserve(ctx, rdb, c.order, c.user, c.qty)
				if err != nil || res[0] != int64(lua.ReserveOK) {
					t.Fatalf("setup reserve %v: got %v, %v; want code 0", c, res, err)
				}
			}
			res, err := reserve(ctx, rdb, tc.call.order, tc.call.user, tc.call.qty)
			if err != nil {
				t.Fatalf("Reserve: %v", err)
			}
			if want := []any{tc.wantCode, tc.wantOrder}; !reflect.DeepEqual(res, want) {
				t.Errorf("Reserve: got %v, want %v", res, want)
			}
			if got := hget(t, ctx, rdb, lua.SaleKey(saleID), lua.FieldBooked); got != tc.wantBooked {
				t.Errorf("booked: got %q, want %q", got, tc.wantBooked)
			}
			if tc.sale.absent {
				if n, _ := rdb.Exists(ctx, lua.SaleKey(saleID), lua.BuyersKey(saleID), lua.OrdersKey(saleID)).Result(); n != 0 {
					t.Errorf("keys created for an absent sale: got %d, want 0", n)
				}
			}
			// reserved counts units ever reserved and, with no releases,
			// equals booked; the stream holds one entry per reserve.
			if !tc.sale.absent {
				if got := hget(t, ctx, rdb, lua.SaleKey(saleID), lua.FieldReserved); got != tc.wantBooked {
					t.Errorf("reserved: got %q, want %q", got, tc.wantBooked)
				}
			}
			wantEntries := int64(len(tc.before))
			if tc.wantCode == lua.ReserveOK {
				wantEntries++
			}
			if n, err := rdb.XLen(ctx, lua.OrdersKey(saleID)).Result(); err != nil || n != wantEntries {
				t.Errorf("stream length: got %d, %v; want %d", n, err, wantEntries)
			}
		})
	}
}

func TestReserveStreamEntry(t *testing.T) {
	forEach(t, backends(t), "entry", func(t *testing.T, ctx context.Context, rdb *redis.Client) {
		prepare(t, ctx, rdb, sale{total: 5, perUser: 2, price: 1250, state: "open"})
		if res, err := reserve(ctx, rdb, "01HORDER", "alice", "2"); err != nil || res[0] != int64(0) {
			t.Fatalf("Reserve: got %v, %v; want code 0", res, err)
		}
		msgs, err := rdb.XRange(ctx, lua.OrdersKey(saleID), "-", "+").Result()
		if err != nil || len(msgs) != 1 {
			t.Fatalf("XRANGE: got %d entries, %v; want 1", len(msgs), err)
		}
		want := map[string]any{lua.EntryCompact: "01HORDER 2 1250 1700000000123  alice"}
		if !reflect.DeepEqual(msgs[0].Values, want) {
			t.Errorf("entry: got %v, want %v", msgs[0].Values, want)
		}
		e, ok := lua.ReadEntry(msgs[0].Values)
		if wantE := (lua.Entry{Order: "01HORDER", User: "alice", Quantity: "2", Price: "1250", Time: "1700000000123", Compact: true}); !ok || e != wantE {
			t.Errorf("ReadEntry: got %+v, %v; want %+v", e, ok, wantE)
		}
		if got := hget(t, ctx, rdb, lua.BuyersKey(saleID), "alice"); got != "01HORDER" {
			t.Errorf("buyer: got %q, want %q", got, "01HORDER")
		}
	})
}

func TestRelease(t *testing.T) {
	bs := backends(t)
	open := sale{total: 3, perUser: 2, state: "open"}
	cases := []struct {
		name        string
		sale        sale
		before      []call // reserves
		releases    []call // releases made before the one judged
		call        call
		want        int64
		wantBooked  string
		wantBuyer   string // buyer entry of the call's user afterwards
		wantBuyable bool   // another user can then reserve 1 unit
	}{
		{"released", open, []call{{"o1", "u1", "2"}, {"o2", "u2", "1"}}, nil, call{"o1", "u1", "2"}, lua.ReleaseDone, "1", "", true},
		{"released twice", open, []call{{"o1", "u1", "2"}, {"o2", "u2", "1"}}, []call{{"o1", "u1", "2"}}, call{"o1", "u1", "2"}, lua.ReleaseAlready, "1", "", true},
		{"no sale", sale{absent: true}, nil, nil, call{"o1", "u1", "1"}, lua.ReleaseNoSale, "", "", false},
		{"never below zero", open, []call{{"o1", "u1", "1"}}, nil, call{"o1", "u1", "5"}, lua.ReleaseDone, "0", "", true},
		{"buyer holds a newer order", open, []call{{"o1", "u1", "1"}}, nil, call{"o0", "u1", "1"}, lua.ReleaseDone, "0", "o1", true},
	}
	for _, tc := range cases {
		forEach(t, bs, tc.name, func(t *testing.T, ctx context.Context, rdb *redis.Client) {
			prepare(t, ctx, rdb, tc.sale)
			for _, c := range tc.before {
				if res, err := reserve(ctx, rdb, c.order, c.user, c.qty); err != nil || res[0] != int64(0) {
					t.Fatalf("setup reserve %v: got %v, %v", c, res, err)
				}
			}
			for _, c := range tc.releases {
				if n, err := release(ctx, rdb, c.order, c.user, c.qty); err != nil || n != lua.ReleaseDone {
					t.Fatalf("setup release %v: got %d, %v", c, n, err)
				}
			}
			n, err := release(ctx, rdb, tc.call.order, tc.call.user, tc.call.qty)
			if err != nil || n != tc.want {
				t.Fatalf("Release: got %d, %v; want %d", n, err, tc.want)
			}
			if got := hget(t, ctx, rdb, lua.SaleKey(saleID), lua.FieldBooked); got != tc.wantBooked {
				t.Errorf("booked: got %q, want %q", got, tc.wantBooked)
			}
			if got := hget(t, ctx, rdb, lua.BuyersKey(saleID), tc.call.user); got != tc.wantBuyer {
				t.Errorf("buyer %s: got %q, want %q", tc.call.user, got, tc.wantBuyer)
			}
			if tc.sale.absent {
				if n, _ := rdb.Exists(ctx, lua.ReleasedKey(saleID)).Result(); n != 0 {
					t.Errorf("released set created for an absent sale")
				}
				return
			}
			res, err := reserve(ctx, rdb, "onew", "newcomer", "1")
			if err != nil {
				t.Fatalf("Reserve after release: %v", err)
			}
			if got := res[0] == int64(lua.ReserveOK); got != tc.wantBuyable {
				t.Errorf("buyable after release: got %v (%v), want %v", got, res, tc.wantBuyable)
			}
		})
	}
}

func TestReleaseLetsTheUserBuyAgain(t *testing.T) {
	forEach(t, backends(t), "rebuy", func(t *testing.T, ctx context.Context, rdb *redis.Client) {
		prepare(t, ctx, rdb, sale{total: 1, state: "open"})
		if res, _ := reserve(ctx, rdb, "o1", "u1", "1"); res[0] != int64(0) {
			t.Fatalf("first reserve: got %v", res)
		}
		if n, err := release(ctx, rdb, "o1", "u1", "1"); err != nil || n != 1 {
			t.Fatalf("release: got %d, %v; want 1", n, err)
		}
		res, err := reserve(ctx, rdb, "o2", "u1", "1")
		if want := []any{int64(0), "o2"}; err != nil || !reflect.DeepEqual(res, want) {
			t.Fatalf("second reserve: got %v, %v; want %v", res, err, want)
		}
		if got := hget(t, ctx, rdb, lua.SaleKey(saleID), lua.FieldReserved); got != "2" {
			t.Errorf("reserved: got %q, want %q (monotonic)", got, "2")
		}
	})
}

func TestPrepare(t *testing.T) {
	forEach(t, backends(t), "prepare", func(t *testing.T, ctx context.Context, rdb *redis.Client) {
		keys := lua.SaleKeys(saleID)
		// What a Redis loss leaves after a stray counter: not a sale.
		rdb.HSet(ctx, lua.SaleKey(saleID), lua.FieldAccess, 3)
		if n, err := lua.Prepare.Run(ctx, rdb, keys, 100, 150, 2, 1999).Int64(); err != nil || n != 1 {
			t.Fatalf("Prepare: got %d, %v; want 1", n, err)
		}
		got, err := rdb.HGetAll(ctx, lua.SaleKey(saleID)).Result()
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{
			lua.FieldTotal: "100", lua.FieldBooked: "0", lua.FieldReserved: "0",
			lua.FieldStart: "0", lua.FieldClosed: "0", lua.FieldCount: "150",
			lua.FieldAccess: "0", lua.FieldPerUser: "2", lua.FieldPrice: "1999",
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("sale hash: got %v, want %v", got, want)
		}
		if n, _ := rdb.Exists(ctx, lua.SalesKey()).Result(); n != 0 {
			t.Errorf("Prepare wrote %s: a script must touch one sale's keys only", lua.SalesKey())
		}
		// A second Prepare changes nothing, even with other figures.
		rdb.HSet(ctx, lua.SaleKey(saleID), lua.FieldBooked, 7)
		if n, err := lua.Prepare.Run(ctx, rdb, keys, 5, 5, 1, 1).Int64(); err != nil || n != 0 {
			t.Fatalf("second Prepare: got %d, %v; want 0", n, err)
		}
		if got := hget(t, ctx, rdb, lua.SaleKey(saleID), lua.FieldTotal); got != "100" {
			t.Errorf("total after second Prepare: got %q, want %q", got, "100")
		}
		if got := hget(t, ctx, rdb, lua.SaleKey(saleID), lua.FieldBooked); got != "7" {
			t.Errorf("booked after second Prepare: got %q, want %q", got, "7")
		}
	})
}

func TestSetState(t *testing.T) {
	bs := backends(t)
	cases := []struct {
		name       string
		absent     bool
		states     []string
		want       int64
		wantStart  string
		wantClosed string
	}{
		{"open", false, []string{"open"}, 1, "1", "0"},
		{"close", false, []string{"close"}, 1, "0", "1"},
		{"open after close", false, []string{"close", "open"}, 1, "1", "0"},
		{"close after open", false, []string{"open", "close"}, 1, "0", "1"},
		{"no sale", true, []string{"open"}, -1, "", ""},
	}
	for _, tc := range cases {
		forEach(t, bs, tc.name, func(t *testing.T, ctx context.Context, rdb *redis.Client) {
			prepare(t, ctx, rdb, sale{absent: tc.absent, total: 1})
			var n int64
			var err error
			for _, st := range tc.states {
				n, err = lua.SetState.Run(ctx, rdb, lua.SaleKeys(saleID), st).Int64()
			}
			if err != nil || n != tc.want {
				t.Fatalf("SetState: got %d, %v; want %d", n, err, tc.want)
			}
			if got := hget(t, ctx, rdb, lua.SaleKey(saleID), lua.FieldStart); got != tc.wantStart {
				t.Errorf("start: got %q, want %q", got, tc.wantStart)
			}
			if got := hget(t, ctx, rdb, lua.SaleKey(saleID), lua.FieldClosed); got != tc.wantClosed {
				t.Errorf("closed: got %q, want %q", got, tc.wantClosed)
			}
			if tc.absent {
				if n, _ := rdb.Exists(ctx, lua.SaleKey(saleID)).Result(); n != 0 {
					t.Errorf("SetState created the sale hash")
				}
			}
		})
	}
}

// TestRunAfterScriptFlush proves Script.Run falls back to EVAL on NOSCRIPT,
// as after a Redis restart or failover.
func TestRunAfterScriptFlush(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			rdb := b.rdb
			if err := rdb.FlushAll(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			prepare(t, ctx, rdb, sale{total: 10, state: "open"})
			if res, err := reserve(ctx, rdb, "o1", "u1", "1"); err != nil || res[0] != int64(0) {
				t.Fatalf("Reserve before flush: got %v, %v", res, err)
			}
			if err := rdb.ScriptFlush(ctx).Err(); err != nil {
				t.Fatalf("SCRIPT FLUSH: %v", err)
			}
			exists, err := lua.Reserve.Exists(ctx, rdb).Result()
			if err != nil || len(exists) != 1 || exists[0] {
				t.Fatalf("SCRIPT EXISTS after flush: got %v, %v; want [false]", exists, err)
			}
			for i := 2; i <= 3; i++ {
				id := "o" + strconv.Itoa(i)
				res, err := reserve(ctx, rdb, id, "u"+strconv.Itoa(i), "1")
				if want := []any{int64(0), id}; err != nil || !reflect.DeepEqual(res, want) {
					t.Fatalf("Reserve %d after flush: got %v, %v; want %v", i, res, err, want)
				}
			}
			if n, err := release(ctx, rdb, "o1", "u1", "1"); err != nil || n != 1 {
				t.Fatalf("Release after flush: got %d, %v; want 1", n, err)
			}
		})
	}
}

// TestReleaseBadQuantity proves a release with a quantity that is not a whole
// number >= 1 fails before writing, so the order can still be released.
func TestReleaseBadQuantity(t *testing.T) {
	bs := backends(t)
	for _, qty := range []string{"0", "-1", "1.5", "x", ""} {
		forEach(t, bs, "qty "+strconv.Quote(qty), func(t *testing.T, ctx context.Context, rdb *redis.Client) {
			prepare(t, ctx, rdb, sale{total: 1, state: "open"})
			if res, _ := reserve(ctx, rdb, "o1", "u1", "1"); res[0] != int64(0) {
				t.Fatalf("reserve: got %v", res)
			}
			if n, err := release(ctx, rdb, "o1", "u1", qty); err == nil {
				t.Fatalf("Release qty %q: got %d, nil; want an error", qty, n)
			}
			if n, _ := rdb.Exists(ctx, lua.ReleasedKey(saleID)).Result(); n != 0 {
				t.Errorf("released set written by a failed release")
			}
			if n, err := release(ctx, rdb, "o1", "u1", "1"); err != nil || n != 1 {
				t.Errorf("Release after the failed one: got %d, %v; want 1", n, err)
			}
		})
	}
}

// TestReserveManyMatchesReserve runs random sequences of reserves — repeat
// buyers, bad and oversized quantities, a stock that runs out — through
// Reserve one call per order on one sale and through ReserveMany in random
// batches on another, on an open, a closed, a paused and a missing sale,
// bucketed and not, and on an open sale sold in three variants (orders
// naming each, none, or an unknown or malformed one; a batch names a
// variant several times, and one sells out in the middle of a batch), and
// wants the same answer for every order and the same state: counters, each
// variant's figures, buyers and stream entries. On the variant sale some
// orders are released from both sales as they go, so that a variant's
// booked and reserved differ (ReserveMany writes the figures it read and
// counted).
func TestReserveManyMatchesReserve(t *testing.T) {
	const one, many = "one", "many"
	bs := backends(t)
	for _, st := range []struct {
		name  string
		state string // SetState's argument, "" not started
		extra string // a field set on the sale hash
		gone  bool
		spec  string // the variants (Prepare's ARGV[7]), "" none
	}{{name: "open", state: "open"}, {name: "closed", state: "close"}, {name: "paused", extra: lua.FieldResume}, {name: "not started"}, {name: "missing", gone: true},
		{name: "variants", state: "open", spec: "S:10,M:5,L:3"}} {
		for _, bucket := range []string{"", "2"} {
			forEach(t, bs, st.name+"/bucket="+bucket, func(t *testing.T, ctx context.Context, rdb *redis.Client) {
				rng := rand.New(rand.NewPCG(uint64(len(st.name)), uint64(len(bucket))))
				for _, id := range []string{one, many} {
					if st.gone {
						continue
					}
					args := []any{40, 60, 2, 700}
					if st.spec != "" {
						args = []any{18, 60, 2, 700, "", "", st.spec}
					}
					if n, err := lua.Prepare.Run(ctx, rdb, lua.SaleKeys(id), args...).Int64(); err != nil || n != 1 {
						t.Fatalf("Prepare: got %d, %v", n, err)
					}
					if st.state != "" {
						if err := lua.SetState.Run(ctx, rdb, lua.SaleKeys(id), st.state).Err(); err != nil {
							t.Fatal(err)
						}
					}
					if st.extra != "" {
						if err := rdb.HSet(ctx, lua.SaleKey(id), st.extra, 1).Err(); err != nil {
							t.Fatal(err)
						}
					}
				}
				qtys := []string{"1", "1", "1", "2", "2", "3", "0", "x", "1.5"}
				variants := []string{"", "", "", "", "", "S"}          // mostly none; one a sale without variants refuses
				vrng := rand.New(rand.NewPCG(7, uint64(len(st.name)))) // apart, so rng draws as it did before variants
				if st.spec != "" {
					variants = []string{"S", "S", "M", "M", "L", "", "XL", "S:booked"}
				}
				relrng := rand.New(rand.NewPCG(11, uint64(len(st.name))))
				codes := map[int64]int{}
				for round := 0; round < 12; round++ {
					k := 1 + rng.IntN(16)
					var batch []any
					var want []any
					for i := 0; i < k; i++ {
						order := fmt.Sprintf("o%02d-%02d", round, i)
						user := fmt.Sprintf("u%d", rng.IntN(40))
						qty := qtys[rng.IntN(len(qtys))]
						variant := variants[vrng.IntN(len(variants))]
						args := []any{order, user, qty, 1700000000123, one}
						if variant != "" {
							args = append(args, bucket, "", variant)
						} else if bucket != "" {
							args = append(args, bucket)
						}
						res, err := lua.Reserve.Run(ctx, rdb, lua.ReserveKeys(one), args...).Slice()
						if err != nil {
							t.Fatalf("Reserve: %v", err)
						}
						want = append(want, res...)
						batch = append(batch, order, user, qty, variant)
					}
					got, err := lua.ReserveMany.Run(ctx, rdb, lua.ReserveKeys(many),
						append([]any{1700000000123, many, bucket}, batch...)...).Slice()
					if err != nil {
						t.Fatalf("ReserveMany: %v", err)
					}
					if !reflect.DeepEqual(got, want) {
						t.Fatalf("round %d: ReserveMany answered %v, want %v", round, got, want)
					}
					for i := 0; i < len(want); i += 2 {
						codes[want[i].(int64)]++
						if st.spec == "" || want[i].(int64) != lua.ReserveOK || relrng.IntN(4) != 0 {
							continue
						}
						o := batch[2*i : 2*i+4] // order, user, qty, variant
						for _, id := range []string{one, many} {
							if n, err := lua.Release.Run(ctx, rdb, lua.ReleaseKeys(id), o...).Int64(); err != nil || n != 1 {
								t.Fatalf("Release %v on %s: got %d, %v; want 1", o, id, n, err)
							}
						}
					}
				}
				a, b := saleState(t, ctx, rdb, one), saleState(t, ctx, rdb, many)
				if !reflect.DeepEqual(a, b) {
					t.Errorf("state after ReserveMany: got %v, want %v", b, a)
				}
				if st.state == "open" {
					for _, c := range []int64{lua.ReserveOK, lua.ReserveSoldOut, lua.ReservePurchased, lua.ReserveBadQuantity, lua.ReserveBadVariant} {
						if codes[c] == 0 {
							t.Errorf("no answer %d among %v: the case must cover it", c, codes)
						}
					}
				}
			})
		}
	}
}

// state is what a reserve leaves in Redis: the sale hash, the buyers hash
// and the stream entries (ids aside).
type state struct {
	hash, buyers map[string]string
	entries      []lua.Entry
}

func saleState(t *testing.T, ctx context.Context, rdb *redis.Client, id string) state {
	t.Helper()
	var s state
	var err error
	if s.hash, err = rdb.HGetAll(ctx, lua.SaleKey(id)).Result(); err != nil {
		t.Fatal(err)
	}
	if s.buyers, err = rdb.HGetAll(ctx, lua.BuyersKey(id)).Result(); err != nil {
		t.Fatal(err)
	}
	msgs, err := rdb.XRange(ctx, lua.OrdersKey(id), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		e, ok := lua.ReadEntry(m.Values)
		if !ok || !e.Compact {
			t.Errorf("entry %s: got %v, want a compact entry", m.ID, m.Values)
		}
		s.entries = append(s.entries, e)
	}
	return s
}

func TestReadEntry(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    map[string]any
		want lua.Entry
		ok   bool
	}{
		{"compact", map[string]any{"e": "01H 2 1250 1700 3 alice"}, lua.Entry{Order: "01H", Quantity: "2", Price: "1250", Time: "1700", Bucket: "3", User: "alice", Compact: true}, true},
		{"compact, no bucket, user with spaces", map[string]any{"e": "01H 1 0 1700  al ice "}, lua.Entry{Order: "01H", Quantity: "1", Price: "0", Time: "1700", User: "al ice ", Compact: true}, true},
		{"compact, five values", map[string]any{"e": "01H 1 0 1700 alice"}, lua.Entry{}, false},
		{"one field each", map[string]any{"order": "01H", "sale": "s", "user": "u", "qty": "1", "price": "5", "ts": "9", "bucket": "0"}, lua.Entry{Order: "01H", Sale: "s", User: "u", Quantity: "1", Price: "5", Time: "9", Bucket: "0"}, true},
		{"nothing", map[string]any{}, lua.Entry{}, true},
	} {
		got, ok := lua.ReadEntry(tc.v)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: got %+v, %v; want %+v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}
