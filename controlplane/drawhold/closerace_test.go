package drawhold_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/drawhold"
	"github.com/flashgate/flashgate/controlplane/internal/cptest"
)

// hookedProvider runs hook once, when the read path first reads a hold,
// before it answers: what other actors do while the read is on the wire.
type hookedProvider struct {
	drawhold.Provider
	once sync.Once
	hook func()
}

func (p *hookedProvider) Intent(ctx context.Context, id string) (flashgate.Intent, error) {
	p.once.Do(p.hook)
	return p.Provider.Intent(ctx, id)
}

// TestReadPathBesideLateWebhook: the read path reads ann's entry pending,
// and while it asks the provider about her hold, her held webhook enters
// her (before the close) and the close comes. The read path then finds the
// window closed; ann's entry is entered, in the draw, so her hold is the
// close's to capture and must stay. (The read path cancelled it: ann, who
// was authorised in time, lost her draw to a capture that failed.)
func TestReadPathBesideLateWebhook(t *testing.T) {
	e := newEnv(t, true)
	e.hooks.Store(false) // this test delivers the event itself
	draw := []flashgate.Sale{{ID: sale, Queue: flashgate.QueueDraw}}
	e.enter("ann", 1)
	a, err := e.h.Hold(e.ctx, sale, "ann")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.stand.Confirm(a.PaymentIntent, "4242424242424242"); err != nil {
		t.Fatal(err)
	}
	p := &hookedProvider{Provider: e.stripe, hook: func() {
		e.event("evt_held", flashgate.EventIntentHeld, a.PaymentIntent)
		e.clock.Add(time.Hour) // past the close
	}}
	h := drawhold.New(drawhold.Config{Redis: e.rdb, Store: sales{}, Provider: p, Clock: e.clock,
		Logger: cptest.QuietLogger(), Grace: grace, Rate: 1000})
	e.clock.Add(grace)
	if n, err := h.Reconcile(e.ctx, draw); err != nil || n != 1 {
		t.Fatalf("Reconcile: %d, %v; want 1 looked at", n, err)
	}
	if got := e.state("ann"); got != flashgate.DrawEntered {
		t.Errorf("ann: got %s, want entered", got)
	}
	if got := e.intent(a.PaymentIntent).Status; got != flashgate.IntentRequiresCapture {
		t.Errorf("ann's hold: got %s, want requires_capture (entered in time: the close's to capture)", got)
	}
}
