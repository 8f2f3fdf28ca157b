package lua_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/lua"
)

// TestRetakeTakenAskedWhileMarked: a take recorded before the sale's hash
// was marked for the restore path is not answered from the retaken set
// while the mark stands (retry later, nothing written): the rebuild that
// follows decides whether the take survives.
func TestRetakeTakenAskedWhileMarked(t *testing.T) {
	forEach(t, backends(t), "marked", func(t *testing.T, ctx context.Context, rdb *redis.Client) {
		key := lua.SaleKey(saleID)
		rdb.HSet(ctx, key, "total", 2, "booked", 0, "reserved", 0, "start", 1)
		rdb.SAdd(ctx, lua.ReleasedKey(saleID), "o1")
		if got, err := lua.Retake.Run(ctx, rdb, lua.RetakeKeys(saleID), "o1", "u1", 1, "").Int64(); err != nil || got != lua.RetakeOK {
			t.Fatalf("first retake: got %d, %v, want %d", got, err, lua.RetakeOK)
		}
		rdb.HSet(ctx, key, "reserved", -1)
		if got, err := lua.Retake.Run(ctx, rdb, lua.RetakeKeys(saleID), "o1", "u1", 1, "").Int64(); err != nil || got != lua.RetakeRetry {
			t.Fatalf("retake while marked: got %d, %v, want %d", got, err, lua.RetakeRetry)
		}
	})
}

// TestRestoreDropsUnhonouredTakes: Restore removes from the retaken set
// the orders it restores as released (the database honoured none of them)
// and keeps those it restores as live.
func TestRestoreDropsUnhonouredTakes(t *testing.T) {
	forEach(t, backends(t), "restore", func(t *testing.T, ctx context.Context, rdb *redis.Client) {
		rdb.SAdd(ctx, lua.RetakenKey(saleID), "o1", "o2")
		if _, err := lua.Restore.Run(ctx, rdb, lua.RestoreKeys(saleID), 0, 1, "u1", "o1", "u2", "o2").Int64(); err != nil {
			t.Fatal(err)
		}
		got := rdb.SMembers(ctx, lua.RetakenKey(saleID)).Val()
		if len(got) != 1 || got[0] != "o2" {
			t.Errorf("retaken set: got %v, want [o2] (o1 restored as released)", got)
		}
	})
}

// TestUnretakeUnhonoured: Unretake gives reserved back too when told the
// retake was never honoured (no retakes row will count its units), and
// leaves it after an honour; a second call changes nothing.
func TestUnretakeUnhonoured(t *testing.T) {
	tests := []struct {
		name         string
		flag         string
		wantReserved string
	}{
		{"honoured", "", "3"},
		{"never honoured", "1", "2"},
	}
	for _, tt := range tests {
		forEach(t, backends(t), tt.name, func(t *testing.T, ctx context.Context, rdb *redis.Client) {
			key := lua.SaleKey(saleID)
			rdb.HSet(ctx, key, "total", 3, "booked", 2, "reserved", 3, "variant:M:booked", 1, "variant:M:reserved", 1)
			rdb.SAdd(ctx, lua.RetakenKey(saleID), "o1")
			for i, want := range []int64{1, 0} {
				got, err := lua.Unretake.Run(ctx, rdb, lua.UnretakeKeys(saleID), "o1", "u1", 1, "M", tt.flag).Int64()
				if err != nil || got != want {
					t.Fatalf("call %d: got %d, %v, want %d", i+1, got, err, want)
				}
			}
			if got := hget(t, ctx, rdb, key, "reserved"); got != tt.wantReserved {
				t.Errorf("reserved: got %s, want %s", got, tt.wantReserved)
			}
			wantV := map[string]string{"": "1", "1": "0"}[tt.flag]
			if got := hget(t, ctx, rdb, key, "variant:M:reserved"); got != wantV {
				t.Errorf("variant reserved: got %s, want %s", got, wantV)
			}
			if got := hget(t, ctx, rdb, key, "booked"); got != "1" {
				t.Errorf("booked: got %s, want 1", got)
			}
		})
	}
}
