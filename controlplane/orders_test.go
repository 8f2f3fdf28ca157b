package controlplane

import (
	"errors"
	"testing"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/lua"
)

// TestOrderTransitions covers the buyer's view: a reserved order, the owner
// check, pay, cancel and their conflicts.
func TestOrderTransitions(t *testing.T) {
	e := newEnv(t, sqliteDSN(t), nil)
	e.openSale("s", 5, 0)
	_, a := e.reserve("s", "alice")
	_, b := e.reserve("s", "bob")
	o, err := e.svc.Order(e.ctx, a, "alice")
	if err != nil || o.Status != flashgate.StatusReserved || o.SaleID != "s" {
		t.Fatalf("Order before persist = %+v, %v; want reserved in sale s", o, err)
	}
	if _, err := e.svc.Order(e.ctx, a, "bob"); !errors.Is(err, flashgate.ErrNotFound) {
		t.Fatalf("Order of another user: got %v, want ErrNotFound", err)
	}
	if _, err := e.svc.Pay(e.ctx, a, "alice"); !errors.Is(err, flashgate.ErrNotPayable) {
		t.Fatalf("Pay before persist: got %v, want ErrNotPayable", err)
	}
	e.persist("s")
	cases := []struct {
		name   string
		act    func() (flashgate.Order, error)
		want   flashgate.OrderStatus
		wantEr error
	}{
		{"pay another's", func() (flashgate.Order, error) { return e.svc.Pay(e.ctx, a, "bob") }, "", flashgate.ErrNotFound},
		{"pay", func() (flashgate.Order, error) { return e.svc.Pay(e.ctx, a, "alice") }, flashgate.StatusPaid, nil},
		{"pay again", func() (flashgate.Order, error) { return e.svc.Pay(e.ctx, a, "alice") }, flashgate.StatusPaid, nil},
		{"cancel paid", func() (flashgate.Order, error) { return e.svc.Cancel(e.ctx, a, "alice") }, "", flashgate.ErrNotPayable},
		{"cancel another's", func() (flashgate.Order, error) { return e.svc.Cancel(e.ctx, b, "alice") }, "", flashgate.ErrNotFound},
		{"cancel", func() (flashgate.Order, error) { return e.svc.Cancel(e.ctx, b, "bob") }, flashgate.StatusCancelled, nil},
		{"cancel again", func() (flashgate.Order, error) { return e.svc.Cancel(e.ctx, b, "bob") }, flashgate.StatusCancelled, nil},
		{"pay cancelled", func() (flashgate.Order, error) { return e.svc.Pay(e.ctx, b, "bob") }, "", flashgate.ErrNotPayable},
		{"refund cancelled", func() (flashgate.Order, error) { return e.svc.Refund(e.ctx, b) }, "", flashgate.ErrNotPayable},
		{"refund paid", func() (flashgate.Order, error) { return e.svc.Refund(e.ctx, a) }, flashgate.StatusRefunded, nil},
		{"unknown", func() (flashgate.Order, error) { return e.svc.Order(e.ctx, "zzz", "alice") }, "", flashgate.ErrNotFound},
		{"bad id", func() (flashgate.Order, error) { return e.svc.Order(e.ctx, "a/b", "alice") }, "", flashgate.ErrNotFound},
	}
	for _, c := range cases {
		got, err := c.act()
		if c.wantEr != nil {
			if !errors.Is(err, c.wantEr) {
				t.Errorf("%s: got %v, want %v", c.name, err, c.wantEr)
			}
			continue
		}
		if err != nil || got.Status != c.want {
			t.Errorf("%s: got %q, %v; want %q", c.name, got.Status, err, c.want)
		}
	}
	if got := field(t, e.rdb, "s", lua.FieldBooked); got != 0 {
		t.Errorf("booked = %d, want 0 after a cancel and a refund", got)
	}
	// Bob's cancelled unit is his to buy again.
	if code, _ := e.reserve("s", "bob"); code != lua.ReserveOK {
		t.Errorf("bob buying again: code %d, want %d", code, lua.ReserveOK)
	}
}

// TestPayWaitsForPersist: a Pay that arrives before the sink persisted the
// order waits for the row.
func TestPayWaitsForPersist(t *testing.T) {
	e := newEnv(t, sqliteDSN(t), func(c *Config) { c.PersistWait = 0 })
	e.openSale("s", 5, 0)
	_, id := e.reserve("s", "carol")
	done := make(chan error, 1)
	go func() {
		_, err := e.svc.Pay(e.ctx, id, "carol")
		done <- err
	}()
	e.persist("s")
	if err := <-done; err != nil {
		t.Fatalf("Pay: %v", err)
	}
}
