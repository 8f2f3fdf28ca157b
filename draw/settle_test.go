package draw_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/draw"
	"github.com/flashgate/flashgate/internal/stripelocal"
	"github.com/flashgate/flashgate/payments"
)

// provider is a fake Capturer: holds by intent id, some declined at
// capture, and every call recorded.
type provider struct {
	mu       sync.Mutex
	status   map[string]string
	decline  map[string]bool
	captures map[string]int // intent → successful captures
	down     bool
}

func newProvider(es []draw.Entry) *provider {
	p := &provider{status: map[string]string{}, decline: map[string]bool{}, captures: map[string]int{}}
	for _, e := range es {
		p.status[e.IntentID] = flashgate.IntentRequiresCapture
	}
	return p
}

func (p *provider) Capture(_ context.Context, id, key string) (flashgate.Intent, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down {
		return flashgate.Intent{}, fmt.Errorf("provider down: %w", flashgate.ErrUnavailable)
	}
	switch {
	case p.status[id] == flashgate.IntentSucceeded:
	case p.status[id] != flashgate.IntentRequiresCapture:
		return flashgate.Intent{ID: id, Status: p.status[id]}, fmt.Errorf("capturing %s: %w", id, flashgate.ErrNotCapturable)
	case p.decline[id]:
		p.status[id] = flashgate.IntentCanceled
		return flashgate.Intent{ID: id, Status: p.status[id]}, fmt.Errorf("declined %s: %w", id, flashgate.ErrNotCapturable)
	default:
		p.status[id] = flashgate.IntentSucceeded
		p.captures[id]++
	}
	return flashgate.Intent{ID: id, Status: flashgate.IntentSucceeded}, nil
}

func (p *provider) Cancel(_ context.Context, id string) (flashgate.Intent, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down {
		return flashgate.Intent{}, fmt.Errorf("provider down: %w", flashgate.ErrUnavailable)
	}
	if p.status[id] != flashgate.IntentSucceeded {
		p.status[id] = flashgate.IntentCanceled
	}
	return flashgate.Intent{ID: id, Status: p.status[id]}, nil
}

func withIntents(es []draw.Entry) []draw.Entry {
	for i := range es {
		es[i].IntentID = "pi_" + es[i].ID
	}
	return es
}

// checkSettled checks the invariants of a settled draw: every variant's
// units are captured while an entrant who fits remains, each entry at
// most once, only by winners or entrants promoted in the seed's order
// past failed captures, and every other hold released.
func checkSettled(t *testing.T, name string, got *draw.Settlement, status func(string) string, es []draw.Entry, stock map[string]int, declined map[string]bool) {
	t.Helper()
	ordered, err := draw.Order("drop", seed, es)
	if err != nil {
		t.Fatal(err)
	}
	// The expected captures: the draw again, over the entries that do not
	// fail at capture.
	var ok []draw.Entry
	for _, e := range ordered {
		if !declined[e.IntentID] {
			ok = append(ok, e)
		}
	}
	want, err := draw.Winners("drop", seed, ok, stock)
	if err != nil {
		t.Fatal(err)
	}
	for v := range stock {
		if !slices.Equal(ids(got.Captured[v]), ids(want[v])) {
			t.Errorf("%s: variant %q: captured %v, want %v", name, v, ids(got.Captured[v]), ids(want[v]))
		}
	}
	capturedIDs := map[string]bool{}
	for _, w := range got.Captured {
		for _, e := range w {
			capturedIDs[e.ID] = true
		}
	}
	for _, e := range es {
		st := status(e.IntentID)
		switch {
		case capturedIDs[e.ID] && st != flashgate.IntentSucceeded:
			t.Errorf("%s: captured entry %s is %s", name, e.ID, st)
		case !capturedIDs[e.ID] && st != flashgate.IntentCanceled:
			t.Errorf("%s: entry %s not captured but %s, want its hold released", name, e.ID, st)
		}
	}
}

