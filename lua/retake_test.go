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
// buyer with another order is refused without a write.
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
		if got := retake("o1", "u1"); got != lua.RetakeNoSale {
			t.Errorf("no sale: got %d, want %d", got, lua.RetakeNoSale)
		}
		rdb.HSet(ctx, lua.SaleKey(saleID), "total", 2, "booked", 2)
		// o1's release was delivered (in the released set, unit back);
		// the unit was sold again meanwhile: sold out.
		rdb.SAdd(ctx, lua.ReleasedKey(saleID), "o1")
		if got := retake("o1", "u1"); got != lua.RetakeSoldOut || booked() != "2" {
			t.Errorf("sold out: got %d booked %s, want %d and 2", got, booked(), lua.RetakeSoldOut)
		}
		rdb.HSet(ctx, lua.SaleKey(saleID), "booked", 1)
		rdb.HSet(ctx, lua.BuyersKey(saleID), "u1", "o9")
		if got := retake("o1", "u1"); got != lua.RetakeHolds || booked() != "1" {
			t.Errorf("buyer holds another order: got %d booked %s, want %d and 1", got, booked(), lua.RetakeHolds)
		}
		rdb.HDel(ctx, lua.BuyersKey(saleID), "u1")
		for range 3 {
			if got := retake("o1", "u1"); got != lua.RetakeOK {
				t.Errorf("unit free: got %d, want %d", got, lua.RetakeOK)
			}
		}
		if booked() != "2" || hget(t, ctx, rdb, lua.BuyersKey(saleID), "u1") != "o1" {
			t.Errorf("after three retakes: booked %s buyer %q, want 2 and o1", booked(), hget(t, ctx, rdb, lua.BuyersKey(saleID), "u1"))
		}
		// A release of o1 delivered late is a no-op.
		if n, _ := lua.Release.Run(ctx, rdb, lua.ReleaseKeys(saleID), "o1", "u1", 1).Int64(); n != 0 || booked() != "2" {
			t.Errorf("late release: got %d booked %s, want 0 and 2", n, booked())
		}
		// o2's release was never delivered: its unit is still booked; the
		// retake keeps it and makes the pending release a no-op.
		rdb.HSet(ctx, lua.BuyersKey(saleID), "u2", "o2")
		if got := retake("o2", "u2"); got != lua.RetakeOK || booked() != "2" {
			t.Errorf("undelivered release: got %d booked %s, want %d and 2", got, booked(), lua.RetakeOK)
		}
		if n, _ := lua.Release.Run(ctx, rdb, lua.ReleaseKeys(saleID), "o2", "u2", 1).Int64(); n != 0 || booked() != "2" {
			t.Errorf("the pending release delivered: got %d booked %s, want 0 and 2", n, booked())
		}
	})
}
