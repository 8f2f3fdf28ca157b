package inventory_test

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/inventory"
	"github.com/flashgate/flashgate/lua"
)

// TestReleaseBatch: orders of two sales, more than one script call's worth,
// released once each however often they are listed; orders of a sale Redis
// lacks and malformed orders are skipped.
func TestReleaseBatch(t *testing.T) {
	_, rdb := newRedis(t)
	ctx := context.Background()
	svc := inventory.New(rdb, inventory.Config{Logger: quiet()})
	const n = inventory.MaxReleaseBatch*2 + 7
	prepSale(t, rdb, "a", n, 1, "open")
	prepSale(t, rdb, "b", 3, 1, "open")
	var orders []flashgate.Order
	for i := 0; i < n; i++ {
		u := "u" + strconv.Itoa(i)
		id, err := svc.Reserve(ctx, "a", u, "", 1)
		if err != nil {
			t.Fatal(err)
		}
		orders = append(orders, flashgate.Order{ID: id, SaleID: "a", UserID: u, Quantity: 1})
	}
	idB, err := svc.Reserve(ctx, "b", "x", "", 1)
	if err != nil {
		t.Fatal(err)
	}
	list := append([]flashgate.Order{}, orders...)
	list = append(list, orders[:10]...) // listed twice: released once
	list = append(list,
		flashgate.Order{ID: idB, SaleID: "b", UserID: "x", Quantity: 1},
		flashgate.Order{ID: "gone", SaleID: "absent", UserID: "y", Quantity: 1},
		flashgate.Order{ID: "bad", SaleID: "b", UserID: "z", Quantity: 0})
	got, err := svc.ReleaseBatch(ctx, list)
	if got != n+1 || !errors.Is(err, flashgate.ErrBadRequest) {
		t.Fatalf("ReleaseBatch: got %d, %v; want %d and ErrBadRequest", got, err, n+1)
	}
	if b := booked(t, rdb, "a"); b != 0 {
		t.Errorf("booked of a: got %d, want 0", b)
	}
	if b := booked(t, rdb, "b"); b != 0 {
		t.Errorf("booked of b: got %d, want 0", b)
	}
	if got, err := svc.ReleaseBatch(ctx, orders); got != 0 || err != nil {
		t.Errorf("second ReleaseBatch: got %d, %v; want 0, nil", got, err)
	}
	if k, _ := rdb.HLen(ctx, lua.BuyersKey("a")).Result(); k != 0 {
		t.Errorf("buyers left in a: %d", k)
	}
	if k, _ := rdb.Exists(ctx, lua.SaleKey("absent")).Result(); k != 0 {
		t.Errorf("ReleaseBatch created a sale")
	}
}