// TestSettle: winners captured, failed captures' units promoted to the
// next entrant who fits, every other hold released; a run again after the
// provider failed finishes without charging anyone twice.
func TestSettle(t *testing.T) {
	es := withIntents(entries(600, "S", "M", "L"))
	stock := map[string]int{"S": 20, "M": 5, "L": 0}
	won, err := draw.Winners("drop", seed, es, stock)
	if err != nil {
		t.Fatal(err)
	}
	declined := map[string]bool{}
	for _, e := range won["S"][:4] {
		declined[e.IntentID] = true
	}
	for _, e := range won["M"] {
		declined[e.IntentID] = true // every winner of M fails: five promotions
	}
	p := newProvider(es)
	p.decline = declined
	var prog draw.Progress
	var mu sync.Mutex
	calls := 0
	got, err := draw.Settle(context.Background(), p, "drop", seed, stock, es, draw.SettleConfig{Workers: 4, Progress: &prog,
		Captured: func(draw.Entry, flashgate.Intent) { mu.Lock(); calls++; mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	status := func(id string) string { p.mu.Lock(); defer p.mu.Unlock(); return p.status[id] }
	checkSettled(t, "settle", got, status, es, stock, declined)
	if got.Declined != 9 || got.Promoted != 9 || got.Released != 600-25-9 || calls != 25 || prog.Captured.Load() != 25 {
		t.Errorf("counts: declined %d promoted %d released %d callbacks %d captured %d; want 9, 9, %d, 25, 25",
			got.Declined, got.Promoted, got.Released, calls, prog.Captured.Load(), 600-25-9)
	}
	if got.Unsold["S"] != 0 || got.Unsold["M"] != 0 || got.Unsold["L"] != 0 {
		t.Errorf("unsold: %v, want none", got.Unsold)
	}
	for id, n := range p.captures {
		if n != 1 {
			t.Errorf("%s captured %d times", id, n)
		}
	}

	// The provider down mid-way: Settle fails; once it is back, a run
	// again settles the same way and charges nobody twice.
	es2 := withIntents(entries(200, "S"))
	p2 := newProvider(es2)
	slow := &flaky{provider: p2, after: 5}
	if _, err := draw.Settle(context.Background(), slow, "drop", seed, map[string]int{"S": 30}, es2, draw.SettleConfig{Workers: 3}); !errors.Is(err, flashgate.ErrUnavailable) {
		t.Fatalf("provider down: got %v, want ErrUnavailable", err)
	}
	p2.mu.Lock()
	p2.down = false
	p2.mu.Unlock()
	got2, err := draw.Settle(context.Background(), p2, "drop", seed, map[string]int{"S": 30}, es2, draw.SettleConfig{Workers: 3})
	if err != nil {
		t.Fatal(err)
	}
	checkSettled(t, "run again", got2, func(id string) string { p2.mu.Lock(); defer p2.mu.Unlock(); return p2.status[id] }, es2, map[string]int{"S": 30}, nil)
	for id, n := range p2.captures {
		if n != 1 {
			t.Errorf("run again: %s captured %d times", id, n)
		}
	}

	if _, err := draw.Settle(context.Background(), p, "drop", seed, stock, []draw.Entry{{ID: "x", Quantity: 1}}, draw.SettleConfig{}); !errors.Is(err, draw.ErrInvalid) {
		t.Errorf("an entry without an intent: got %v, want ErrInvalid", err)
	}
}

// flaky is a provider that goes down after some captures.
type flaky struct {
	*provider
	after int
	n     int
}

func (f *flaky) Capture(ctx context.Context, id, key string) (flashgate.Intent, error) {
	f.mu.Lock()
	f.n++
	if f.n > f.after {
		f.down = true
	}
	f.mu.Unlock()
	return f.provider.Capture(ctx, id, key)
}

// TestSettleAtStandIn: a draw settled through the paced client at the
// stand-in limited as Stripe is (scaled down: 20/s overall, 8/s per
// endpoint): the units captured, declined captures promoted, every other
// hold released, no 429 left unretried.
func TestSettleAtStandIn(t *testing.T) {
	stand := stripelocal.New("sk_test_draw", "whsec_draw")
	ts := httptest.NewServer(stand)
	defer ts.Close()
	hc := &http.Client{Timeout: 5 * time.Second}
	st, err := payments.NewStripe(payments.StripeConfig{Key: stand.Key, WebhookSecret: stand.WebhookSecret, APIBase: ts.URL, HTTPClient: hc})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	es := entries(40, "S", "M")
	stock := map[string]int{"S": 6, "M": 4}
	won, err := draw.Winners("drop", seed, es, stock)
	if err != nil {
		t.Fatal(err)
	}
	declined := map[string]bool{}
	for i := range es {
		card := "4242424242424242"
		if slices.ContainsFunc(won["S"][:2], func(w draw.Entry) bool { return w.ID == es[i].ID }) {
			card = stripelocal.CaptureDeclineCard
		}
		h, err := st.Hold(ctx, flashgate.Hold{EntryID: es[i].ID, SaleID: "drop", AmountCents: 1000, Currency: "usd"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stand.Confirm(h.ID, card); err != nil {
			t.Fatal(err)
		}
		es[i].IntentID = h.ID
		if card != "4242424242424242" {
			declined[h.ID] = true
		}
	}
	stand.Limits(20, 8)
	pc := payments.NewPacer(st, payments.PacerConfig{PerEndpoint: 8, Overall: 20})
	got, err := draw.Settle(ctx, pc, "drop", seed, stock, es, draw.SettleConfig{Workers: 4})
	if err != nil {
		t.Fatal(err)
	}
	checkSettled(t, "stand-in", got, func(id string) string { in, _ := stand.Intent(id); return in.Status }, es, stock, declined)
	if got.Promoted != 2 || got.Declined != 2 {
		t.Errorf("promoted %d, declined %d; want 2, 2", got.Promoted, got.Declined)
	}
	if s := pc.Stats(); s.Failed != 2 { // the two declines, given up at once
		t.Errorf("pacer: %+v, want only the 2 declines failed", s)
	}
	received := int64(0)
	for _, in := range stand.Intents() {
		received += in.AmountReceived
	}
	if received != 10*1000 {
		t.Errorf("charged %d cents in all, want %d: one charge per unit", received, 10*1000)
	}
}

// BenchmarkSettlePaced: a draw of 1,000 entries and 100 units settled at
// the stand-in limited as Stripe is in live mode (100/s overall, 25/s per
// endpoint), through the Pacer at its defaults: it reports when the last
// winner was captured and when the last hold was released, from the start
// (the floors are 100/25 = 4 s and 900/25 = 36 s).
func BenchmarkSettlePaced(b *testing.B) {
	for b.Loop() {
		stand := stripelocal.New("sk_test_draw", "whsec_draw")
		ts := httptest.NewServer(stand)
		st, err := payments.NewStripe(payments.StripeConfig{Key: stand.Key, WebhookSecret: stand.WebhookSecret, APIBase: ts.URL})
		if err != nil {
			b.Fatal(err)
		}
		es := entries(1000, "S", "M", "L")
		for i := range es {
			h, err := st.Hold(context.Background(), flashgate.Hold{EntryID: es[i].ID, SaleID: "drop", AmountCents: 1000, Currency: "usd"})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := stand.Confirm(h.ID, "4242424242424242"); err != nil {
				b.Fatal(err)
			}
			es[i].IntentID = h.ID
		}
		stand.Limits(100, 25)
		var (
			prog     draw.Progress
			mu       sync.Mutex
			captured time.Duration
		)
		start := time.Now()
		got, err := draw.Settle(context.Background(), payments.NewPacer(st, payments.PacerConfig{}), "drop", seed,
			map[string]int{"S": 34, "M": 33, "L": 33}, es, draw.SettleConfig{Progress: &prog, Captured: func(draw.Entry, flashgate.Intent) {
				mu.Lock()
				captured = time.Since(start)
				mu.Unlock()
			}})
		released := time.Since(start)
		ts.Close()
		if err != nil {
			b.Fatal(err)
		}
		if n := len(got.Captured["S"]) + len(got.Captured["M"]) + len(got.Captured["L"]); n != 100 || got.Released != 900 || stand.Limited() != 0 {
			b.Fatalf("captured %d, released %d, 429s %d; want 100, 900, 0", n, got.Released, stand.Limited())
		}
		b.ReportMetric(captured.Seconds(), "s-captured")
		b.ReportMetric(released.Seconds(), "s-released")
	}
}
