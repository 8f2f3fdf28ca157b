// Package stripelocal is a local stand-in of the few endpoints of Stripe's
// API flashgate calls (PaymentIntents: create, retrieve, cancel, confirm,
// capture; refunds: create), for tests and the demo. It keeps idempotency
// keys as Stripe does (the same key answers the first result), records
// every request, can be told to fail or stall, limits the request rate
// as Stripe does (Limits), and builds webhook events signed with
// stripe-go's own test signer. Intents created with manual capture are
// card holds: confirmed, they wait in requires_capture for a capture or a
// cancel, and expire after their hold life (SetHoldLife, ExpireHolds). It
// also serves a stand-in of Stripe.js (JSPath) that confirms payments here
// from a browser, declines Stripe's declined test card (DeclinedCard), and
// declines at capture a hold made with CaptureDeclineCard.
package stripelocal

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/webhook"
	"golang.org/x/time/rate"
)

// Request is one API request as the stand-in received it.
type Request struct {
	Method, Path   string
	IdempotencyKey string
	Form           map[string]string
}

// Intent is a PaymentIntent the stand-in holds.
type Intent struct {
	ID           string            `json:"id"`
	Object       string            `json:"object"`
	Amount       int64             `json:"amount"`
	Currency     string            `json:"currency"`
	Status       string            `json:"status"`
	ClientSecret string            `json:"client_secret"`
	Metadata     map[string]string `json:"metadata"`
	Created      int64             `json:"created"`
	// LastPaymentError is the last declined confirmation's error, as
	// Stripe's last_payment_error; nil after a success.
	LastPaymentError *CardError `json:"last_payment_error"`
	// CaptureMethod is "automatic" or "manual" (a hold).
	CaptureMethod string `json:"capture_method"`
	// AmountCapturable is what a confirmed hold may capture;
	// AmountReceived what was charged.
	AmountCapturable int64 `json:"amount_capturable"`
	AmountReceived   int64 `json:"amount_received"`
	// CancellationReason says why a canceled intent was: "automatic" for
	// an expired hold, else what the cancel asked (or "").
	CancellationReason string `json:"cancellation_reason,omitempty"`

	// heldAt is when a hold was confirmed; card the number it was
	// confirmed with.
	heldAt time.Time
	card   string
}

// CardError is a declined payment's error, as Stripe's API answers it.
type CardError struct {
	Type        string `json:"type"`
	Code        string `json:"code"`
	DeclineCode string `json:"decline_code"`
	Message     string `json:"message"`
}

// Refund is a refund the stand-in made.
type Refund struct {
	ID            string `json:"id"`
	Object        string `json:"object"`
	PaymentIntent string `json:"payment_intent"`
	Amount        int64  `json:"amount"`
	Status        string `json:"status"`
}

// Server is the stand-in: an http.Handler.
type Server struct {
	// Key is the secret key requests must carry; WebhookSecret signs
	// events.
	Key, WebhookSecret string
	// PublishableKey, when set, is the key a confirmation made with a
	// client secret (a browser's, through the stand-in's Stripe.js) must
	// carry in its form's "key"; empty: any.
	PublishableKey string
	// webhookURL, when set (SetWebhookURL), receives a signed
	// payment_intent.succeeded event after each confirm, as Stripe's
	// webhook would (Deliveries waits for those in flight).
	webhookURL string
	// Deliveries tracks the webhook deliveries in flight.
	Deliveries sync.WaitGroup

	mu       sync.Mutex
	n        int
	intents  map[string]*Intent
	refunds  []Refund
	keys     map[string][]byte // idempotency key → first answer
	requests []Request
	fail     int                      // answer this many next requests 500
	stall    time.Duration            // hold each request this long first
	unstall  chan struct{}            // closed when the stall ends
	limit    *rate.Limiter            // nil: no overall rate limit (Limits)
	perEP    int                      // each endpoint's limit a second; 0: none
	eps      map[string]*rate.Limiter // endpoint → its limiter
	limited  int                      // requests answered 429
	now      func() time.Time         // the clock of holds (SetClock)
	holdLife time.Duration            // how long a hold lasts (SetHoldLife)
}

// DefaultHoldLife is how long a confirmed hold lasts before it expires:
// the 7 days a customer-initiated card hold lasts at Stripe.
const DefaultHoldLife = 7 * 24 * time.Hour

// CaptureDeclineCard is the card number a hold authorises with and whose
// capture the stand-in declines (402 card_declined), as Stripe's test card
// of a charge that fails after the card was accepted.
const CaptureDeclineCard = "4000000000000341"

