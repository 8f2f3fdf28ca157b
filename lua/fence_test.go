package lua_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/lua"
)

// fencedSaleState is every key of the test sale, for comparing before and after.
func fencedSaleState(t *testing.T, ctx context.Context, rdb *redis.Client) string {
	t.Helper()
	h, err := rdb.HGetAll(ctx, lua.SaleKey(saleID)).Result()
	if err != nil {
		t.Fatal(err)
	}
	b, err := rdb.HGetAll(ctx, lua.BuyersKey(saleID)).Result()
	if err != nil {
		t.Fatal(err)
	}
	r, err := rdb.SMembers(ctx, lua.ReleasedKey(saleID)).Result()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint(h, b, r)
}

// TestFencedScripts: every script the leader's loops write with (SetState,
// Resync, ReleaseBatch of a re-sync, RestoreBegin, Restore, Restored,
// Pause, Mark, Replan) refuses a
// fencing token below the sale hash's fence field and changes nothing;
// the same token is accepted, and a higher one is accepted and raises the
// field.
func TestFencedScripts(t *testing.T) {
	keys := lua.SaleKeys(saleID)
	cases := []struct {
		name    string
		run     func(t *testing.T, ctx context.Context, rdb *redis.Client, tok int64) (any, error)
		refused any
	}{
		{"SetState", func(t *testing.T, ctx context.Context, rdb *redis.Client, tok int64) (any, error) {
			return lua.SetState.Run(ctx, rdb, keys, "close", tok).Int64()
		}, int64(lua.SetStateFenced)},
		{"Resync", func(t *testing.T, ctx context.Context, rdb *redis.Client, tok int64) (any, error) {
			v, err := lua.Resync.Run(ctx, rdb, keys, 1, 2, 10, 1, 0, "open", "1.5", 0, "0", tok).Int64Slice()
			return fmt.Sprint(v), err
		}, fmt.Sprint([]int64{lua.ResyncFenced})},
		{"ReleaseBatch", func(t *testing.T, ctx context.Context, rdb *redis.Client, tok int64) (any, error) {
			v, err := lua.ReleaseBatch.Run(ctx, rdb, lua.ReleaseKeys(saleID), fmt.Sprintf("0:%d", tok), "o1", "u1", 1, "").Int64Slice()
			return fmt.Sprint(v), err
		}, fmt.Sprint([]int64{lua.ReleaseBatchFenced, 0, 0})},
		{"ReleaseBatch without count", func(t *testing.T, ctx context.Context, rdb *redis.Client, tok int64) (any, error) {
			v, err := lua.ReleaseBatch.Run(ctx, rdb, lua.ReleaseKeys(saleID), fmt.Sprintf(":%d", tok), "o1", "u1", 1, "").Int64Slice()
			return fmt.Sprint(v), err
		}, fmt.Sprint([]int64{lua.ReleaseBatchFenced, 0, 0})},
		{"RestoreBegin", func(t *testing.T, ctx context.Context, rdb *redis.Client, tok int64) (any, error) {
			v, err := lua.RestoreBegin.Run(ctx, rdb, keys, tok, "r1").Slice()
			return fmt.Sprint(v), err
		}, fmt.Sprint([]any{int64(lua.RestoreBeginFenced)})},
		{"Restore", func(t *testing.T, ctx context.Context, rdb *redis.Client, tok int64) (any, error) {
			// The accepted tokens' restore began (RestoreBegin's id in
			// the hash); the refused one's could not (fenced too).
			beginRestore(t, ctx, rdb, tok)
			return lua.Restore.Run(ctx, rdb, lua.RestoreKeys(saleID), tok, "r1", 1, "u1", "o1", "u3", "o3").Int64()
		}, int64(lua.RestoreFenced)},
		{"Restored", func(t *testing.T, ctx context.Context, rdb *redis.Client, tok int64) (any, error) {
			beginRestore(t, ctx, rdb, tok)
			return lua.Restored.Run(ctx, rdb, keys, tok, "d1", "r1").Int64()
		}, int64(lua.RestoredFenced)},
		{"Pause", func(t *testing.T, ctx context.Context, rdb *redis.Client, tok int64) (any, error) {
			return lua.Pause.Run(ctx, rdb, keys, tok).Int64()
		}, int64(lua.PauseFenced)},
		{"Mark", func(t *testing.T, ctx context.Context, rdb *redis.Client, tok int64) (any, error) {
			return lua.Mark.Run(ctx, rdb, keys, tok, "resume", 1, "reserved", -1).Int64()
		}, int64(lua.MarkFenced)},
		{"Replan", func(t *testing.T, ctx context.Context, rdb *redis.Client, tok int64) (any, error) {
			return lua.Replan.Run(ctx, rdb, keys, tok, "", 4).Int64()
		}, int64(lua.ReplanFenced)},
	}
	bs := backends(t)
	for _, tc := range cases {
		forEach(t, bs, tc.name, func(t *testing.T, ctx context.Context, rdb *redis.Client) {
			prepare(t, ctx, rdb, sale{total: 10, state: "open"})
			if v, err := lua.Reserve.Run(ctx, rdb, lua.ReserveKeys(saleID), "o1", "u1", 1, 1, saleID).Slice(); err != nil {
				t.Fatalf("Reserve: %v, %v", v, err)
			}
			if err := rdb.HSet(ctx, lua.SaleKey(saleID), lua.FieldFence, 5).Err(); err != nil {
				t.Fatal(err)
			}
			before := fencedSaleState(t, ctx, rdb)
			got, err := tc.run(t, ctx, rdb, 4)
			if err != nil || !reflect.DeepEqual(got, tc.refused) {
				t.Fatalf("token 4 after 5: got %v, %v; want %v", got, err, tc.refused)
			}
			if after := fencedSaleState(t, ctx, rdb); after != before {
				t.Errorf("a refused write changed the sale:\n got %s\nwant %s", after, before)
			}
			for _, tok := range []int64{5, 6} {
				got, err := tc.run(t, ctx, rdb, tok)
				if err != nil || reflect.DeepEqual(got, tc.refused) {
					t.Fatalf("token %d: got %v, %v; want accepted", tok, got, err)
				}
				if f, err := rdb.HGet(ctx, lua.SaleKey(saleID), lua.FieldFence).Int64(); err != nil || f != tok {
					t.Errorf("fence after token %d: got %d, %v", tok, f, err)
				}
			}
		})
	}
}

