package lua_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/lua"
)

// TestRetake: a late payment takes its order's unit again when the sale
// has one and the buyer holds no other order, once however often it is
// asked; a release not yet delivered becomes a no-op; a sold-out sale or a
// buyer with another order is refused without a write to the stock. Each
// order's decision is recorded: asked again, whoever asks and whatever
// changed meanwhile, it answers the same. A taken unit counts as reserved
// (not yet persisted), so a re-sync before the database records it keeps
// it booked.
func TestRetake(t *testing.T) {
	forEach(t, backends(t), "retake", func(t *testing.T, ctx context.Context, rdb *redis.Client) {
		keys := lua.RetakeKeys(saleID)
		retake := func(order, user string) int64 {
			t.Helper()
			n, err := lua.Retake.Run(ctx, rdb, keys, order, user, 1).Int64()
			if err != nil {
				t.Fatalf("Retake %s: %v", order, err)
			}
			return n
		}
		booked := func() string { return hget(t, ctx, rdb, lua.SaleKey(saleID), "booked") }
		reserved := func() string { return hget(t, ctx, rdb, lua.SaleKey(saleID), "reserved") }
		if got := retake("o1", "u1"); got != lua.RetakeNoSale {
			t.Errorf("no sale: got %d, want %d", got, lua.RetakeNoSale)
		}
		rdb.HSet(ctx, lua.SaleKey(saleID), "total", 2, "booked", 2, "reserved", 4)
		// o1's release was delivered (in the released set, unit back);
		// the unit was sold again meanwhile: sold out, and so it stays
		// when a unit is freed later.
		rdb.SAdd(ctx, lua.ReleasedKey(saleID), "o1", "o3", "o4")
		if got := retake("o1", "u1"); got != lua.RetakeSoldOut || booked() != "2" {
			t.Errorf("sold out: got %d booked %s, want %d and 2", got, booked(), lua.RetakeSoldOut)
		}
		rdb.HSet(ctx, lua.SaleKey(saleID), "booked", 1)
		if got := retake("o1", "u1"); got != lua.RetakeSoldOut || booked() != "1" {
			t.Errorf("sold out, asked again with a unit free: got %d booked %s, want %d and 1 (the decision recorded)", got, booked(), lua.RetakeSoldOut)
		}
		rdb.HSet(ctx, lua.BuyersKey(saleID), "u3", "o9")
		if got := retake("o3", "u3"); got != lua.RetakeHolds || booked() != "1" {
			t.Errorf("buyer holds another order: got %d booked %s, want %d and 1", got, booked(), lua.RetakeHolds)
		}
		rdb.HDel(ctx, lua.BuyersKey(saleID), "u3")
		if got := retake("o3", "u3"); got != lua.RetakeHolds {
			t.Errorf("buyer holds another order, asked again after it left: got %d, want %d", got, lua.RetakeHolds)
		}
		for range 3 {
			if got := retake("o4", "u4"); got != lua.RetakeOK {
				t.Errorf("unit free: got %d, want %d", got, lua.RetakeOK)
			}
		}
		if booked() != "2" || reserved() != "5" || hget(t, ctx, rdb, lua.BuyersKey(saleID), "u4") != "o4" {
			t.Errorf("after three retakes: booked %s reserved %s buyer %q, want 2, 5 and o4", booked(), reserved(), hget(t, ctx, rdb, lua.BuyersKey(saleID), "u4"))
		}
		// A release of o4 delivered late is a no-op.
		if n, _ := lua.Release.Run(ctx, rdb, lua.ReleaseKeys(saleID), "o4", "u4", 1).Int64(); n != 0 || booked() != "2" {
			t.Errorf("late release: got %d booked %s, want 0 and 2", n, booked())
		}
		// o2's release was never delivered: its unit is still booked; the
		// retake keeps it, counts it as reserved, and makes the pending
		// release a no-op.
		rdb.HSet(ctx, lua.BuyersKey(saleID), "u2", "o2")
		if got := retake("o2", "u2"); got != lua.RetakeOK || booked() != "2" || reserved() != "6" {
			t.Errorf("undelivered release: got %d booked %s reserved %s, want %d, 2 and 6", got, booked(), reserved(), lua.RetakeOK)
		}
		if n, _ := lua.Release.Run(ctx, rdb, lua.ReleaseKeys(saleID), "o2", "u2", 1).Int64(); n != 0 || booked() != "2" {
			t.Errorf("the pending release delivered: got %d booked %s, want 0 and 2", n, booked())
		}
	})
}

