package systemtest

import (
	"errors"
	"strconv"
	"testing"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
)

// TestBucketedOrdersBeforeTheSink: buyers of a 3-bucket sale reserve
// through the inventory (the last ones spill: their home buckets are sold
// out) while no order sink runs; every one of their orders is found by the
// control plane as reserved, and pay answers not_payable (not yet stored),
// not not_found, as on an unbucketed sale. Once the sink has run, each is
// its row.
func TestBucketedOrdersBeforeTheSink(t *testing.T) {
	rs := redistest.Start(t)
	s := newBucketSystem(t, rs.Client(t))
	for _, sale := range []flashgate.Sale{
		{ID: "bucketed", Name: "Bucketed", PriceCents: 100, Total: 6, Buckets: 3},
		{ID: "plain", Name: "Plain", PriceCents: 100, Total: 6},
	} {
		if _, err := s.cp.CreateSale(s.ctx, sale); err != nil {
			t.Fatal(err)
		}
		if err := s.cp.Start(s.ctx, sale.ID); err != nil {
			t.Fatal(err)
		}
		type bought struct{ user, order string }
		var orders []bought
		for i := 0; len(orders) < 6 && i < 100; i++ {
			user := sale.ID + "-buyer-" + strconv.Itoa(i)
			id, err := s.inv.Reserve(s.ctx, sale.ID, user, "", 1)
			if err != nil {
				if errors.Is(err, flashgate.ErrSoldOut) {
					break
				}
				t.Fatalf("%s: Reserve(%s): %v", sale.ID, user, err)
			}
			orders = append(orders, bought{user, id})
		}
		if len(orders) != 6 {
			t.Fatalf("%s: %d units sold, want 6", sale.ID, len(orders))
		}
		found := 0
		for _, o := range orders {
			got, err := s.cp.Order(s.ctx, o.order, o.user)
			if err == nil && got.Status == flashgate.StatusReserved && got.SaleID == sale.ID {
				found++
			} else {
				t.Errorf("%s: Order(%s) before the sink: got %+v, %v; want reserved", sale.ID, o.order, got, err)
			}
			if _, err := s.cp.Pay(s.ctx, o.order, o.user); !errors.Is(err, flashgate.ErrNotPayable) {
				t.Errorf("%s: Pay(%s) before the sink: got %v, want not_payable", sale.ID, o.order, err)
			}
		}
		t.Logf("%s: %d of %d reserved orders found before the sink", sale.ID, found, len(orders))
		s.drain(t)
		for _, o := range orders {
			if got, err := s.cp.Order(s.ctx, o.order, o.user); err != nil || got.Status != flashgate.StatusPendingPayment {
				t.Errorf("%s: Order(%s) once stored: got %+v, %v; want pending_payment", sale.ID, o.order, got, err)
			}
		}
	}
}
