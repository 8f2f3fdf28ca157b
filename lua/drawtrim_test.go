package lua_test

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/lua"
)

// TestDrawTrimAndReapply: a journal's flush trims what it wrote only while
// the sale hash's restore mark is the one it read with the journal;
// DrawReapply then puts rows in only while a mark is there; and neither it
// nor DrawRestore takes an entry back (a stale row of ann's withdrawn a1,
// entered, leaves it withdrawn; a row of her new live a2 replaces it, in
// DrawReapply only when the row names a1 as the entry it may replace).
func TestDrawTrimAndReapply(t *testing.T) {
	forEach(t, backends(t), "trim", func(t *testing.T, ctx context.Context, rdb *redis.Client) {
		const sale = "dtr"
		prepareDraw(t, ctx, rdb, sale, false)
		for _, user := range []string{"ann", "bob", "cat"} {
			if v, err := lua.DrawEnter.Run(ctx, rdb, lua.DrawEnterKeys(sale, ""), user, user[:1]+"1", "", 1, drawOpen+1, 0).Slice(); err != nil || v[0] != int64(lua.DrawOK) {
				t.Fatalf("DrawEnter %s: %v, %v", user, v, err)
			}
		}
		msgs, err := rdb.XRange(ctx, lua.DrawJournalKey(sale), "-", "+").Result()
		if err != nil || len(msgs) != 3 {
			t.Fatalf("journal: %v, %v; want 3 entries", msgs, err)
		}
		trim := func(mark string, ids ...string) int64 {
			t.Helper()
			args := []any{mark}
			for _, id := range ids {
				args = append(args, id)
			}
			n, err := lua.DrawTrim.Run(ctx, rdb, lua.DrawTrimKeys(sale), args...).Int64()
			if err != nil {
				t.Fatalf("DrawTrim: %v", err)
			}
			return n
		}
		if n := trim("", msgs[0].ID); n != 1 {
			t.Errorf("trim with no mark read, none there: got %d, want 1", n)
		}
		// reapply's rows are splitRow's, then the entry of another id
		// the row may replace after a "/" ("" none).
		reapply := func(rows ...string) int64 {
			t.Helper()
			args := []any{7}
			for _, r := range rows {
				r, over, _ := strings.Cut(r, "/")
				args = append(append(args, splitRow(r)...), over)
			}
			n, err := lua.DrawReapply.Run(ctx, rdb, lua.DrawRestoreKeys(sale), args...).Int64()
			if err != nil {
				t.Fatalf("DrawReapply: %v", err)
			}
			return n
		}
		if n := reapply("bob withdrawn b1 1 pi_b1"); n != lua.DrawReapplyLost {
			t.Errorf("reapply with no mark: got %d, want %d", n, lua.DrawReapplyLost)
		}
		if n, err := lua.DrawRestoreMark.Run(ctx, rdb, []string{lua.SaleKey(sale)}, 5, "r1").Int64(); err != nil || n != 1 {
			t.Fatalf("DrawRestoreMark: %d, %v", n, err)
		}
		if n, err := lua.DrawRestoreMark.Run(ctx, rdb, []string{lua.SaleKey(sale)}, 4, "r0").Int64(); err != nil || n != lua.DrawRestoreMarkFenced {
			t.Errorf("DrawRestoreMark below the fence: got %d, %v; want %d", n, err, lua.DrawRestoreMarkFenced)
		}
		for _, c := range []struct {
			mark string
			want int64
		}{{"", lua.DrawTrimRestored}, {"r0", lua.DrawTrimRestored}, {"r1", 1}} {
			if n := trim(c.mark, msgs[1].ID); n != c.want {
				t.Errorf("trim with mark %q read, r1 there: got %d, want %d", c.mark, n, c.want)
			}
		}
		if n, err := rdb.XLen(ctx, lua.DrawJournalKey(sale)).Result(); err != nil || n != 1 {
			t.Errorf("journal after the trims: %d, %v; want 1", n, err)
		}
		if v, err := lua.DrawWithdraw.Run(ctx, rdb, lua.DrawWithdrawKeys(sale), "ann", drawOpen+2, drawOpen+2).Slice(); err != nil || v[0] != int64(lua.DrawOK) {
			t.Fatalf("DrawWithdraw ann: %v, %v", v, err)
		}
		if n := reapply("ann entered a1 1 -", "bob withdrawn b1 1 pi_b1", "cat entered c1 1 -"); n != 3 {
			t.Errorf("reapply: got %d rows, want 3", n)
		}
		args := []any{5, "r1", 0, 0}
		args = append(args, splitRow("ann pending a1 1 -")...)
		if n, err := lua.DrawRestore.Run(ctx, rdb, lua.DrawRestoreKeys(sale), args...).Int64(); err != nil || n != 1 {
			t.Fatalf("DrawRestore: %d, %v", n, err)
		}
		want := map[string]string{"ann": "withdrawn a1 1 ", "bob": "withdrawn b1 1 ", "cat": "entered c1 1 "}
		if got, err := rdb.HGetAll(ctx, lua.DrawKey(sale)).Result(); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("entries after stale rows: got %v, %v; want %v", got, err, want)
		}
		// A row may replace a withdrawn entry of another id only when it
		// names it (the caller found a row of it): a withdrawn entry with
		// no row is newer than the row.
		if n := reapply("ann pending a2 1 -/", "ann pending a2 1 -/a0"); n != 2 {
			t.Errorf("reapply of a2 over another: got %d rows, want 2", n)
		}
		if got, err := rdb.HGet(ctx, lua.DrawKey(sale), "ann").Result(); err != nil || got != "withdrawn a1 1 " {
			t.Errorf("ann's entry after a2 not over a1: got %q, %v; want %q", got, err, "withdrawn a1 1 ")
		}
		if n := reapply("ann pending a2 1 -/a1"); n != 1 {
			t.Errorf("reapply of a2: got %d rows, want 1", n)
		}
		want["ann"] = "pending a2 1 "
		if got, err := rdb.HGetAll(ctx, lua.DrawKey(sale)).Result(); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("entries after a2: got %v, %v; want %v", got, err, want)
		}
		counts, err := rdb.HMGet(ctx, lua.SaleKey(sale), "draw_pending", "draw_entered", "draw_withdrawn").Result()
		if want := []any{"1", "1", "1"}; err != nil || !reflect.DeepEqual(counts, want) {
			t.Errorf("counts pending, entered, withdrawn: got %v, %v; want %v", counts, err, want)
		}
		if listed, err := rdb.ZRangeWithScores(ctx, lua.DrawCheckKey(sale), 0, -1).Result(); err != nil || !reflect.DeepEqual(listed, []redis.Z{{Score: 7, Member: "b1"}}) {
			t.Errorf("the read path's list: got %v, %v; want b1 at 7", listed, err)
		}
	})
}
