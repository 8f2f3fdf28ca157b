package lua_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/lua"
)

// drawOpen and drawClose are the test draw's window, unix milliseconds.
const drawOpen, drawClose = 1_000_000, 2_000_000

// prepareDraw creates draw sale id: 3 units of S and 2 of M (variants) or
// 5 of one stock, per_user 2, its window drawOpen..drawClose.
func prepareDraw(t *testing.T, ctx context.Context, rdb *redis.Client, id string, variants bool) {
	t.Helper()
	queue := lua.DrawWindowArg(time.UnixMilli(drawOpen), time.UnixMilli(drawClose))
	spec := ""
	if variants {
		spec = "S:3,M:2"
	}
	if n, err := lua.Prepare.Run(ctx, rdb, lua.SaleKeys(id), 5, 8, 2, 900, "", queue, spec).Int(); err != nil || n != 1 {
		t.Fatalf("Prepare: %d, %v", n, err)
	}
}

// TestDrawScripts walks a draw sale's entries through their scripts on
// both backends: the window, one entry per buyer across sizes, variants
// and quantities, a used solution, withdrawal until the close, the state
// read and the provider side's moves with their counts.
func TestDrawScripts(t *testing.T) {
	forEach(t, backends(t), "draw", func(t *testing.T, ctx context.Context, rdb *redis.Client) {
		const sale = "dr"
		enter := func(user, id, variant string, qty, now int64, challenge string, ttl int64) []any {
			t.Helper()
			v, err := lua.DrawEnter.Run(ctx, rdb, lua.DrawEnterKeys(sale, challenge), user, id, variant, qty, now, ttl).Slice()
			if err != nil {
				t.Fatalf("DrawEnter %s: %v", user, err)
			}
			return v
		}
		withdraw := func(user string, now int64) []any {
			t.Helper()
			v, err := lua.DrawWithdraw.Run(ctx, rdb, lua.DrawWithdrawKeys(sale), user, now, now).Slice()
			if err != nil {
				t.Fatalf("DrawWithdraw %s: %v", user, err)
			}
			return v
		}
		state := func(user string) []any {
			t.Helper()
			v, err := lua.DrawState.Run(ctx, rdb, lua.DrawStateKeys(sale), user).Slice()
			if err != nil {
				t.Fatalf("DrawState %s: %v", user, err)
			}
			return v
		}
		set := func(user, id string, to flashgate.DrawEntryState, now int64, from ...flashgate.DrawEntryState) []any {
			t.Helper()
			args := []any{user, id, string(to), now}
			for _, f := range from {
				args = append(args, string(f))
			}
			v, err := lua.DrawSet.Run(ctx, rdb, lua.DrawChangeKeys(sale), args...).Slice()
			if err != nil {
				t.Fatalf("DrawSet %s: %v", user, err)
			}
			return v
		}
		want := func(what string, got, want []any) {
			t.Helper()
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s: got %v, want %v", what, got, want)
			}
		}
		counts := func(what string, want map[string]string) {
			t.Helper()
			for f, w := range want {
				if got := hget(t, ctx, rdb, lua.SaleKey(sale), f); got != w {
					t.Errorf("%s: %s = %q, want %q", what, f, got, w)
				}
			}
		}
		const mid = drawOpen + 1000
		want("no sale", enter("ann", "e0", "S", 1, mid, "c", 0), []any{int64(lua.DrawNoSale), "", int64(0)})
		want("no sale state", state("ann"), []any{int64(lua.DrawNoSale), "", "", ""})
		if err := lua.Prepare.Run(ctx, rdb, lua.SaleKeys("fc"), 5, 8, 2, 900).Err(); err != nil {
			t.Fatal(err)
		}
		if v, err := lua.DrawEnter.Run(ctx, rdb, lua.DrawEnterKeys("fc", "c"), "ann", "e0", "", 1, mid, 0).Slice(); err != nil || v[0] != int64(lua.DrawNotDraw) {
			t.Errorf("entry in a first-come sale: got %v, %v; want not a draw", v, err)
		}
		prepareDraw(t, ctx, rdb, sale, true)
		if got := hget(t, ctx, rdb, lua.SaleKey(sale), lua.FieldQueue); got != flashgate.QueueDraw {
			t.Errorf("queue field: got %q, want draw", got)
		}

		want("before the window", enter("ann", "e1", "S", 1, drawOpen-1, "c", 0), []any{int64(lua.DrawNotOpen), "", int64(0)})
		want("at the close", enter("ann", "e1", "S", 1, drawClose, "c", 0), []any{int64(lua.DrawClosed), "", int64(0)})
		want("no size", enter("ann", "e1", "", 1, mid, "c", 0), []any{int64(lua.DrawBadVariant), "", int64(0)})
		want("unknown size", enter("ann", "e1", "XL", 1, mid, "c", 0), []any{int64(lua.DrawBadVariant), "", int64(0)})
		want("over per_user", enter("ann", "e1", "S", 3, mid, "c", 0), []any{int64(lua.DrawBadQuantity), "", int64(0)})
		want("zero", enter("ann", "e1", "S", 0, mid, "c", 0), []any{int64(lua.DrawBadQuantity), "", int64(0)})
		want("no entry yet", state("ann"), []any{int64(lua.DrawNoEntry), "", "1000000", "2000000"})

		want("ann enters at the open", enter("ann", "e1", "S", 2, drawOpen, "c1", 60000), []any{int64(0), "pending e1 2 S", int64(1)})
		want("ann again, another size", enter("ann", "e9", "M", 1, mid, "c2", 60000), []any{int64(0), "pending e1 2 S", int64(0)})
		want("bob reuses c1", enter("bob", "e2", "M", 1, mid, "c1", 60000), []any{int64(lua.DrawSolveUsed), "", int64(0)})
		want("bob enters", enter("bob", "e2", "M", 1, mid, "c3", 60000), []any{int64(0), "pending e2 1 M", int64(1)})
		want("ann's state", state("ann"), []any{int64(0), "pending e1 2 S", "1000000", "2000000", int64(0)})
		// A pending entry once the close finished: out (1) once its hold
		// is off the read path's list, not while it is on it.
		if err := rdb.HSet(ctx, lua.SaleKey(sale), lua.FieldDrawDone, 1).Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.ZAdd(ctx, lua.DrawCheckKey(sale), redis.Z{Score: 1, Member: "e1"}).Err(); err != nil {
			t.Fatal(err)
		}
		want("pending, its hold listed, after the close", state("ann"), []any{int64(0), "pending e1 2 S", "1000000", "2000000", int64(0)})
		if err := rdb.ZRem(ctx, lua.DrawCheckKey(sale), "e1").Err(); err != nil {
			t.Fatal(err)
		}
		want("pending, its hold released, after the close", state("ann"), []any{int64(0), "pending e1 2 S", "1000000", "2000000", int64(1)})
		if err := rdb.HDel(ctx, lua.SaleKey(sale), lua.FieldDrawDone).Err(); err != nil {
			t.Fatal(err)
		}
		counts("two pending", map[string]string{"draw_pending": "2", "draw_entries": "2", "variant:S:draw_entries": "1", "variant:M:draw_entries": "1"})

		// The provider side: an authorised hold enters; a step of another
		// entry id or from a state not allowed changes nothing.
		want("ann authorised", set("ann", "e1", flashgate.DrawEntered, mid, flashgate.DrawPending), []any{int64(0), "entered e1 2 S", int64(1)})
		want("ann authorised again", set("ann", "e1", flashgate.DrawEntered, mid, flashgate.DrawPending), []any{int64(0), "entered e1 2 S", int64(0)})
		want("wrong entry id", set("ann", "e9", flashgate.DrawWon, mid, flashgate.DrawEntered), []any{int64(lua.DrawNoEntry), "", int64(0)})
		want("not allowed", set("bob", "e2", flashgate.DrawWon, mid, flashgate.DrawEntered), []any{int64(lua.DrawWrongState), "pending e2 1 M", int64(0)})
		counts("one entered", map[string]string{"draw_pending": "1", "draw_entered": "1"})

		// Withdrawal until the close; a withdrawn buyer may enter again.
		want("bob withdraws", withdraw("bob", mid), []any{int64(0), "withdrawn e2 1 M", int64(1)})
		want("bob withdraws again", withdraw("bob", mid), []any{int64(0), "withdrawn e2 1 M", int64(0)})
		want("carol has nothing to withdraw", withdraw("carol", mid), []any{int64(lua.DrawNoEntry), "", int64(0)})
		want("bob's late authorisation", set("bob", "e2", flashgate.DrawEntered, mid, flashgate.DrawPending), []any{int64(lua.DrawWrongState), "withdrawn e2 1 M", int64(0)})
		want("bob enters again", enter("bob", "e3", "S", 1, mid, "c4", 0), []any{int64(0), "pending e3 1 S", int64(1)})
		counts("bob again", map[string]string{"draw_pending": "1", "draw_entered": "1", "draw_withdrawn": "0", "draw_entries": "3"})
		want("ann withdraws at the close", withdraw("ann", drawClose), []any{int64(lua.DrawClosed), "entered e1 2 S", int64(0)})
		want("bob authorised after the close", set("bob", "e3", flashgate.DrawEntered, drawClose, flashgate.DrawPending), []any{int64(lua.DrawClosed), "pending e3 1 S", int64(0)})
		want("carol after the close", enter("carol", "e4", "S", 1, drawClose+5, "c5", 0), []any{int64(lua.DrawClosed), "", int64(0)})
		// Once the close began (draw_shut), a caller whose clock is before
		// draw_close is refused all the same.
		if err := rdb.HSet(ctx, lua.SaleKey(sale), lua.FieldDrawShut, 1).Err(); err != nil {
			t.Fatal(err)
		}
		want("ann withdraws after the shut", withdraw("ann", mid), []any{int64(lua.DrawClosed), "entered e1 2 S", int64(0)})
		want("bob authorised after the shut", set("bob", "e3", flashgate.DrawEntered, mid, flashgate.DrawPending), []any{int64(lua.DrawClosed), "pending e3 1 S", int64(0)})
		want("carol after the shut", enter("carol", "e4", "S", 1, mid, "c6", 0), []any{int64(lua.DrawClosed), "", int64(0)})

		// The close: ann wins and is captured, bob's pending hold released.
		want("ann wins", set("ann", "e1", flashgate.DrawWon, drawClose, flashgate.DrawEntered), []any{int64(0), "won e1 2 S", int64(1)})
		want("ann captured", set("ann", "e1", flashgate.DrawCaptured, drawClose, flashgate.DrawWon), []any{int64(0), "captured e1 2 S", int64(1)})
		want("bob released", set("bob", "e3", flashgate.DrawReleased, drawClose, flashgate.DrawPending, flashgate.DrawLost), []any{int64(0), "released e3 1 S", int64(1)})
		counts("drawn", map[string]string{"draw_pending": "0", "draw_entered": "0", "draw_won": "0", "draw_captured": "1", "draw_released": "1"})

		n, err := rdb.XLen(ctx, lua.DrawJournalKey(sale)).Result()
		if err != nil || n != 8 {
			t.Errorf("journal: %d entries, %v; want 8 (every change)", n, err)
		}
	})
}

