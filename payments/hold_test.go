package payments_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/stripelocal"
)

// clock is a settable clock for the stand-in's holds.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }
func newClock() *clock               { return &clock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)} }
func holdOf(entry string) flashgate.Hold {
	return flashgate.Hold{EntryID: entry, SaleID: "s1", AmountCents: 1200, Currency: "usd"}
}

// TestStripeHold: a draw entry's hold is one PaymentIntent with manual
// capture however often it is asked for, keyed by the entry, with the
// entry and sale in its metadata; confirmed it is requires_capture, and its
// held event names the entry; Cancel releases it.
func TestStripeHold(t *testing.T) {
	p, stand := newStripe(t)
	ctx := context.Background()
	first, err := p.Hold(ctx, holdOf("e1"))
	if err != nil {
		t.Fatal(err)
	}
	again, err := p.Hold(ctx, holdOf("e1"))
	if err != nil || again.ID != first.ID || first.ClientSecret == "" || first.EntryID != "e1" || first.OrderID != "" {
		t.Fatalf("hold twice: got %+v, %+v, %v; want one intent of entry e1 with a client secret", first, again, err)
	}
	if n := len(stand.Intents()); n != 1 {
		t.Errorf("intents: got %d, want 1", n)
	}
	for _, r := range stand.Requests() {
		if r.Path == "/v1/payment_intents" && (r.IdempotencyKey != "flashgate-hold-e1" || r.Form["capture_method"] != "manual" ||
			r.Form["amount"] != "1200" || r.Form["metadata[entry_id]"] != "e1" || r.Form["metadata[sale_id]"] != "s1") {
			t.Errorf("create request: got %+v", r)
		}
	}
	if first.Status != "requires_payment_method" {
		t.Errorf("unconfirmed hold: status %s, want requires_payment_method", first.Status)
	}
	if _, err := stand.Confirm(first.ID, "4242424242424242"); err != nil {
		t.Fatal(err)
	}
	got, err := p.Intent(ctx, first.ID)
	if err != nil || got.Status != flashgate.IntentRequiresCapture || got.EntryID != "e1" || got.AmountCents != 1200 {
		t.Fatalf("confirmed hold: got %+v, %v; want requires_capture of entry e1 for 1200", got, err)
	}
	ev := stand.Event("evt_h1", flashgate.EventIntentHeld, first.ID, "")
	pe, err := p.ParseEvent(ev, stand.Sign(ev, time.Now()))
	want := flashgate.PaymentEvent{ID: "evt_h1", Type: flashgate.EventIntentHeld, IntentID: first.ID, EntryID: "e1", SaleID: "s1", Status: flashgate.IntentRequiresCapture}
	if err != nil || pe != want {
		t.Errorf("held event: got %+v, %v; want %+v", pe, err, want)
	}
	if in, err := p.Cancel(ctx, first.ID); err != nil || in.Status != flashgate.IntentCanceled {
		t.Errorf("release: got %+v, %v; want canceled", in, err)
	}
	if in, err := p.Cancel(ctx, first.ID); err != nil || in.Status != flashgate.IntentCanceled {
		t.Errorf("release again: got %+v, %v; want canceled", in, err)
	}
}

// TestStripeCapture: a confirmed hold captures once (a retry with its key,
// or another key, answers the captured intent); a hold declined at
// capture, expired, released or never confirmed is ErrNotCapturable; an
// unknown intent ErrNotFound; the provider failing ErrUnavailable.
func TestStripeCapture(t *testing.T) {
	p, stand := newStripe(t)
	clk := newClock()
	stand.SetClock(clk.Now)
	stand.SetHoldLife(time.Hour)
	ctx := context.Background()
	cases := []struct {
		name   string
		card   string // "" leaves the hold unconfirmed
		before func(id string)
		want   error
		status string
	}{
		{name: "captured", card: "4242424242424242", status: flashgate.IntentSucceeded},
		{name: "declined at capture", card: stripelocal.CaptureDeclineCard, want: flashgate.ErrNotCapturable, status: flashgate.IntentCanceled},
		{name: "expired", card: "4242424242424242", before: func(string) { clk.Add(time.Hour) }, want: flashgate.ErrNotCapturable, status: flashgate.IntentCanceled},
		{name: "released", card: "4242424242424242", before: func(id string) {
			if _, err := p.Cancel(ctx, id); err != nil {
				t.Fatal(err)
			}
		}, want: flashgate.ErrNotCapturable, status: flashgate.IntentCanceled},
		{name: "unconfirmed", want: flashgate.ErrNotCapturable, status: "requires_payment_method"},
	}
	for i, tc := range cases {
		h, err := p.Hold(ctx, holdOf(fmt.Sprint("e", i)))
		if err != nil {
			t.Fatal(err)
		}
		if tc.card != "" {
			if _, err := stand.Confirm(h.ID, tc.card); err != nil {
				t.Fatalf("%s: confirm: %v", tc.name, err)
			}
		}
		if tc.before != nil {
			tc.before(h.ID)
		}
		key := "flashgate-capture-" + h.ID
		got, err := p.Capture(ctx, h.ID, key)
		if !errors.Is(err, tc.want) || (err == nil) != (tc.want == nil) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
		if in, _ := stand.Intent(h.ID); in.Status != tc.status {
			t.Errorf("%s: intent %s, want %s", tc.name, in.Status, tc.status)
		}
		if tc.want != nil {
			if st, code := flashgate.ErrorStatus(err); st != 409 || code != "not_capturable" {
				t.Errorf("%s: answered %d %s, want 409 not_capturable", tc.name, st, code)
			}
			continue
		}
		if got.Status != flashgate.IntentSucceeded || got.EntryID != h.EntryID {
			t.Errorf("%s: got %+v, want succeeded of entry %s", tc.name, got, h.EntryID)
		}
		for _, k := range []string{key, "another-key"} {
			if again, err := p.Capture(ctx, h.ID, k); err != nil || again.Status != flashgate.IntentSucceeded {
				t.Errorf("%s: capture again under %s: got %+v, %v; want the captured intent", tc.name, k, again, err)
			}
		}
		if in, _ := stand.Intent(h.ID); in.AmountReceived != 1200 {
			t.Errorf("%s: received %d, want 1200 once", tc.name, in.AmountReceived)
		}
	}
	if _, err := p.Capture(ctx, "pi_none", "k"); !errors.Is(err, flashgate.ErrNotFound) {
		t.Errorf("unknown intent: got %v, want ErrNotFound", err)
	}
	h, err := p.Hold(ctx, holdOf("e-fail"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stand.Confirm(h.ID, "4242424242424242"); err != nil {
		t.Fatal(err)
	}
	stand.FailNext(4)
	if _, err := p.Capture(ctx, h.ID, "k-fail"); !errors.Is(err, flashgate.ErrUnavailable) || errors.Is(err, flashgate.ErrNotCapturable) {
		t.Errorf("provider 500: got %v, want ErrUnavailable", err)
	}
	stand.FailNext(0)
	if in, err := p.Capture(ctx, h.ID, "k-fail"); err != nil || in.Status != flashgate.IntentSucceeded {
		t.Errorf("capture after the provider recovered: got %+v, %v; want succeeded", in, err)
	}
}