// RateLimit makes the stand-in take at most perSecond requests a second
// overall: Limits(perSecond, 0).
func (s *Server) RateLimit(perSecond int) { s.Limits(perSecond, 0) }

// Limits makes the stand-in take at most overall requests a second, and
// at most perEndpoint a second on each endpoint (a method and a path with
// its ids left out: capture is one endpoint, cancel another), each with
// bursts of the same size, answering the others 429 with Retry-After: 1,
// as Stripe's rate limiter does (live mode: 100 and 25). A request over
// either limit counts against neither. 0 removes that limit.
func (s *Server) Limits(overall, perEndpoint int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limit = nil
	if overall > 0 {
		s.limit = rate.NewLimiter(rate.Limit(overall), overall)
	}
	s.perEP, s.eps = perEndpoint, map[string]*rate.Limiter{}
}

// Limited returns how many requests were answered 429.
func (s *Server) Limited() int { s.mu.Lock(); defer s.mu.Unlock(); return s.limited }

// SetClock sets the clock holds are confirmed and expire by (time.Now
// when unset or nil).
func (s *Server) SetClock(now func() time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if now == nil {
		now = time.Now
	}
	s.now = now
}

// SetHoldLife sets how long a confirmed hold lasts (DefaultHoldLife when
// d ≤ 0). A hold past it cannot be captured, and ExpireHolds cancels it.
func (s *Server) SetHoldLife(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d <= 0 {
		d = DefaultHoldLife
	}
	s.holdLife = d
}

// ExpireHolds cancels every confirmed hold past its life, as the card
// networks release them (status canceled, cancellation_reason automatic,
// a payment_intent.canceled event), and returns how many it canceled.
func (s *Server) ExpireHolds() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, in := range s.intents {
		if s.expiredLocked(in) {
			s.expireLocked(in)
			n++
		}
	}
	return n
}

// expiredLocked reports whether in is a confirmed hold past its life.
func (s *Server) expiredLocked(in *Intent) bool {
	return in.Status == "requires_capture" && !s.now().Before(in.heldAt.Add(s.holdLife))
}

// expireLocked cancels the expired hold in.
func (s *Server) expireLocked(in *Intent) {
	in.Status, in.CancellationReason, in.AmountCapturable = "canceled", "automatic", 0
	s.emitLocked("payment_intent.canceled", in)
}

// New returns a stand-in with key and webhook secret.
func New(key, webhookSecret string) *Server {
	return &Server{Key: key, WebhookSecret: webhookSecret, intents: map[string]*Intent{}, keys: map[string][]byte{},
		now: time.Now, holdLife: DefaultHoldLife}
}

// PutHold makes a confirmed card hold of amount in currency, as a create
// with manual capture and a confirm with card would, without a request:
// no request is recorded, no event sent, no rate limit taken. A benchmark
// puts a million entries' holds here this way. It returns the intent's id.
func (s *Server) PutHold(amount int64, currency, card string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	id := fmt.Sprintf("pi_local%06d", s.n)
	now := s.now()
	s.intents[id] = &Intent{ID: id, Object: "payment_intent", Amount: amount, Currency: currency, Status: "requires_capture",
		ClientSecret: id + "_secret_local", Created: now.Unix(), CaptureMethod: "manual", AmountCapturable: amount, heldAt: now, card: card}
	return id
}

// FailNext makes the next n requests answer 500.
func (s *Server) FailNext(n int) { s.mu.Lock(); s.fail = n; s.mu.Unlock() }

// Stall makes every request wait d before it is served; Stall(0) ends
// the stall and lets the waiting requests go on.
func (s *Server) Stall(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unstall != nil {
		close(s.unstall)
		s.unstall = nil
	}
	s.stall = d
	if d > 0 {
		s.unstall = make(chan struct{})
	}
}

// Requests returns the requests received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Intents returns a copy of every intent.
func (s *Server) Intents() []Intent {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Intent, 0, len(s.intents))
	for _, in := range s.intents {
		out = append(out, *in)
	}
	return out
}

// Intent returns intent id.
func (s *Server) Intent(id string) (Intent, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.intents[id]
	if !ok {
		return Intent{}, false
	}
	return *in, true
}

// Refunds returns the refunds made.
func (s *Server) Refunds() []Refund {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Refund(nil), s.refunds...)
}

// SetStatus moves intent id to status (succeeded, requires_payment_method,
// processing, canceled), as a buyer's payment at Stripe would, and
// reports whether the intent exists. A canceled or succeeded intent does
// not move.
func (s *Server) SetStatus(id, status string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.intents[id]
	if !ok {
		return false
	}
	if in.Status != "succeeded" && in.Status != "canceled" {
		in.Status = status
	}
	return true
}

