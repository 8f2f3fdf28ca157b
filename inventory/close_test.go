package inventory_test

import (
	"context"
	"strconv"
	"testing"

	"go.uber.org/goleak"

	"github.com/flashgate/flashgate/inventory"
)

// TestCloseWaitsForBatches: a crowd's reserves of one sale, with one call
// in flight at a time, chain their batches on goroutines of the Service's
// own; after Close (twice) none is left, and the Service still answers.
func TestCloseWaitsForBatches(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) }) // runs last, after the server stops
	_, rdb := newRedis(t)
	svc := inventory.New(rdb, inventory.Config{Logger: quiet(), ReserveCallsInFlight: 1})
	prepSale(t, rdb, "c", 100, 1, "open")
	ctx := context.Background()
	run(400, 64, func(i int) { _, _ = svc.Reserve(ctx, "c", "user-"+strconv.Itoa(i), 1) })
	if err := svc.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := svc.Close(); err != nil {
		t.Fatalf("Close again: %v", err)
	}
	run(50, 16, func(i int) { _, _ = svc.Reserve(ctx, "c", "late-"+strconv.Itoa(i), 1) })
}