// TestDrawRefusesPurchases: Reserve and ReserveMany refuse every purchase
// of a draw sale as not started, open or not, and reserve for the draw's
// close path (the "draw" flag) as for any sale, without a start flag.
func TestDrawRefusesPurchases(t *testing.T) {
	forEach(t, backends(t), "refuse", func(t *testing.T, ctx context.Context, rdb *redis.Client) {
		for _, st := range []string{"", "open"} {
			one, many := "d1"+st, "dm"+st
			for _, id := range []string{one, many} {
				prepareDraw(t, ctx, rdb, id, true)
				if st != "" {
					if err := lua.SetState.Run(ctx, rdb, lua.SaleKeys(id), st).Err(); err != nil {
						t.Fatal(err)
					}
				}
			}
			res := func(v []any, err error) []any {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
			r := res(lua.Reserve.Run(ctx, rdb, lua.ReserveKeys(one), "o1", "ann", 1, 1, one, "", "", "S").Slice())
			m := res(lua.ReserveMany.Run(ctx, rdb, lua.ReserveKeys(many), 1, many, "", "o1", "ann", 1, "S").Slice())
			if want := []any{int64(lua.ReserveNotStarted), ""}; !reflect.DeepEqual(r, want) || !reflect.DeepEqual(m, want) {
				t.Errorf("state %q: a purchase: Reserve %v, ReserveMany %v; want %v", st, r, m, want)
			}
			r = res(lua.Reserve.Run(ctx, rdb, lua.ReserveKeys(one), "o1", "ann", 2, 1, one, "", "", "S", lua.DrawReserveFlag).Slice())
			m = res(lua.ReserveMany.Run(ctx, rdb, lua.ReserveKeys(many), 1, many, "", "o1", "ann", 2, "S", "o2", "bob", 2, "S", lua.DrawReserveFlag).Slice())
			if want := []any{int64(lua.ReserveOK), "o1"}; !reflect.DeepEqual(r, want) || !reflect.DeepEqual(m[:2], want) {
				t.Errorf("state %q: the close path: Reserve %v, ReserveMany %v; want %v first", st, r, m, want)
			}
			if want := []any{int64(lua.ReserveSoldOut), ""}; !reflect.DeepEqual(m[2:], want) {
				t.Errorf("state %q: the close path's second winner of S (3 units): got %v, want %v", st, m[2:], want)
			}
			a, b := saleState(t, ctx, rdb, one), saleState(t, ctx, rdb, many)
			if !reflect.DeepEqual(a, b) {
				t.Errorf("state %q: after Reserve %v, after ReserveMany %v; want the same", st, a, b)
			}
			if got := hget(t, ctx, rdb, lua.SaleKey(one), lua.VariantField("S", lua.FieldBooked)); got != "2" {
				t.Errorf("state %q: S booked %q, want 2", st, got)
			}
		}
		// A paused draw sale refuses the close path too; a closed one (an
		// admin's stop during the close) still takes the winners its close
		// charged (ReserveMany then finds Reserve's order).
		for _, c := range []struct {
			name     string
			set      func(id string) error
			code     int64
			order    string
			codeMany int64
		}{
			{"closed", func(id string) error { return lua.SetState.Run(ctx, rdb, lua.SaleKeys(id), "close").Err() }, lua.ReserveOK, "o1", lua.ReservePurchased},
			{"paused", func(id string) error { return rdb.HSet(ctx, lua.SaleKey(id), lua.FieldResume, 1).Err() }, lua.ReservePaused, "", lua.ReservePaused},
		} {
			id := "dx" + c.name
			prepareDraw(t, ctx, rdb, id, false)
			if err := c.set(id); err != nil {
				t.Fatal(err)
			}
			r, err := lua.Reserve.Run(ctx, rdb, lua.ReserveKeys(id), "o1", "ann", 1, 1, id, "", "", "", lua.DrawReserveFlag).Slice()
			m, err2 := lua.ReserveMany.Run(ctx, rdb, lua.ReserveKeys(id), 1, id, "", "o1", "ann", 1, "", lua.DrawReserveFlag).Slice()
			want, wantMany := []any{c.code, c.order}, []any{c.codeMany, c.order}
			if err != nil || err2 != nil || !reflect.DeepEqual(r, want) || !reflect.DeepEqual(m, wantMany) {
				t.Errorf("%s: got Reserve %v %v, ReserveMany %v %v; want %v, %v", c.name, r, err, m, err2, want, wantMany)
			}
		}
	})
}

// TestDrawSurvivesRebuild: a draw sale's hash rebuilt by Resync is a draw
// sale again, with its window, so that it still refuses purchases.
func TestDrawSurvivesRebuild(t *testing.T) {
	forEach(t, backends(t), "rebuild", func(t *testing.T, ctx context.Context, rdb *redis.Client) {
		const id = "drb"
		queue := lua.DrawWindowArg(time.UnixMilli(drawOpen), time.UnixMilli(drawClose))
		v, err := lua.Resync.Run(ctx, rdb, lua.SaleKeys(id), 0, 0, 5, 2, 900, "open", "1.5", 0, "1", 1, queue, "").Int64Slice()
		if err != nil || len(v) == 0 || v[0] != 1 {
			t.Fatalf("Resync rebuild: %v, %v", v, err)
		}
		got, err := rdb.HMGet(ctx, lua.SaleKey(id), lua.FieldQueue, lua.FieldDrawOpen, lua.FieldDrawClose).Result()
		if want := []any{"draw", "1000000", "2000000"}; err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("rebuilt: got %v, %v; want %v", got, err, want)
		}
		// The next pass reopens it; a purchase is still refused.
		if _, err := lua.Resync.Run(ctx, rdb, lua.SaleKeys(id), 0, 0, 5, 2, 900, "open", "1.5", 0, "0", 1, queue, "").Int64Slice(); err != nil {
			t.Fatal(err)
		}
		if r, err := lua.Reserve.Run(ctx, rdb, lua.ReserveKeys(id), "o1", "ann", 1, 1, id).Slice(); err != nil || r[0] != int64(lua.ReserveNotStarted) {
			t.Errorf("purchase of a rebuilt draw: got %v, %v; want not started", r, err)
		}
	})
}

