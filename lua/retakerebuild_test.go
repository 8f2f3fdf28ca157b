package lua_test

import (
	"context"
	"slices"
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
// but those a rebuild held (refusal 6: the refund's unretake gives their
// units back through the set), and keeps those it restores as live.
func TestRestoreDropsUnhonouredTakes(t *testing.T) {
	forEach(t, backends(t), "restore", func(t *testing.T, ctx context.Context, rdb *redis.Client) {
		rdb.SAdd(ctx, lua.RetakenKey(saleID), "o1", "o2", "o3")
		rdb.HSet(ctx, lua.RetakeRefusedKey(saleID), "o3", 6)
		rdb.HSet(ctx, lua.SaleKey(saleID), lua.FieldRestoring, "r1")
		if _, err := lua.Restore.Run(ctx, rdb, lua.RestoreKeys(saleID), 0, "r1", 2, "u1", "o1", "u3", "o3", "u2", "o2").Int64(); err != nil {
			t.Fatal(err)
		}
		got := rdb.SMembers(ctx, lua.RetakenKey(saleID)).Val()
		slices.Sort(got)
		if !slices.Equal(got, []string{"o2", "o3"}) {
			t.Errorf("retaken set: got %v, want [o2 o3] (o1 restored as released, o3 held)", got)
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

// TestRetakeHold: RetakeHold puts a pending retake's order in the retaken
// and released sets with the refusal "held" (6), so a retake asked again takes nothing
// (RetakeHeld) and an unretake of it gives its units back; the buyer entry
// names it unless the buyer holds another order; an order whose refusal
// another code recorded (given back by an unretake) is not held; a second
// hold of the same order holds it again (a later rebuild); a stale token
// is refused.
func TestRetakeHold(t *testing.T) {
	forEach(t, backends(t), "hold", func(t *testing.T, ctx context.Context, rdb *redis.Client) {
		key := lua.SaleKey(saleID)
		rdb.HSet(ctx, lua.BuyersKey(saleID), "u2", "o9")
		rdb.HSet(ctx, lua.RetakeRefusedKey(saleID), "o3", 3)
		hold := func(token int) []any {
			t.Helper()
			got, err := lua.RetakeHold.Run(ctx, rdb, lua.RetakeHoldKeys(saleID), token, "u1", "o1", "u2", "o2", "u3", "o3").Slice()
			if err != nil {
				t.Fatal(err)
			}
			return got
		}
		if got := hold(5); len(got) != 3 || got[0] != int64(1) || got[1] != int64(1) || got[2] != int64(0) {
			t.Fatalf("hold: got %v, want [1 1 0]", got)
		}
		if got := rdb.SMembers(ctx, lua.RetakenKey(saleID)).Val(); len(got) != 2 {
			t.Errorf("retaken set: got %v, want o1 and o2", got)
		}
		if got := rdb.SMembers(ctx, lua.ReleasedKey(saleID)).Val(); len(got) != 2 {
			t.Errorf("released set: got %v, want o1 and o2 (a later release of them is a no-op)", got)
		}
		if got := rdb.HGet(ctx, lua.BuyersKey(saleID), "u1").Val(); got != "o1" {
			t.Errorf("buyer u1: got %q, want o1", got)
		}
		if got := rdb.HGet(ctx, lua.BuyersKey(saleID), "u2").Val(); got != "o9" {
			t.Errorf("buyer u2: got %q, want o9 (the order it holds)", got)
		}
		rdb.SRem(ctx, lua.RetakenKey(saleID), "o1") // a restore page of a later rebuild
		if got := hold(5); got[0] != int64(1) || got[2] != int64(0) {
			t.Errorf("second hold: got %v, want o1 held again, o3 not", got)
		}
		// The rebuilt sale: o1 and o2 held (booked 2, reserved 2 over P).
		rdb.HSet(ctx, key, "total", 3, "booked", 2, "reserved", 2, "start", 1)
		rdb.SAdd(ctx, lua.ReleasedKey(saleID), "o1", "o2")
		if got, err := lua.Retake.Run(ctx, rdb, lua.RetakeKeys(saleID), "o1", "u1", 1, "").Int64(); err != nil || got != lua.RetakeHeld {
			t.Fatalf("retake of a held order: got %d, %v, want %d", got, err, lua.RetakeHeld)
		}
		if got, err := lua.Unretake.Run(ctx, rdb, lua.UnretakeKeys(saleID), "o1", "u1", 1, "", "1").Int64(); err != nil || got != 1 {
			t.Fatalf("unretake of a held order: got %d, %v, want 1", got, err)
		}
		f := rdb.HMGet(ctx, key, "booked", "reserved").Val()
		if f[0] != "1" || f[1] != "1" {
			t.Errorf("after the unretake: booked %v reserved %v, want 1 and 1", f[0], f[1])
		}
		if got := rdb.HGet(ctx, lua.BuyersKey(saleID), "u1").Val(); got != "" {
			t.Errorf("buyer u1 after the unretake: got %q, want none", got)
		}
		if got := hold(5); got[0] != int64(0) {
			t.Errorf("hold after the unretake: got %v, want o1 not held", got)
		}
		rdb.HSet(ctx, key, "fence", 9)
		if got, err := lua.RetakeHold.Run(ctx, rdb, lua.RetakeHoldKeys(saleID), 5, "u1", "o1").Int64(); err != nil || got != -1 {
			t.Errorf("stale token: got %d, %v, want -1", got, err)
		}
	})
}

// TestResyncCountsHeldStillRetaken: a rebuild's final re-sync counts a held
// retake's units only while its refusal is recorded as held (6): a refund's
// unretake after the hold gave them back and recorded 3 (explorer seed
// 1200), and counting them again would hide the unit. A restore page that
// dropped the order from the retaken set changes nothing.
func TestResyncCountsHeldStillRetaken(t *testing.T) {
	forEach(t, backends(t), "held", func(t *testing.T, ctx context.Context, rdb *redis.Client) {
		key := lua.SaleKey(saleID)
		keys := []string{key, lua.RetakeRefusedKey(saleID), lua.RetakenKey(saleID), lua.ReleasedKey(saleID), lua.BuyersKey(saleID)}
		// A concurrent rebuild held o1 (booked 1, reserved 2 with P 1), then
		// the refund's unretake gave its unit back (and recorded 3).
		rdb.HSet(ctx, lua.RetakeRefusedKey(saleID), "o1", 3)
		rdb.HSet(ctx, key, "total", 1, "booked", 0, "reserved", 1, "start", 0, "resume", 1, "count", 0, "access", 0)
		resync := func() []int64 {
			t.Helper()
			v, err := lua.Resync.Run(ctx, rdb, keys, 0, 1, 1, 1, 100, "open", "1.5", 0, "1", 5, "", "", "", "u1", "o1", 1, "").Int64Slice()
			if err != nil || len(v) != 10 {
				t.Fatalf("resync: got %v, %v", v, err)
			}
			return v
		}
		if v := resync(); v[5] != 0 {
			t.Errorf("o1 unretaken: booked %d, want 0 (its unit is free)", v[5])
		}
		rdb.HSet(ctx, lua.RetakeRefusedKey(saleID), "o1", 6) // held, not in the retaken set
		if v := resync(); v[5] != 1 || v[6] != 2 {
			t.Errorf("o1 still held: booked %d reserved %d, want 1 and 2", v[5], v[6])
		}
	})
}

// TestUnretakeHeldWhileRebuilding: the refund's unretake of an order a
// rebuild under way held, before that rebuild's final re-sync wrote the
// hash (no total yet), answers no sale and records the refusal as given
// back (3), out of the retaken set: the final re-sync then leaves its
// units free (explorer seed 20263050 hid the unit).
func TestUnretakeHeldWhileRebuilding(t *testing.T) {
	forEach(t, backends(t), "rebuilding", func(t *testing.T, ctx context.Context, rdb *redis.Client) {
		if got, err := lua.RetakeHold.Run(ctx, rdb, lua.RetakeHoldKeys(saleID), 5, "u1", "o1").Int64Slice(); err != nil || len(got) != 1 || got[0] != 1 {
			t.Fatalf("hold: got %v, %v, want [1]", got, err)
		}
		if got, err := lua.Unretake.Run(ctx, rdb, lua.UnretakeKeys(saleID), "o1", "u1", 1, "", "1").Int64(); err != nil || got != -1 {
			t.Fatalf("unretake while rebuilding: got %d, %v, want -1", got, err)
		}
		if got := rdb.HGet(ctx, lua.RetakeRefusedKey(saleID), "o1").Val(); got != "3" {
			t.Errorf("refusal after the unretake: got %q, want 3", got)
		}
		if rdb.SIsMember(ctx, lua.RetakenKey(saleID), "o1").Val() {
			t.Errorf("o1 still in the retaken set after the unretake")
		}
		keys := []string{lua.SaleKey(saleID), lua.RetakeRefusedKey(saleID), lua.RetakenKey(saleID), lua.ReleasedKey(saleID), lua.BuyersKey(saleID)}
		v, err := lua.Resync.Run(ctx, rdb, keys, 0, 0, 1, 1, 100, "open", "1.5", 0, "1", 5, "", "", "", "u1", "o1", 1, "").Int64Slice()
		if err != nil || len(v) != 10 {
			t.Fatalf("resync: got %v, %v", v, err)
		}
		if v[5] != 0 {
			t.Errorf("the rebuild's final re-sync: booked %d, want 0 (o1's unit given back)", v[5])
		}
	})
}

// TestUnretakeBeforeHoldWhileRebuilding: the refund of a late payment
// whose retake a rebuild under way read as pending but has not held yet
// (the sale's hash has no total, no refusal is recorded) records the
// refusal as given back (3), so the hold that follows leaves the order
// out: its units are never counted again. Before, the unretake recorded
// nothing, the hold held the order and the final re-sync counted a unit
// no order would ever give back.
func TestUnretakeBeforeHoldWhileRebuilding(t *testing.T) {
	for _, flag := range []string{"", "1"} {
		forEach(t, backends(t), "flag="+flag, func(t *testing.T, ctx context.Context, rdb *redis.Client) {
			if got, err := lua.Unretake.Run(ctx, rdb, lua.UnretakeKeys(saleID), "o1", "u1", 1, "", flag).Int64(); err != nil || got != -1 {
				t.Fatalf("unretake while rebuilding: got %d, %v, want -1", got, err)
			}
			if got := rdb.HGet(ctx, lua.RetakeRefusedKey(saleID), "o1").Val(); got != "3" {
				t.Errorf("refusal after the unretake: got %q, want 3", got)
			}
			if got, err := lua.RetakeHold.Run(ctx, rdb, lua.RetakeHoldKeys(saleID), 5, "u1", "o1").Int64Slice(); err != nil || len(got) != 1 || got[0] != 0 {
				t.Fatalf("hold after the unretake: got %v, %v, want [0]", got, err)
			}
			if rdb.SIsMember(ctx, lua.RetakenKey(saleID), "o1").Val() {
				t.Errorf("o1 in the retaken set after the hold")
			}
		})
	}
}

// TestResyncChecksRestore: a rebuild's final Resync with a checked
// restore ("1:<id>") rebuilds a missing hash only while a restore's id
// (lua.Restored) is there, its own or a later one's, and deletes it; with
// none (Redis lost the restored pages since) it answers {-1} and writes
// nothing.
func TestResyncChecksRestore(t *testing.T) {
	forEach(t, backends(t), "restore", func(t *testing.T, ctx context.Context, rdb *redis.Client) {
		key := lua.SaleKey(saleID)
		run := func(arg string) []int64 {
			v, err := lua.Resync.Run(ctx, rdb, []string{key}, 0, 0, 1, 1, 100, "open", "1.5", 0, arg, 5).Int64Slice()
			if err != nil {
				t.Fatalf("resync %s: %v", arg, err)
			}
			return v
		}
		if v := run("1:a"); len(v) != 1 || v[0] != lua.ResyncRestore {
			t.Fatalf("with no restore's id: got %v, want [%d]", v, lua.ResyncRestore)
		}
		if rdb.HExists(ctx, key, lua.FieldTotal).Val() {
			t.Fatalf("with no restore's id: the hash was written")
		}
		rdb.HSet(ctx, key, lua.FieldRestoring, "r1")
		if n, err := lua.Restored.Run(ctx, rdb, []string{key}, 5, "b", "r1").Int(); err != nil || n != 1 {
			t.Fatalf("restored: got %d, %v", n, err)
		}
		if v := run("1:a"); len(v) != 10 || v[0] != 1 {
			t.Fatalf("with a later restore's id: got %v, want the hash rebuilt", v)
		}
		if rdb.HExists(ctx, key, "restored").Val() {
			t.Errorf("the restore's id is still there after the rebuild")
		}
		if v := run("1:c"); len(v) != 10 || v[0] != 0 {
			t.Fatalf("a second rebuild's Resync over the written hash: got %v, want it re-synced", v)
		}
	})
}
