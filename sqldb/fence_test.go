package sqldb

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
)

// TestFencedWrites: the writes of the control plane's loops (a sale's
// state, expiry, acknowledged releases) carry a fencing token; once a
// higher token wrote, a lower one is refused with ErrFenced and changes no
// row, and the highest token (or an equal one) still writes.
func TestFencedWrites(t *testing.T) {
	each(t, func(t *testing.T, _ string, db *DB) {
		ctx := context.Background()
		if err := db.CreateSale(ctx, flashgate.Sale{ID: "s", Name: "s", Total: 10}); err != nil {
			t.Fatal(err)
		}
		var batch []flashgate.Order
		for i := 0; i < 4; i++ {
			batch = append(batch, order(fmt.Sprintf("o%d", i), "s", fmt.Sprintf("u%d", i), 1, t0))
		}
		if _, err := db.InsertOrders(ctx, batch); err != nil {
			t.Fatal(err)
		}
		now := t0.Add(time.Hour)
		// The newer leader (token 7) expires o0 and opens the sale.
		if err := db.SetSaleState(ctx, "s", flashgate.StateOpen, 7); err != nil {
			t.Fatalf("SetSaleState with token 7: %v", err)
		}
		if _, err := db.Transition(ctx, "o1", []flashgate.OrderStatus{flashgate.StatusPendingPayment}, flashgate.StatusPaid, t0); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Transition(ctx, "o2", []flashgate.OrderStatus{flashgate.StatusPendingPayment}, flashgate.StatusPaid, t0); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Transition(ctx, "o2", []flashgate.OrderStatus{flashgate.StatusPaid}, flashgate.StatusRefunded, t0); err != nil {
			t.Fatal(err)
		}

		// The stale leader (token 6) is refused everywhere and changes nothing.
		if err := db.SetSaleState(ctx, "s", flashgate.StateClosed, 6); !errors.Is(err, flashgate.ErrFenced) {
			t.Errorf("SetSaleState with stale token: got %v, want ErrFenced", err)
		}
		if got, err := db.ExpireDue(ctx, now, now, 10, 6); !errors.Is(err, flashgate.ErrFenced) || len(got) != 0 {
			t.Errorf("ExpireDue with stale token: got %d orders, %v; want 0, ErrFenced", len(got), err)
		}
		if _, err := db.ReleasesDelivered(ctx, "s", []string{"o2"}, 6); !errors.Is(err, flashgate.ErrFenced) {
			t.Errorf("ReleasesDelivered with stale token: got %v, want ErrFenced", err)
		}
		if !errors.Is(flashgate.ErrFenced, flashgate.ErrUnavailable) {
			t.Errorf("ErrFenced is not ErrUnavailable")
		}
		sale, err := db.Sale(ctx, "s")
		if err != nil || sale.State != flashgate.StateOpen {
			t.Errorf("sale after a stale close: got %v, %v; want open", sale.State, err)
		}
		for _, id := range []string{"o0", "o3"} {
			if o, err := db.Order(ctx, id); err != nil || o.Status != flashgate.StatusPendingPayment {
				t.Errorf("order %s after a stale expiry: got %v, %v; want pending_payment", id, o.Status, err)
			}
		}
		if q, delivered, err := db.PendingReleases(ctx, "s", 10); err != nil || len(q) != 1 || delivered != 0 {
			t.Errorf("pending releases after a stale acknowledgement: got %d queued, %d delivered, %v; want 1, 0", len(q), delivered, err)
		}

		// The newer token, and a later one, still write.
		got, err := db.ExpireDue(ctx, now, now, 10, 7)
		if err != nil || len(got) != 2 {
			t.Errorf("ExpireDue with token 7: got %d orders, %v; want 2", len(got), err)
		}
		if n, err := db.ReleasesDelivered(ctx, "s", []string{"o2"}, 8); err != nil || n != 1 {
			t.Errorf("ReleasesDelivered with token 8: got %d, %v; want 1", n, err)
		}
		if err := db.SetSaleState(ctx, "s", flashgate.StateClosed, 7); !errors.Is(err, flashgate.ErrFenced) {
			t.Errorf("SetSaleState with token 7 after 8: got %v, want ErrFenced", err)
		}
	})
}