// TestRetakeKeepsQueuePromises: on a fair sale, a late payment takes a
// unit only when the units promised to the admitted buyers
// (queue_promised × per_user) stay free.
func TestRetakeKeepsQueuePromises(t *testing.T) {
	forEach(t, backends(t), "retake-fair", func(t *testing.T, ctx context.Context, rdb *redis.Client) {
		keys := lua.RetakeKeys(saleID)
		rdb.HSet(ctx, lua.SaleKey(saleID), "total", 3, "booked", 1, "reserved", 2, "per_user", 1,
			lua.FieldQueue, "fair", lua.FieldQueuePromised, 2)
		rdb.SAdd(ctx, lua.ReleasedKey(saleID), "o1", "o2")
		if got, _ := lua.Retake.Run(ctx, rdb, keys, "o1", "u1", 1).Int64(); got != lua.RetakeSoldOut {
			t.Errorf("two units free, both promised: got %d, want %d", got, lua.RetakeSoldOut)
		}
		rdb.HSet(ctx, lua.SaleKey(saleID), lua.FieldQueuePromised, 1)
		if got, _ := lua.Retake.Run(ctx, rdb, keys, "o2", "u2", 1).Int64(); got != lua.RetakeOK {
			t.Errorf("two units free, one promised: got %d, want %d", got, lua.RetakeOK)
		}
		if b := hget(t, ctx, rdb, lua.SaleKey(saleID), "booked"); b != "2" {
			t.Errorf("booked: got %s, want 2", b)
		}
	})
}

// TestRetakeRetriesWhilePaused: a retake takes nothing and records
// nothing (retry later) while the sale's hash cannot be trusted to decide:
// paused for a rebuild after a Redis loss or a failover, marked for the
// restore path (the sale's or the variant's reserved below zero), or a
// fair sale whose promises are unknown (queue_promised lost with the hash).
// An open sale decides; a closed one (rebuilt or not) refuses, recorded.
func TestRetakeRetriesWhilePaused(t *testing.T) {
	tests := []struct {
		name    string
		fields  []any
		variant string
		want    int64
	}{
		{"open", []any{"start", 1}, "", lua.RetakeOK},
		{"paused after a loss", []any{"start", 0, "resume", 1}, "", lua.RetakeRetry},
		{"paused by a failover", []any{"start", 0, "resume", 2}, "", lua.RetakeRetry},
		{"rebuilt closed", []any{"start", 0, "resume", 0, "closed", 1}, "", lua.RetakeClosed},
		{"closed", []any{"start", 0, "closed", 1}, "", lua.RetakeClosed},
		{"closed fair, promises unknown", []any{"start", 0, "closed", 1, lua.FieldQueue, "fair"}, "", lua.RetakeClosed},
		{"marked for the restore", []any{"start", 0, "reserved", -1}, "", lua.RetakeRetry},
		{"variant marked for the restore", []any{"start", 1, "variant:M:total", 2, "variant:M:reserved", -1}, "M", lua.RetakeRetry},
		{"fair, promises unknown", []any{"start", 1, lua.FieldQueue, "fair", "per_user", 1}, "", lua.RetakeRetry},
		{"fair, promises known", []any{"start", 1, lua.FieldQueue, "fair", "per_user", 1, lua.FieldQueuePromised, 0}, "", lua.RetakeOK},
	}
	for _, tt := range tests {
		forEach(t, backends(t), tt.name, func(t *testing.T, ctx context.Context, rdb *redis.Client) {
			key := lua.SaleKey(saleID)
			rdb.HSet(ctx, key, "total", 2, "booked", 0, "reserved", 0)
			rdb.HSet(ctx, key, tt.fields...)
			rdb.SAdd(ctx, lua.ReleasedKey(saleID), "o1")
			before := rdb.HGetAll(ctx, key).Val()
			got, err := lua.Retake.Run(ctx, rdb, lua.RetakeKeys(saleID), "o1", "u1", 1, tt.variant).Int64()
			if err != nil || got != tt.want {
				t.Fatalf("got %d, %v, want %d", got, err, tt.want)
			}
			if got != lua.RetakeRetry {
				return
			}
			after := rdb.HGetAll(ctx, key).Val()
			if len(after) != len(before) || after["booked"] != before["booked"] || after["reserved"] != before["reserved"] {
				t.Errorf("hash changed: %v, was %v", after, before)
			}
			if n := rdb.Exists(ctx, lua.RetakenKey(saleID), lua.RetakeRefusedKey(saleID), lua.BuyersKey(saleID)).Val(); n != 0 {
				t.Errorf("%d of the retaken set, refusals and buyers written, want none", n)
			}
		})
	}
}
