package stripelocal_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/flashgate/flashgate/internal/stripelocal"
)

// api calls the stand-in at base with the secret key.
func api(t *testing.T, base, method, path string, form url.Values) (int, map[string]any, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(method, base+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer sk")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(res.Body).Decode(&out)
	return res.StatusCode, out, res.Header
}

// TestStandInHolds: an intent with manual capture is a hold: confirmed it
// waits in requires_capture (payment_intent.amount_capturable_updated),
// captures once (payment_intent.succeeded) or is released
// (payment_intent.canceled); the capture-decline card authorises and fails
// at capture (payment_failed, then canceled); a hold past its life cannot
// be captured, and ExpireHolds cancels it (reason automatic). Every event
// is signed as Stripe signs them.
func TestStandInHolds(t *testing.T) {
	var (
		mu     sync.Mutex
		events = map[string][]string{} // intent → event types, as delivered
	)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		ev, err := webhook.ConstructEventWithOptions(b, r.Header.Get("Stripe-Signature"), "whsec",
			webhook.ConstructEventOptions{IgnoreAPIVersionMismatch: true})
		if err != nil {
			t.Errorf("webhook: %v", err)
			return
		}
		var obj struct{ ID, Status string }
		_ = json.Unmarshal(ev.Data.Raw, &obj)
		mu.Lock()
		events[obj.ID] = append(events[obj.ID], string(ev.Type)+":"+obj.Status)
		mu.Unlock()
	}))
	defer hook.Close()
	s := stripelocal.New("sk", "whsec")
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	var clk sync.Mutex
	s.SetClock(func() time.Time { clk.Lock(); defer clk.Unlock(); return now })
	s.SetHoldLife(4 * 24 * time.Hour)
	s.SetWebhookURL(hook.URL)
	ts := httptest.NewServer(s)
	defer ts.Close()

	hold := func(entry, card string) string {
		code, in, _ := api(t, ts.URL, "POST", "/v1/payment_intents", url.Values{"amount": {"500"}, "currency": {"usd"},
			"capture_method": {"manual"}, "metadata[entry_id]": {entry}})
		if code != 200 || in["capture_method"] != "manual" {
			t.Fatalf("create a hold: got %d %v", code, in)
		}
		id := in["id"].(string)
		if _, err := s.Confirm(id, card); err != nil {
			t.Fatalf("confirm %s: %v", entry, err)
		}
		if got, _ := s.Intent(id); got.Status != "requires_capture" || got.AmountCapturable != 500 {
			t.Fatalf("confirmed hold %s: got %+v, want requires_capture of 500", entry, got)
		}
		return id
	}
	const held = "payment_intent.amount_capturable_updated:requires_capture"
	captured, released, declined, expired := hold("e1", "4242424242424242"), hold("e2", "4242424242424242"),
		hold("e3", stripelocal.CaptureDeclineCard), hold("e4", "4242424242424242")
	cases := []struct {
		name, id, path string
		code           int
		status         string
	}{
		{"capture", captured, "/capture", 200, "succeeded"},
		{"capture again", captured, "/capture", 400, "succeeded"},
		{"release", released, "/cancel", 200, "canceled"},
		{"capture a released hold", released, "/capture", 400, "canceled"},
		{"declined at capture", declined, "/capture", 402, "canceled"},
	}
	for _, tc := range cases {
		code, body, _ := api(t, ts.URL, "POST", "/v1/payment_intents/"+tc.id+tc.path, url.Values{})
		if code != tc.code {
			t.Errorf("%s: got %d %v, want %d", tc.name, code, body, tc.code)
		}
		if got, _ := s.Intent(tc.id); got.Status != tc.status {
			t.Errorf("%s: intent %s, want %s", tc.name, got.Status, tc.status)
		}
	}
	if got, _ := s.Intent(captured); got.AmountReceived != 500 || got.AmountCapturable != 0 {
		t.Errorf("captured: received %d, capturable %d; want 500, 0", got.AmountReceived, got.AmountCapturable)
	}
	if n := s.ExpireHolds(); n != 0 {
		t.Errorf("expire within the hold life: %d canceled, want 0", n)
	}
	clk.Lock()
	now = now.Add(4 * 24 * time.Hour)
	clk.Unlock()
	if code, _, _ := api(t, ts.URL, "POST", "/v1/payment_intents/"+expired+"/capture", url.Values{}); code != 400 {
		t.Errorf("capture of an expired hold: got %d, want 400", code)
	}
	if got, _ := s.Intent(expired); got.Status != "canceled" || got.CancellationReason != "automatic" {
		t.Errorf("expired hold: got %s (%s), want canceled (automatic)", got.Status, got.CancellationReason)
	}
	late := hold("e5", "4242424242424242")
	clk.Lock()
	now = now.Add(5 * 24 * time.Hour)
	clk.Unlock()
	if n := s.ExpireHolds(); n != 1 {
		t.Errorf("ExpireHolds past the life: %d canceled, want 1", n)
	}
	s.Deliveries.Wait()
	want := map[string][]string{
		captured: {held, "payment_intent.succeeded:succeeded"},
		released: {held, "payment_intent.canceled:canceled"},
		declined: {held, "payment_intent.canceled:canceled", "payment_intent.payment_failed:requires_capture"},
		expired:  {held, "payment_intent.canceled:canceled"},
		late:     {held, "payment_intent.canceled:canceled"},
	}
	mu.Lock()
	defer mu.Unlock()
	for id, w := range want {
		got := slices.Clone(events[id])
		slices.Sort(got) // delivered in any order, as Stripe's are
		slices.Sort(w)
		if !slices.Equal(got, w) {
			t.Errorf("events of %s: got %v, want %v", id, got, w)
		}
	}
}

