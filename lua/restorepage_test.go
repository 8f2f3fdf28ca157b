package lua_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/lua"
)

// TestRestorePageCount: a page of Restore whose ARGV[2] carries its
// rebuild's id and number ("r1|b|n") is refused unless the hash counts the
// n - 1 pages before it of that rebuild, and Restored ("r1|b|n") unless it
// counts n; a rebuild joining the same restore keeps its own count. A page
// lost to a failover (the count put back one page) refuses the rest.
func TestRestorePageCount(t *testing.T) {
	forEach(t, backends(t), "restorepage", func(t *testing.T, ctx context.Context, rdb *redis.Client) {
		keys := lua.RestoreKeys(saleID)
		if _, err := lua.RestoreBegin.Run(ctx, rdb, lua.SaleKeys(saleID), 0, "r1").Slice(); err != nil {
			t.Fatalf("RestoreBegin: %v", err)
		}
		page := func(arg string) int64 {
			t.Helper()
			n, err := lua.Restore.Run(ctx, rdb, keys, 0, arg, 0, "u1", "o1").Int64()
			if err != nil {
				t.Fatalf("Restore %s: %v", arg, err)
			}
			return n
		}
		restored := func(arg string) int64 {
			t.Helper()
			n, err := lua.Restored.Run(ctx, rdb, lua.SaleKeys(saleID), 0, "d", arg).Int64()
			if err != nil {
				t.Fatalf("Restored %s: %v", arg, err)
			}
			return n
		}
		lose := func(arg string) int64 {
			t.Helper()
			// The replica promoted had the rebuild's first page only.
			if err := rdb.HSet(ctx, lua.SaleKey(saleID), "restorepage:a", 1).Err(); err != nil {
				t.Fatal(err)
			}
			return 0
		}
		for _, tc := range []struct {
			what string
			do   func(string) int64
			arg  string
			want int64
		}{
			{"a's second page first", page, "r1|a|2", lua.RestoreLost},
			{"a's first page", page, "r1|a|1", 1},
			{"b's first page (b joined r1)", page, "r1|b|1", 1},
			{"a's first page again", page, "r1|a|1", lua.RestoreLost},
			{"a's second page", page, "r1|a|2", 1},
			{"a's Restored counting 3", restored, "r1|a|3", lua.RestoredLost},
			{"a's third page under another restore", page, "r2|a|3", lua.RestoreLost},
			{"b's Restored counting 1", restored, "r1|b|1", 1},
			{"b's Restored again", restored, "r1|b|1", lua.RestoredLost},
			{"a failover loses a's second page", lose, "", 0},
			{"a's third page", page, "r1|a|3", lua.RestoreLost},
			{"a's Restored counting 2", restored, "r1|a|2", lua.RestoredLost},
			{"a page with the id alone", page, "r1", 1},
		} {
			if got := tc.do(tc.arg); got != tc.want {
				t.Errorf("%s: got %d, want %d", tc.what, got, tc.want)
			}
		}
	})
}