// ServeHTTP serves the API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.serveBrowser(w, r) {
		return
	}
	s.mu.Lock()
	stall, unstall := s.stall, s.unstall
	s.mu.Unlock()
	if stall > 0 {
		t := time.NewTimer(stall)
		defer t.Stop()
		select {
		case <-t.C:
		case <-unstall:
		case <-r.Context().Done():
			return
		}
	}
	if err := r.ParseForm(); err != nil {
		apiError(w, http.StatusBadRequest, "invalid_request_error", "bad form")
		return
	}
	req := Request{Method: r.Method, Path: r.URL.Path, IdempotencyKey: r.Header.Get("Idempotency-Key"), Form: map[string]string{}}
	for k, v := range r.PostForm {
		req.Form[k] = v[0]
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.allowLocked(r) {
		s.limited++
		w.Header().Set("Retry-After", "1")
		apiError(w, http.StatusTooManyRequests, "invalid_request_error", "rate_limit: too many requests")
		return
	}
	s.requests = append(s.requests, req)
	if s.fail > 0 {
		s.fail--
		apiError(w, http.StatusInternalServerError, "api_error", "stand-in told to fail")
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+s.Key {
		if cs := r.PostForm.Get("client_secret"); cs == "" || !strings.HasSuffix(r.URL.Path, "/confirm") ||
			(s.PublishableKey != "" && r.PostForm.Get("key") != s.PublishableKey) {
			apiError(w, http.StatusUnauthorized, "invalid_request_error", "bad key")
			return
		}
	}
	if r.Method == http.MethodPost && req.IdempotencyKey != "" {
		if b, ok := s.keys[req.IdempotencyKey]; ok {
			w.Header().Set("Idempotent-Replayed", "true")
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(b)
			return
		}
	}
	var (
		out  any
		code = http.StatusOK
	)
	path := strings.TrimPrefix(r.URL.Path, "/v1/")
	parts := strings.Split(path, "/")
	switch {
	case r.Method == http.MethodPost && path == "payment_intents":
		amount, err := strconv.ParseInt(req.Form["amount"], 10, 64)
		if err != nil || amount < 1 || req.Form["currency"] == "" {
			apiError(w, http.StatusBadRequest, "invalid_request_error", "amount and currency are required")
			return
		}
		s.n++
		id := fmt.Sprintf("pi_local%06d", s.n)
		in := &Intent{ID: id, Object: "payment_intent", Amount: amount, Currency: req.Form["currency"],
			Status: "requires_payment_method", ClientSecret: id + "_secret_local", Metadata: map[string]string{}, Created: s.now().Unix(),
			CaptureMethod: "automatic"}
		if req.Form["capture_method"] == "manual" {
			in.CaptureMethod = "manual"
		}
		for k, v := range req.Form {
			if strings.HasPrefix(k, "metadata[") {
				in.Metadata[strings.TrimSuffix(strings.TrimPrefix(k, "metadata["), "]")] = v
			}
		}
		s.intents[id] = in
		out = in
	case len(parts) >= 2 && parts[0] == "payment_intents":
		in, ok := s.intents[parts[1]]
		if !ok {
			apiError(w, http.StatusNotFound, "invalid_request_error", "no such payment_intent")
			return
		}
		switch {
		case r.Method == http.MethodGet && len(parts) == 2:
		case r.Method == http.MethodPost && len(parts) == 3 && parts[2] == "cancel":
			if s.expiredLocked(in) {
				s.expireLocked(in)
			}
			if in.Status == "succeeded" || in.Status == "processing" {
				apiError(w, http.StatusBadRequest, "invalid_request_error", "payment_intent_unexpected_state")
				return
			}
			if in.Status != "canceled" { // canceled again: answered as it stands, no second event
				in.Status, in.CancellationReason, in.AmountCapturable = "canceled", req.Form["cancellation_reason"], 0
				s.emitLocked("payment_intent.canceled", in)
			}
		case r.Method == http.MethodPost && len(parts) == 3 && parts[2] == "confirm":
			if r.PostForm.Get("client_secret") != "" && r.PostForm.Get("client_secret") != in.ClientSecret {
				apiError(w, http.StatusUnauthorized, "invalid_request_error", "bad client secret")
				return
			}
			if code := s.confirmLocked(in, req.Form); code != http.StatusOK {
				s.cardErrorLocked(w, code, in)
				return
			}
		case r.Method == http.MethodPost && len(parts) == 3 && parts[2] == "capture":
			if code := s.captureLocked(in); code != http.StatusOK {
				s.cardErrorLocked(w, code, in)
				return
			}
		default:
			apiError(w, http.StatusNotFound, "invalid_request_error", "unknown route")
			return
		}
		out = in
	case r.Method == http.MethodPost && path == "refunds":
		in, ok := s.intents[req.Form["payment_intent"]]
		if !ok {
			apiError(w, http.StatusNotFound, "invalid_request_error", "no such payment_intent")
			return
		}
		if in.Status != "succeeded" {
			apiError(w, http.StatusBadRequest, "invalid_request_error", "payment_intent not succeeded")
			return
		}
		rf := Refund{ID: fmt.Sprintf("re_local%06d", len(s.refunds)+1), Object: "refund", PaymentIntent: in.ID, Amount: in.Amount, Status: "succeeded"}
		s.refunds = append(s.refunds, rf)
		out = rf
	default:
		apiError(w, http.StatusNotFound, "invalid_request_error", "unknown route")
		return
	}
	b, _ := json.Marshal(out)
	if r.Method == http.MethodPost && req.IdempotencyKey != "" {
		s.keys[req.IdempotencyKey] = b
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

// confirmLocked confirms in with form's card, as the buyer's page does:
// a payment succeeds, a hold (manual capture) waits in requires_capture;
// the declined card fails (402, the intent back to
// requires_payment_method: the buyer may try another card); an intent
// canceled or done is 400. It answers the status and sends the event.
func (s *Server) confirmLocked(in *Intent, form map[string]string) int {
	if s.expiredLocked(in) {
		s.expireLocked(in)
	}
	if in.Status == "canceled" || in.Status == "succeeded" || in.Status == "requires_capture" {
		return http.StatusBadRequest
	}
	if declined(form) {
		in.Status = "requires_payment_method"
		in.LastPaymentError = &CardError{Type: "card_error", Code: "card_declined", DeclineCode: "generic_decline", Message: declinedMessage}
		s.emitLocked("payment_intent.payment_failed", in)
		return http.StatusPaymentRequired
	}
	in.LastPaymentError, in.card = nil, form["payment_method_data[card][number]"]
	if in.CaptureMethod == "manual" {
		in.Status, in.AmountCapturable, in.heldAt = "requires_capture", in.Amount, s.now()
		s.emitLocked("payment_intent.amount_capturable_updated", in)
		return http.StatusOK
	}
	in.Status, in.AmountReceived = "succeeded", in.Amount
	s.emitLocked("payment_intent.succeeded", in)
	return http.StatusOK
}

// captureLocked captures the hold in: 400 unless it is a confirmed hold
// within its life (an expired one is canceled first, as the networks
// release it); a hold of CaptureDeclineCard is declined (402, the intent
// canceled: it holds nothing more, and a payment_intent.payment_failed
// event); else it succeeds. It answers the status.
func (s *Server) captureLocked(in *Intent) int {
	if s.expiredLocked(in) {
		s.expireLocked(in)
	}
	if in.Status != "requires_capture" {
		return http.StatusBadRequest
	}
	if in.card == CaptureDeclineCard {
		in.LastPaymentError = &CardError{Type: "card_error", Code: "card_declined", DeclineCode: "generic_decline", Message: declinedMessage}
		s.emitLocked("payment_intent.payment_failed", in)
		in.Status, in.AmountCapturable, in.CancellationReason = "canceled", 0, "automatic"
		s.emitLocked("payment_intent.canceled", in)
		return http.StatusPaymentRequired
	}
	in.Status, in.AmountReceived, in.AmountCapturable = "succeeded", in.AmountCapturable, 0
	s.emitLocked("payment_intent.succeeded", in)
	return http.StatusOK
}

// cardErrorLocked answers a refused confirm or capture: 402 with the card
// error (and the intent) as Stripe answers a decline, else 400.
func (s *Server) cardErrorLocked(w http.ResponseWriter, code int, in *Intent) {
	if code != http.StatusPaymentRequired {
		apiError(w, code, "invalid_request_error", "payment_intent_unexpected_state")
		return
	}
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"type": "card_error", "code": "card_declined",
		"decline_code": "generic_decline", "message": declinedMessage, "payment_intent": in}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusPaymentRequired)
	_, _ = w.Write(b)
}

// Confirm confirms intent id with card as a buyer's page would (through
// the same code as the API's confirm) and returns the intent; a decline
// or an intent that cannot be confirmed is an error.
func (s *Server) Confirm(id, card string) (Intent, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.intents[id]
	if !ok {
		return Intent{}, fmt.Errorf("stripelocal: no intent %s", id)
	}
	if code := s.confirmLocked(in, map[string]string{"payment_method_data[card][number]": card}); code != http.StatusOK {
		return *in, fmt.Errorf("stripelocal: confirming %s: %d", id, code)
	}
	return *in, nil
}

// allowLocked takes one request of r's endpoint from the limits; a
// request over either takes from neither.
func (s *Server) allowLocked(r *http.Request) bool {
	now := time.Now()
	var all *rate.Reservation
	if s.limit != nil {
		if all = s.limit.ReserveN(now, 1); !all.OK() || all.DelayFrom(now) > 0 {
			all.CancelAt(now)
			return false
		}
	}
	if s.perEP <= 0 {
		return true
	}
	ep := endpoint(r)
	l, ok := s.eps[ep]
	if !ok {
		l = rate.NewLimiter(rate.Limit(s.perEP), s.perEP)
		s.eps[ep] = l
	}
	if one := l.ReserveN(now, 1); !one.OK() || one.DelayFrom(now) > 0 {
		one.CancelAt(now)
		if all != nil {
			all.CancelAt(now)
		}
		return false
	}
	return true
}

// endpoint names r's endpoint for the per-endpoint limit: its method and
// path with the object id left out ("POST /v1/payment_intents/*/capture").
func endpoint(r *http.Request) string {
	parts := strings.Split(r.URL.Path, "/")
	if len(parts) > 3 {
		parts[3] = "*"
	}
	return r.Method + " " + strings.Join(parts, "/")
}

// emitLocked sends the event typ about in to the webhook URL, when one is
// set, as Stripe's webhook would.
func (s *Server) emitLocked(typ string, in *Intent) {
	if s.webhookURL == "" {
		return
	}
	s.n++
	ev := s.eventLocked(fmt.Sprintf("evt_local%06d", s.n), typ, *in)
	s.Deliveries.Add(1)
	go s.deliver(s.webhookURL, ev)
}

func apiError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	b, _ := json.Marshal(map[string]any{"error": map[string]string{"type": typ, "message": msg}})
	_, _ = w.Write(b)
}

