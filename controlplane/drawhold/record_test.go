package drawhold_test

import (
	"errors"
	"testing"

	"github.com/flashgate/flashgate"
)

// TestHoldRecordedBeforeItsSecret: a hold is stored with its entry's row
// before the buyer is given what authorises it (the journal flushed first
// when the row is not written yet), so that Redis losing the hold's only
// other record leaves no authorised hold that nothing releases; a hold not
// recorded is answered without its secret, and asking again gives it.
func TestHoldRecordedBeforeItsSecret(t *testing.T) {
	e := newEnv(t, true)
	id := e.enter("buyer-1", 1)
	d, err := e.h.Hold(e.ctx, sale, "buyer-1")
	if err != nil || d.ClientSecret == "" {
		t.Fatalf("Hold: got %+v, %v; want a hold with its client secret", d, err)
	}
	if got, _ := e.held.Load(id); got != d.PaymentIntent {
		t.Errorf("the store's hold of %s: got %v, want %s", id, got, d.PaymentIntent)
	}

	id2 := e.enter("buyer-2", 1)
	e.refuse.Store(true)
	d, err = e.h.Hold(e.ctx, sale, "buyer-2")
	if !errors.Is(err, flashgate.ErrUnavailable) || d.ClientSecret != "" {
		t.Errorf("Hold, not recorded: got %+v, %v; want no client secret, %v", d, err, flashgate.ErrUnavailable)
	}
	if got, ok := e.held.Load(id2); ok {
		t.Errorf("the store's hold of %s: got %v, want none", id2, got)
	}
	d, err = e.h.Hold(e.ctx, sale, "buyer-2") // the page asks again
	if !errors.Is(err, flashgate.ErrUnavailable) || d.ClientSecret != "" {
		t.Errorf("Hold again, not recorded: got %+v, %v; want no client secret, %v", d, err, flashgate.ErrUnavailable)
	}
	if e.flushes.Load() == 0 {
		t.Errorf("journal flushes for a hold whose row is not written: got 0, want some")
	}
	e.writes.Store(true) // the next flush writes the row
	d, err = e.h.Hold(e.ctx, sale, "buyer-2")
	if err != nil || d.ClientSecret == "" {
		t.Fatalf("Hold again, recorded: got %+v, %v; want its client secret", d, err)
	}
	if got, _ := e.held.Load(id2); got != d.PaymentIntent {
		t.Errorf("the store's hold of %s: got %v, want %s", id2, got, d.PaymentIntent)
	}
}
