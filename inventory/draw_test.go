package inventory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/inventory"
	"github.com/flashgate/flashgate/lua"
)

// TestReserveWinner: a draw sale refuses every purchase as not started,
// and sells to its winners through ReserveWinner with a purchase's checks:
// the variant's stock, one order per buyer (a retry finds its own order).
func TestReserveWinner(t *testing.T) {
	_, rdb := newRedis(t)
	ctx := context.Background()
	open := time.UnixMilli(1_000)
	queue := lua.DrawWindowArg(open, open.Add(time.Hour))
	if err := lua.Prepare.Run(ctx, rdb, lua.SaleKeys("dr"), 3, 5, 1, 500, "", queue, "S:2,M:1").Err(); err != nil {
		t.Fatal(err)
	}
	svc := inventory.New(rdb, inventory.Config{Logger: quiet()})
	if _, err := svc.Reserve(ctx, "dr", "ann", "S", 1); !errors.Is(err, flashgate.ErrNotStarted) {
		t.Errorf("a purchase of a draw: got %v, want ErrNotStarted", err)
	}
	if _, err := svc.ReserveOrder(ctx, "o0", "dr", "ann", "S", 1); !errors.Is(err, flashgate.ErrNotStarted) {
		t.Errorf("a purchase of a draw with an order id: got %v, want ErrNotStarted", err)
	}
	for _, c := range []struct {
		order, user, variant string
		want                 error
	}{
		{"o1", "ann", "M", nil},
		{"o1", "ann", "M", nil}, // a retry: its own order
		{"o2", "ann", "S", flashgate.ErrAlreadyPurchased},
		{"o3", "bob", "M", flashgate.ErrSoldOut},
		{"o4", "bob", "XL", flashgate.ErrBadRequest},
		{"o5", "bob", "S", nil},
	} {
		got, err := svc.ReserveWinner(ctx, c.order, "dr", c.user, c.variant, 1)
		if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) || (err == nil && got != c.order) {
			t.Errorf("ReserveWinner(%s, %s, %s): got %q, %v; want %s, %v", c.order, c.user, c.variant, got, err, c.order, c.want)
		}
	}
	if n := booked(t, rdb, "dr"); n != 2 {
		t.Errorf("booked: got %d, want 2", n)
	}
	if err := lua.SetState.Run(ctx, rdb, lua.SaleKeys("dr"), "close").Err(); err != nil {
		t.Fatal(err)
	}
	// A stop during the close: the winner was charged, the order is made.
	if got, err := svc.ReserveWinner(ctx, "o6", "dr", "cat", "S", 1); err != nil || got != "o6" {
		t.Errorf("a winner of a closed draw: got %q, %v; want o6, nil", got, err)
	}
}