// beginRestore writes the test sale's restore id "r1" (as RestoreBegin
// does) for a token the hash's fence (5) accepts.
func beginRestore(t *testing.T, ctx context.Context, rdb *redis.Client, tok int64) {
	t.Helper()
	if tok < 5 {
		return
	}
	if err := rdb.HSetNX(ctx, lua.SaleKey(saleID), lua.FieldRestoring, "r1").Err(); err != nil {
		t.Fatal(err)
	}
}

// TestTakeFence: tokens increase; a counter Redis lost starts again above
// the caller's clock, so above every token handed out before the loss; a
// counter below the caller's floor starts again above it.
func TestTakeFence(t *testing.T) {
	forEach(t, backends(t), "take", func(t *testing.T, ctx context.Context, rdb *redis.Client) {
		const now = int64(1_800_000_000_000)
		first, err := lua.TakeFence.Run(ctx, rdb, lua.FenceKeys(), now).Int64()
		if err != nil || first != now+1 {
			t.Fatalf("first token: got %d, %v; want %d", first, err, now+1)
		}
		second, err := lua.TakeFence.Run(ctx, rdb, lua.FenceKeys(), now-5).Int64()
		if err != nil || second != first+1 {
			t.Fatalf("second token: got %d, %v; want %d", second, err, first+1)
		}
		// A floor below the counter changes nothing; one above it (a
		// leader's token the counter lost) raises it first.
		third, err := lua.TakeFence.Run(ctx, rdb, lua.FenceKeys(), now, first).Int64()
		if err != nil || third != second+1 {
			t.Fatalf("token with a floor below the counter: got %d, %v; want %d", third, err, second+1)
		}
		fourth, err := lua.TakeFence.Run(ctx, rdb, lua.FenceKeys(), now, third+10).Int64()
		if err != nil || fourth != third+11 {
			t.Fatalf("token with a floor above the counter: got %d, %v; want %d", fourth, err, third+11)
		}
	})
}