// TestDrawRestore: DrawRestore's rules for the rows of a rebuilt draw
// sale. A live or drawn row stands over a withdrawn one, whichever page
// comes first; a live entry already in Redis stays; the holds come back to
// their records, the withdrawn and pending ones' onto the read path's
// list; counts are raised to the rows', never lowered; a page run again
// changes nothing; a token below the fence is refused, and so is a page
// of a restore whose mark the sale hash no longer holds.
func TestDrawRestore(t *testing.T) {
	forEach(t, backends(t), "restore", func(t *testing.T, ctx context.Context, rdb *redis.Client) {
		const sale = "drr"
		prepareDraw(t, ctx, rdb, sale, false)
		if v, err := lua.DrawEnter.Run(ctx, rdb, lua.DrawEnterKeys(sale, ""), "dan", "e10", "", 1, drawOpen+1, 0).Slice(); err != nil || v[0] != int64(lua.DrawOK) {
			t.Fatalf("DrawEnter dan: %v, %v", v, err)
		}
		if n, err := lua.DrawRestoreMark.Run(ctx, rdb, []string{lua.SaleKey(sale)}, 5, "m1").Int64(); err != nil || n != 1 {
			t.Fatalf("DrawRestoreMark: %d, %v", n, err)
		}
		mark := "m1"
		restore := func(token int64, counts []any, rows ...string) int64 {
			t.Helper()
			args := []any{token, mark, 7, len(counts) / 2}
			args = append(args, counts...)
			for _, r := range rows {
				args = append(args, splitRow(r)...)
			}
			n, err := lua.DrawRestore.Run(ctx, rdb, lua.DrawRestoreKeys(sale), args...).Int64()
			if err != nil {
				t.Fatalf("DrawRestore: %v", err)
			}
			return n
		}
		pages := [][]string{
			{"ann withdrawn a1 1 pi_a1", "eve released x1 1 pi_x1"},
			{"ann entered a2 2 pi_a2", "dan entered d1 1 pi_d1", "eve withdrawn x0 1 -"},
		}
		for range 2 { // the second time: a restore run again
			if n := restore(5, nil, pages[0]...); n != 2 {
				t.Errorf("first page: got %d rows, want 2", n)
			}
			if n := restore(5, []any{lua.FieldDrawEntries, 5}, pages[1]...); n != 3 {
				t.Errorf("last page: got %d rows, want 3", n)
			}
		}
		if n := restore(5, []any{lua.FieldDrawEntries, 3}); n != 0 {
			t.Errorf("a count below: got %d rows, want 0", n)
		}
		entries, err := rdb.HGetAll(ctx, lua.DrawKey(sale)).Result()
		if want := map[string]string{"ann": "entered a2 2 ", "dan": "pending e10 1 ", "eve": "released x1 1 "}; err != nil || !reflect.DeepEqual(entries, want) {
			t.Errorf("entries: got %v, %v; want %v", entries, err, want)
		}
		counts, err := rdb.HMGet(ctx, lua.SaleKey(sale), lua.FieldDrawEntries, "draw_pending", "draw_entered", "draw_withdrawn", "draw_released", "fence").Result()
		if want := []any{"5", "1", "1", "0", "1", "5"}; err != nil || !reflect.DeepEqual(counts, want) {
			t.Errorf("counts (made, pending, entered, withdrawn, released, fence): got %v, %v; want %v", counts, err, want)
		}
		holds, err := rdb.HGetAll(ctx, lua.DrawHoldKey(sale)).Result()
		if want := map[string]string{"a1": "pi_a1 ann", "a2": "pi_a2 ann", "d1": "pi_d1 dan", "x1": "pi_x1 eve"}; err != nil || !reflect.DeepEqual(holds, want) {
			t.Errorf("holds: got %v, %v; want %v", holds, err, want)
		}
		listed, err := rdb.ZRangeWithScores(ctx, lua.DrawCheckKey(sale), 0, -1).Result()
		if want := []redis.Z{{Score: 7, Member: "a1"}}; err != nil || !reflect.DeepEqual(listed, want) {
			t.Errorf("the read path's list: got %v, %v; want %v", listed, err, want)
		}
		if n := restore(4, nil, "fay pending f1 1 -"); n != lua.DrawRestoreFenced {
			t.Errorf("a token below the fence: got %d, want %d", n, lua.DrawRestoreFenced)
		}
		if ok, err := rdb.HExists(ctx, lua.DrawKey(sale), "fay").Result(); err != nil || ok {
			t.Errorf("fay's entry after a fenced page: got %v, %v; want none", ok, err)
		}
		mark = "m0" // another restore's (or a mark Redis lost)
		if n := restore(5, nil, "fay pending f1 1 -"); n != lua.DrawRestoreLost {
			t.Errorf("another restore's mark: got %d, want %d", n, lua.DrawRestoreLost)
		}
		if ok, err := rdb.HExists(ctx, lua.DrawKey(sale), "fay").Result(); err != nil || ok {
			t.Errorf("fay's entry after a page of another restore: got %v, %v; want none", ok, err)
		}
	})
}