// SetWebhookURL sets where confirmed payments' events are sent.
func (s *Server) SetWebhookURL(u string) { s.mu.Lock(); s.webhookURL = u; s.mu.Unlock() }

// deliver posts a signed event to url once (bounded by a timeout).
func (s *Server) deliver(url string, payload []byte) {
	defer s.Deliveries.Done()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(payload))
	if err != nil {
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Stripe-Signature", s.Sign(payload, time.Now()))
	cl := &http.Client{Timeout: 5 * time.Second}
	if res, err := cl.Do(req); err == nil {
		_ = res.Body.Close()
	}
}

// eventLocked is the payload of an event of typ carrying intent in.
func (s *Server) eventLocked(evID, typ string, in Intent) []byte {
	raw, _ := json.Marshal(in)
	b, _ := json.Marshal(map[string]any{
		"id": evID, "object": "event", "type": typ, "api_version": stripe.APIVersion,
		"created": time.Now().Unix(), "data": map[string]any{"object": json.RawMessage(raw)},
	})
	return b
}

// Event builds the payload of an event of type typ about intent id with
// event id evID: a payment_intent event carries the intent (in status, or
// its current status when status is ""), a charge or dispute event an
// object naming the intent.
func (s *Server) Event(evID, typ, intentID, status string) []byte {
	s.mu.Lock()
	in := Intent{ID: intentID, Object: "payment_intent", Metadata: map[string]string{}}
	if p, ok := s.intents[intentID]; ok {
		in = *p
		in.Metadata = map[string]string{}
		for k, v := range p.Metadata {
			in.Metadata[k] = v
		}
	}
	s.mu.Unlock()
	if status != "" {
		in.Status = status
	}
	var obj any = in
	switch {
	case strings.HasPrefix(typ, "charge.dispute"):
		obj = map[string]any{"id": "dp_" + evID, "object": "dispute", "payment_intent": intentID}
	case strings.HasPrefix(typ, "charge."):
		obj = map[string]any{"id": "ch_" + evID, "object": "charge", "payment_intent": intentID, "refunded": true}
	}
	raw, _ := json.Marshal(obj)
	b, _ := json.Marshal(map[string]any{
		"id": evID, "object": "event", "type": typ, "api_version": stripe.APIVersion,
		"created": time.Now().Unix(), "data": map[string]any{"object": json.RawMessage(raw)},
	})
	return b
}

// Sign returns the Stripe-Signature header of payload at time t, made by
// stripe-go's test signer with the stand-in's webhook secret.
func (s *Server) Sign(payload []byte, t time.Time) string {
	return webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: s.WebhookSecret, Timestamp: t}).Header
}
