package stripelocal_test

import (
	"encoding/json"
	"io"
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

// TestStandInBrowserConfirm: the stand-in serves its Stripe.js, and a
// confirmation as that script sends it (publishable key and client secret
// in the form, from another origin) is readable by the page; the declined
// test card answers 402 card_declined and leaves the intent payable, a
// wrong publishable key 401, and another card then pays.
func TestStandInBrowserConfirm(t *testing.T) {
	s := stripelocal.New("sk", "whsec")
	s.PublishableKey = "pk_test_local"
	ts := httptest.NewServer(s)
	defer ts.Close()
	res, err := http.Get(ts.URL + stripelocal.JSPath)
	if err != nil {
		t.Fatal(err)
	}
	js, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(res.Header.Get("Content-Type"), "javascript") || !strings.Contains(string(js), "confirmPayment") {
		t.Fatalf("GET %s: got %d %q (%d bytes), want the script", stripelocal.JSPath, res.StatusCode, res.Header.Get("Content-Type"), len(js))
	}
	req, _ := http.NewRequest("POST", ts.URL+"/v1/payment_intents", strings.NewReader(url.Values{"amount": {"100"}, "currency": {"usd"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer sk")
	if res, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	in := s.Intents()[0]
	confirm := func(key, card string) (int, map[string]any, http.Header) {
		req, _ := http.NewRequest("POST", ts.URL+"/v1/payment_intents/"+in.ID+"/confirm", strings.NewReader(url.Values{
			"key": {key}, "client_secret": {in.ClientSecret}, "payment_method_data[card][number]": {card}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", "http://127.0.0.1:1")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(res.Body).Decode(&out)
		return res.StatusCode, out, res.Header
	}
	for _, tc := range []struct {
		name, key, card string
		code            int
		status          string
	}{
		{"wrong publishable key", "pk_test_other", "4242424242424242", 401, "requires_payment_method"},
		{"declined card", "pk_test_local", stripelocal.DeclinedCard, 402, "requires_payment_method"},
		{"good card after the decline", "pk_test_local", "4242424242424242", 200, "succeeded"},
	} {
		code, body, h := confirm(tc.key, tc.card)
		if code != tc.code {
			t.Errorf("%s: got %d %v, want %d", tc.name, code, body, tc.code)
		}
		if got := h.Get("Access-Control-Allow-Origin"); got != "*" {
			t.Errorf("%s: Access-Control-Allow-Origin %q, want *", tc.name, got)
		}
		if got, _ := s.Intent(in.ID); got.Status != tc.status {
			t.Errorf("%s: intent %s, want %s", tc.name, got.Status, tc.status)
		}
		if tc.code == 402 {
			e, _ := body["error"].(map[string]any)
			if e["code"] != "card_declined" || e["message"] != "Your card was declined." {
				t.Errorf("%s: error %v, want card_declined with Stripe's message", tc.name, e)
			}
		}
	}
}
