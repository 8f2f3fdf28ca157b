package stripelocal_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/flashgate/flashgate/internal/stripelocal"
)

// TestStandInKeys: the stand-in answers a replayed idempotency key with
// the first answer, refuses a wrong key, and cancels only what has not
// succeeded.
func TestStandInKeys(t *testing.T) {
	s := stripelocal.New("sk", "whsec")
	ts := httptest.NewServer(s)
	defer ts.Close()
	post := func(path, key, auth string, form url.Values) int {
		req, _ := http.NewRequest("POST", ts.URL+path, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Authorization", "Bearer "+auth)
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	form := url.Values{"amount": {"100"}, "currency": {"usd"}, "metadata[order_id]": {"o1"}}
	for range 2 {
		if got := post("/v1/payment_intents", "k1", "sk", form); got != 200 {
			t.Fatalf("create: got %d, want 200", got)
		}
	}
	if n := len(s.Intents()); n != 1 {
		t.Errorf("intents after a replayed key: got %d, want 1", n)
	}
	if got := post("/v1/payment_intents", "k2", "wrong", form); got != 401 {
		t.Errorf("wrong key: got %d, want 401", got)
	}
	id := s.Intents()[0].ID
	s.SetStatus(id, "succeeded")
	if got := post("/v1/payment_intents/"+id+"/cancel", "", "sk", url.Values{}); got != 400 {
		t.Errorf("cancel of a succeeded intent: got %d, want 400", got)
	}
}