// splitRow is DrawRestore's six values of "user state id quantity intent"
// (intent "-" for none) on a sale of one stock.
func splitRow(r string) []any {
	var user, st, id, q, intent string
	if _, err := fmt.Sscan(r, &user, &st, &id, &q, &intent); err != nil {
		panic(err)
	}
	if intent == "-" {
		intent = ""
	}
	return []any{user, st, id, q, "", intent}
}

func TestDrawError(t *testing.T) {
	for code, want := range map[int64]error{
		lua.DrawOK: nil, lua.DrawNoSale: flashgate.ErrNotFound, lua.DrawNotOpen: flashgate.ErrNotStarted,
		lua.DrawClosed: flashgate.ErrClosed, lua.DrawNotDraw: flashgate.ErrNotFound, lua.DrawSolveUsed: flashgate.ErrBadRequest,
		lua.DrawBadQuantity: flashgate.ErrBadRequest, lua.DrawBadVariant: flashgate.ErrBadRequest,
		lua.DrawNoEntry: flashgate.ErrNotFound, lua.DrawWrongState: flashgate.ErrNotPayable,
	} {
		if got := lua.DrawError(code); !errors.Is(got, want) || (want == nil) != (got == nil) {
			t.Errorf("code %d: got %v, want %v", code, got, want)
		}
	}
	if err := lua.DrawError(99); err == nil {
		t.Error("code 99: got nil")
	}
}