// TestStandInLimits: with Limits, requests over the overall or the
// per-endpoint rate are answered 429 with Retry-After: 1 and count
// against neither limit; other endpoints keep their own budget.
func TestStandInLimits(t *testing.T) {
	s := stripelocal.New("sk", "whsec")
	ts := httptest.NewServer(s)
	defer ts.Close()
	code, in, _ := api(t, ts.URL, "POST", "/v1/payment_intents", url.Values{"amount": {"500"}, "currency": {"usd"}})
	if code != 200 {
		t.Fatalf("create: %d", code)
	}
	id := in["id"].(string)
	// Per second: 5 per endpoint, 8 overall. The limits refill over
	// time, so count only what is certain: a burst of reads far over
	// them gets at least some 429s, each with Retry-After: 1, and at
	// most burst + refill answers.
	s.Limits(8, 5)
	start := time.Now()
	ok, limited := 0, 0
	for range 40 {
		code, _, h := api(t, ts.URL, "GET", "/v1/payment_intents/"+id, nil)
		switch code {
		case 200:
			ok++
		case 429:
			limited++
			if h.Get("Retry-After") != "1" {
				t.Errorf("429 without Retry-After: 1: %q", h.Get("Retry-After"))
			}
		default:
			t.Fatalf("read: %d", code)
		}
	}
	elapsed := time.Since(start)
	if most := 5 + int(5*elapsed.Seconds()) + 1; ok < 5 || ok > most || limited == 0 || s.Limited() != limited {
		t.Errorf("40 reads at 5/s per endpoint: %d answered, %d limited (stand-in counted %d); want 5..%d answered, the rest 429",
			ok, limited, s.Limited(), most)
	}
	// Another endpoint has its own budget, within the overall one: the
	// reads above took at most 5 + refill of the overall 8.
	s.Limits(8, 5)
	for i := range 5 {
		if code, _, _ := api(t, ts.URL, "POST", "/v1/payment_intents/"+id+"/cancel", nil); code != 200 {
			t.Errorf("cancel %d within the fresh limits: got %d, want 200", i, code)
		}
	}
	for i := range 3 {
		if code, _, _ := api(t, ts.URL, "GET", "/v1/payment_intents/"+id, nil); code != 200 {
			t.Errorf("read %d within the overall limit: got %d, want 200", i, code)
		}
	}
	s.Limits(0, 0)
	for range 20 {
		if code, _, _ := api(t, ts.URL, "GET", "/v1/payment_intents/"+id, nil); code != 200 {
			t.Fatalf("read without limits: got %d", code)
		}
	}
}

// TestPutHold: a hold put without a request is a confirmed hold as the
// API's create and confirm make it: it captures (the capture-decline card
// declines), cancels, and no request was recorded for it.
func TestPutHold(t *testing.T) {
	s := stripelocal.New("sk", "whsec")
	ts := httptest.NewServer(s)
	defer ts.Close()
	cases := []struct {
		name, card, path string
		wantCode         int
		wantStatus       string
	}{
		{"captured", "4242424242424242", "capture", 200, "succeeded"},
		{"declined at capture", stripelocal.CaptureDeclineCard, "capture", 402, "canceled"},
		{"released", "4242424242424242", "cancel", 200, "canceled"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id := s.PutHold(1800, "usd", c.card)
			if in, ok := s.Intent(id); !ok || in.Status != "requires_capture" || in.AmountCapturable != 1800 || in.CaptureMethod != "manual" {
				t.Fatalf("got %+v (found %v), want a hold of 1800 in requires_capture", in, ok)
			}
			code, _, _ := api(t, ts.URL, "POST", "/v1/payment_intents/"+id+"/"+c.path, url.Values{})
			in, _ := s.Intent(id)
			if code != c.wantCode || in.Status != c.wantStatus {
				t.Errorf("%s: got %d and %s, want %d and %s", c.path, code, in.Status, c.wantCode, c.wantStatus)
			}
		})
	}
	if got := len(s.Requests()); got != len(cases) {
		t.Errorf("got %d requests recorded, want %d (the captures and cancels only)", got, len(cases))
	}
}
