package lua_test

import (
	"context"
	"reflect"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/lua"
)

// TestSpillScripts walks the spill path's scripts on a home bucket and a
// spill bucket: claim, spill reserve, finalise, a release's unmark, the
// leader's fence of a stale claim and its unclaim.
func TestSpillScripts(t *testing.T) {
	const home, spill = "s1~0.5", "s1~1.9"
	forEach(t, backends(t), "spill", func(t *testing.T, ctx context.Context, rdb *redis.Client) {
		for tag, total := range map[string]int{home: 1, spill: 2} {
			if err := lua.Prepare.Run(ctx, rdb, lua.SaleKeys(tag), total, 0, 1, 5).Err(); err != nil {
				t.Fatal(err)
			}
			if err := lua.SetState.Run(ctx, rdb, lua.SaleKeys(tag), "open").Err(); err != nil {
				t.Fatal(err)
			}
		}
		run := func(s *redis.Script, keys []string, args ...any) any {
			t.Helper()
			v, err := s.Run(ctx, rdb, keys, args...).Result()
			if err != nil {
				t.Fatalf("script: %v", err)
			}
			return v
		}
		expect := func(what string, got, want any) {
			t.Helper()
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s: got %v, want %v", what, got, want)
			}
		}
		homeReserve := func(order, user string) any {
			return run(lua.Reserve, lua.ReserveKeys(home), order, user, 1, 1700000000000, "s1", 0)
		}
		spillReserve := func(order, user string) any {
			return run(lua.Reserve, lua.SpillReserveKeys(spill), order, user, 1, 1700000000000, "s1", 1, lua.SpillArg)
		}
		claim := func(order, user string) any {
			return run(lua.Claim, lua.ClaimKeys(home), user, order, 1700000000000)
		}
		finalize := func(order, user string) any {
			return run(lua.Finalize, lua.MarkerKeys(home), user, order, 1)
		}
		buyer := func(tag, user string) string { return hget(t, ctx, rdb, lua.BuyersKey(tag), user) }
		claims := func() []string {
			t.Helper()
			v, err := rdb.ZRange(ctx, lua.ClaimsKey(home), 0, -1).Result()
			if err != nil {
				t.Fatal(err)
			}
			return v
		}

		expect("home reserve", homeReserve("o1", "u1"), []any{int64(0), "o1"})
		expect("home sold out", homeReserve("o2", "u2"), []any{int64(4), ""})
		expect("claim", claim("o2", "u2"), []any{int64(0), ""})
		expect("claim again (a retry)", claim("o2", "u2"), []any{int64(0), ""})
		expect("claim of another attempt", claim("o3", "u2"), []any{int64(5), "~o2"})
		expect("home reserve while claimed", homeReserve("o3", "u2"), []any{int64(5), "~o2"})
		expect("claim marker", buyer(home, "u2"), lua.ClaimMarker("o2"))
		expect("claims", claims(), []string{"u2"})

		expect("spill reserve", spillReserve("o2", "u2"), []any{int64(0), "o2"})
		entries, err := rdb.XRange(ctx, lua.OrdersKey(spill), "-", "+").Result()
		if err != nil || len(entries) != 1 {
			t.Fatalf("spill stream: %v, %v", entries, err)
		}
		e, _ := lua.ReadEntry(entries[0].Values)
		expect("entry bucket", e.Bucket, "1")
		expect("finalize", finalize("o2", "u2"), []any{int64(lua.FinalizeDone), ""})
		expect("finalize again", finalize("o2", "u2"), []any{int64(lua.FinalizeAlready), ""})
		expect("final marker", buyer(home, "u2"), lua.SpillMarker("o2", 1))
		expect("claims after finalize", claims(), []string{})
		expect("home reserve after spill", homeReserve("o4", "u2"), []any{int64(5), "~o2@1"})

		// A release of the spilled order: its units go back to the spill
		// bucket, its marker leaves home, and a late finalise sets none.
		expect("release", run(lua.Release, lua.ReleaseKeys(spill), "o2", "u2", 1), int64(1))
		expect("unmark", run(lua.Unmark, lua.MarkerKeys(home), "u2", "o2", 1, "u9", "o9", 1), int64(1))
		expect("unmark again", run(lua.Unmark, lua.MarkerKeys(home), "u2", "o2", 1), int64(0))
		expect("marker after unmark", buyer(home, "u2"), "")
		expect("late finalize", finalize("o2", "u2"), []any{int64(lua.FinalizeReleased), ""})
		expect("marker after late finalize", buyer(home, "u2"), "")

		// A stale claim whose spill never ran: the leader fences the order
		// in the spill bucket, the late spill reserve is refused, and the
		// claim goes.
		expect("claim u3", claim("o5", "u3"), []any{int64(0), ""})
		expect("spill check (not there)", run(lua.SpillCheck, lua.ReleaseKeys(spill), "u3", "o5"), int64(0))
		expect("late spill reserve", spillReserve("o5", "u3"), []any{int64(lua.ReserveFenced), ""})
		expect("unclaim of another order", run(lua.Unclaim, lua.UnclaimKeys(home), "u3", "o6"), int64(0))
		expect("claims before unclaim", claims(), []string{"u3"})
		expect("unclaim", run(lua.Unclaim, lua.UnclaimKeys(home), "u3", "o5"), int64(1))
		expect("marker after unclaim", buyer(home, "u3"), "")
		expect("claims after unclaim", claims(), []string{})

		// A stale claim whose spill reserved: the check finds the order,
		// and the leader finalises the claim.
		expect("claim u4", claim("o7", "u4"), []any{int64(0), ""})
		expect("spill reserve u4", spillReserve("o7", "u4"), []any{int64(0), "o7"})
		expect("spill check (live)", run(lua.SpillCheck, lua.ReleaseKeys(spill), "u4", "o7"), int64(1))
		expect("leader's finalize", finalize("o7", "u4"), []any{int64(lua.FinalizeDone), ""})
		expect("spill check of a missing bucket", run(lua.SpillCheck, lua.ReleaseKeys("s1~2.1"), "u4", "o7"), int64(-1))

		// A finalise that finds the marker gone (a rebuilt home) restores
		// it; one that finds another order leaves it.
		if err := rdb.HDel(ctx, lua.BuyersKey(home), "u4").Err(); err != nil {
			t.Fatal(err)
		}
		expect("finalize restores", finalize("o7", "u4"), []any{int64(lua.FinalizeDone), ""})
		expect("restored marker", buyer(home, "u4"), lua.SpillMarker("o7", 1))
		expect("finalize of another order", finalize("o8", "u4"), []any{int64(lua.FinalizeConflict), "~o7@1"})

		// The spill bucket sells out: a spill reserve counts no want there.
		expect("spill reserve u5", spillReserve("o10", "u5"), []any{int64(0), "o10"})
		expect("spill sold out", spillReserve("o11", "u6"), []any{int64(lua.ReserveSoldOut), ""})
		expect("spill bucket want", hget(t, ctx, rdb, lua.SaleKey(spill), lua.FieldWant), "")
		expect("home want", hget(t, ctx, rdb, lua.SaleKey(home), lua.FieldWant), "1")

		// A claims entry without a pending claim is dropped.
		if err := rdb.ZAdd(ctx, lua.ClaimsKey(home), redis.Z{Score: 1, Member: "u1"}).Err(); err != nil {
			t.Fatal(err)
		}
		expect("unclaim of a stale entry", run(lua.Unclaim, lua.UnclaimKeys(home), "u1", ""), int64(0))
		expect("claims after stale entry", claims(), []string{})
		expect("u1's order stays", buyer(home, "u1"), "o1")
	})
}

// TestParseMarker: markers and plain order ids.
func TestParseMarker(t *testing.T) {
	for _, c := range []struct {
		v            string
		order        string
		bucket       int
		final, isMkr bool
	}{
		{"01HX", "", -1, false, false},
		{lua.ClaimMarker("01HX"), "01HX", -1, false, true},
		{lua.SpillMarker("01HX", 3), "01HX", 3, true, true},
		{"~01HX@x", "", -1, false, false},
	} {
		o, b, f, ok := lua.ParseMarker(c.v)
		if o != c.order || b != c.bucket || f != c.final || ok != c.isMkr {
			t.Errorf("ParseMarker(%q): got %q %d %v %v, want %q %d %v %v", c.v, o, b, f, ok, c.order, c.bucket, c.final, c.isMkr)
		}
	}
}