func TestParseDrawEntry(t *testing.T) {
	for _, c := range []struct {
		in      string
		st      flashgate.DrawEntryState
		id      string
		qty     int64
		variant string
		ok      bool
	}{
		{"pending e1 2 S", flashgate.DrawPending, "e1", 2, "S", true},
		{"entered e-2 1 ", flashgate.DrawEntered, "e-2", 1, "", true},
		{"bogus e1 1 S", "", "", 0, "", false},
		{"won e1 x S", "", "", 0, "", false},
		{"won e1 1", "", "", 0, "", false},
	} {
		st, id, qty, v, ok := lua.ParseDrawEntry(c.in)
		if st != c.st || id != c.id || qty != c.qty || v != c.variant || ok != c.ok {
			t.Errorf("%q: got %v %v %v %q %v", c.in, st, id, qty, v, ok)
		}
	}
}

func TestDrawQueueArg(t *testing.T) {
	open, closeAt := time.UnixMilli(drawOpen), time.UnixMilli(drawClose)
	for _, c := range []struct {
		s    flashgate.Sale
		want string
	}{
		{flashgate.Sale{}, ""},
		{flashgate.Sale{Queue: flashgate.QueueFair}, "fair"},
		{flashgate.Sale{Queue: flashgate.QueueDraw, EntriesOpenAt: &open, EntriesCloseAt: &closeAt}, "draw:1000000:2000000"},
		{flashgate.Sale{Queue: flashgate.QueueDraw}, "draw"},
	} {
		if got := lua.DrawQueueArg(c.s); got != c.want {
			t.Errorf("%+v: got %q, want %q", c.s, got, c.want)
		}
	}
}
