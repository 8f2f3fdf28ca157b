package lua_test

import (
	"context"
	"reflect"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/lua"
)

// TestDrawRestoreSameIDRank: DrawRestore moves a stale entry in Redis
// (pending e1, as a Redis from an older snapshot holds it) forward to the
// database's row of the same entry that has gone further (won e1), and
// does not list the won entry's hold for the read path (it kept the stale
// entry, whose hold the read path then released).
func TestDrawRestoreSameIDRank(t *testing.T) {
	forEach(t, backends(t), "restore-rank", func(t *testing.T, ctx context.Context, rdb *redis.Client) {
		const sale = "drk"
		prepareDraw(t, ctx, rdb, sale, false)
		if v, err := lua.DrawEnter.Run(ctx, rdb, lua.DrawEnterKeys(sale, ""), "dan", "e1", "", 1, drawOpen+1, 0).Slice(); err != nil || v[0] != int64(lua.DrawOK) {
			t.Fatalf("DrawEnter dan: %v, %v", v, err)
		}
		if n, err := lua.DrawRestoreMark.Run(ctx, rdb, []string{lua.SaleKey(sale)}, 5, "m1").Int64(); err != nil || n != 1 {
			t.Fatalf("DrawRestoreMark: %d, %v", n, err)
		}
		args := []any{5, "m1", 7, 0}
		args = append(args, splitRow("dan won e1 1 pi_e1")...)
		if _, err := lua.DrawRestore.Run(ctx, rdb, lua.DrawRestoreKeys(sale), args...).Int64(); err != nil {
			t.Fatalf("DrawRestore: %v", err)
		}
		got, err := rdb.HGet(ctx, lua.DrawKey(sale), "dan").Result()
		if want := "won e1 1 "; err != nil || got != want {
			t.Errorf("dan's entry after restoring the row won: got %q, %v; want %q", got, err, want)
		}
		if listed, err := rdb.ZRange(ctx, lua.DrawCheckKey(sale), 0, -1).Result(); err != nil || !reflect.DeepEqual(listed, []string{}) {
			t.Errorf("the read path's list: got %v, %v; want none", listed, err)
		}
		st, err := rdb.HMGet(ctx, lua.SaleKey(sale), "draw_pending", "draw_won").Result()
		if want := []any{"0", "1"}; err != nil || !reflect.DeepEqual(st, want) {
			t.Errorf("counts pending, won: got %v, %v; want %v", st, err, want)
		}
	})
}
