package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/fairqueue"
	"github.com/flashgate/flashgate/lua"
)

// The draw's buyer routes, /api/sales/{id}/entry: enter (POST), withdraw
// (DELETE) and read (GET) one's entry in a draw sale. Each is one script
// call on the primary (lua.DrawEnter, DrawWithdraw, DrawState), whose
// codes lua.DrawError turns into the error table's answers. The card hold
// of an entry is Config.Draws': entering asks for it (POST
// /api/sales/{id}/entry/pay asks again, as an order's pay does), and a
// withdrawal releases it.

var (
	sEntry         = []byte("/entry")
	sEntryPay      = []byte("/entry/pay")
	vGetPostDelete = []byte("GET, HEAD, POST, DELETE")
	errEntryBody   = &flashgate.FieldError{Field: "body", Reason: `{"variant"?, "quantity"?, "payload"?}`}
)

// routeDraw serves /api/sales/{id}/entry and /entry/pay; ok is false for
// another path.
func (s *Server) routeDraw(ctx *fasthttp.RequestCtx, rest []byte, get, post bool) (route int, ok bool) {
	if bytes.HasSuffix(rest, sEntryPay) {
		id := rest[:len(rest)-len(sEntryPay)]
		switch {
		case !flashgate.ValidID(id):
			writeAnswer(ctx, ansNotFound)
			return routeOther, true
		case !post:
			methodNotAllowed(ctx, vPost)
		default:
			s.drawPay(ctx, id)
		}
		return routeEntry, true
	}
	if !bytes.HasSuffix(rest, sEntry) {
		return 0, false
	}
	id := rest[:len(rest)-len(sEntry)]
	if !flashgate.ValidID(id) {
		writeAnswer(ctx, ansNotFound)
		return routeOther, true
	}
	switch {
	case get:
		s.drawState(ctx, id)
	case post:
		s.drawEnter(ctx, id)
	case ctx.IsDelete():
		s.drawWithdraw(ctx, id)
	default:
		methodNotAllowed(ctx, vGetPostDelete)
	}
	return routeEntry, true
}

// drawSale looks a draw sale up for an entry route; it answers the request
// itself (and returns false) when there is none to use.
func (s *Server) drawSale(ctx *fasthttp.RequestCtx, id []byte) (*sale, flashgate.Sale, bool) {
	e := s.lookup(id)
	st := e.state.Load()
	if v := judge(st, 0); v == verdictUnavailable || v == verdictNotFound {
		s.rejectLocal(ctx, e, v)
		return nil, flashgate.Sale{}, false
	}
	m := e.meta.Load()
	if m == nil || !m.found || !m.sale.Draw() {
		writeAnswer(ctx, ansNotFound)
		return nil, flashgate.Sale{}, false
	}
	return e, m.sale, true
}

// windowError is the answer of a draw sale whose window is not open at
// now, from the cache (the scripts check it again): nil while it is.
func windowError(sl flashgate.Sale, now time.Time) error {
	switch {
	case sl.EntriesOpen(now):
		return nil
	case sl.EntriesOpenAt == nil || now.Before(*sl.EntriesOpenAt):
		return flashgate.ErrNotStarted
	}
	return flashgate.ErrClosed
}

// entryRequest is the body of POST /api/sales/{id}/entry.
type entryRequest struct {
	Variant  string `json:"variant"`
	Quantity *int64 `json:"quantity"`
	Payload  string `json:"payload"`
}

// entryFields are the members an entry's body may have, each once.
var entryFields = [...]string{"variant", "quantity", "payload"}

// entryBodyExact reports whether b is one JSON object whose members are
// entryFields, each at most once and named exactly, with nothing after
// it: encoding/json alone would take a member given twice (the last
// wins), one named in another case, and anything after the object, where
// a purchase's body is refused (parsePurchase). The values are
// encoding/json's to judge.
func entryBodyExact(b []byte) bool {
	d := json.NewDecoder(bytes.NewReader(b))
	if t, err := d.Token(); err != nil || t != json.Delim('{') {
		return false
	}
	var seen [len(entryFields)]bool
	for d.More() {
		t, err := d.Token()
		if err != nil {
			return false
		}
		k, _ := t.(string)
		i := 0
		for i < len(entryFields) && entryFields[i] != k {
			i++
		}
		if i == len(entryFields) || seen[i] {
			return false
		}
		seen[i] = true
		var v json.RawMessage
		if d.Decode(&v) != nil {
			return false
		}
	}
	if t, err := d.Token(); err != nil || t != json.Delim('}') {
		return false
	}
	_, err := d.Token()
	return errors.Is(err, io.EOF)
}

// entryAnswer is the body of the entry routes' 200 and 201 answers.
type entryAnswer struct {
	EntryID  string `json:"entry_id"`
	State    string `json:"state"`
	Result   string `json:"result"`
	Variant  string `json:"variant,omitempty"`
	Quantity int64  `json:"quantity"`
	// OrderID is a won entry's order (flashgate.DrawOrderID).
	OrderID string `json:"order_id,omitempty"`
	// The draw's entry window.
	EntriesOpenAt  *time.Time `json:"entries_open_at"`
	EntriesCloseAt *time.Time `json:"entries_close_at"`
	// The entry's card hold, in the answers that ask for it (enter, pay):
	// what the page confirms it with.
	PaymentIntent string `json:"payment_intent,omitempty"`
	ClientSecret  string `json:"client_secret,omitempty"`
}

// drawResult sums an entry's state up for its buyer, final results only:
// "won" once captured (charged, its order made), "lost" once released (it
// lost, or its capture failed), "withdrawn", and "pending" until then:
// before the draw (pending, entered) and while the close settles it (won:
// its capture may still fail; lost: it may still be promoted in place of a
// winner whose capture failed).
func drawResult(st flashgate.DrawEntryState) string {
	switch st {
	case flashgate.DrawCaptured:
		return "won"
	case flashgate.DrawReleased:
		return "lost"
	case flashgate.DrawWithdrawn:
		return "withdrawn"
	}
	return "pending"
}

// writeEntry answers status with the entry v as lua.DrawKey holds it.
func (s *Server) writeEntry(ctx *fasthttp.RequestCtx, status int, sl flashgate.Sale, v string) {
	st, id, qty, variant, ok := lua.ParseDrawEntry(v)
	if !ok {
		s.writeError(ctx, errors.New("draw: an entry of another shape: "+v))
		return
	}
	s.writeDrawEntry(ctx, status, sl, flashgate.DrawEntry{ID: id, State: st, Variant: variant, Quantity: qty})
}

// writeDrawEntry answers status with the entry e and its hold; a captured
// entry names its order (flashgate.DrawOrderID).
func (s *Server) writeDrawEntry(ctx *fasthttp.RequestCtx, status int, sl flashgate.Sale, e flashgate.DrawEntry) {
	s.writeDrawEntryResult(ctx, status, sl, e, drawResult(e.State))
}

// writeDrawEntryResult is writeDrawEntry answering result as the entry's
// result.
func (s *Server) writeDrawEntryResult(ctx *fasthttp.RequestCtx, status int, sl flashgate.Sale, e flashgate.DrawEntry, result string) {
	a := entryAnswer{EntryID: e.ID, State: string(e.State), Result: result, Variant: e.Variant,
		Quantity: e.Quantity, EntriesOpenAt: sl.EntriesOpenAt, EntriesCloseAt: sl.EntriesCloseAt,
		PaymentIntent: e.PaymentIntent, ClientSecret: e.ClientSecret}
	if e.State == flashgate.DrawCaptured {
		a.OrderID = flashgate.DrawOrderID(e.ID)
	}
	b, err := json.Marshal(a)
	if err != nil {
		s.writeError(ctx, err)
		return
	}
	writeJSONHead(ctx, status)
	ctx.Response.SetBodyRaw(b)
}

// drawCall runs a draw script on the primary and reads its code and entry.
func (s *Server) drawCall(ctx *fasthttp.RequestCtx, run func(context.Context) ([]any, error)) (code int64, entry string, fresh, ok bool) {
	rctx, cancel := context.WithTimeout(s.base, s.cfg.RedisTimeout)
	defer cancel()
	v, err := run(rctx)
	if err != nil || len(v) < 2 {
		s.logUnavailable(err)
		writeAnswer(ctx, ansUnavail)
		return 0, "", false, false
	}
	code, _ = v[0].(int64)
	entry, _ = v[1].(string)
	if len(v) > 2 {
		n, _ := v[2].(int64)
		fresh = n == 1
	}
	if err := lua.DrawError(code); err != nil && code != lua.DrawClosed {
		s.writeError(ctx, err)
		return 0, "", false, false
	}
	return code, entry, fresh, true
}

// newEntryID mints an entry id: "d" and 32 hex digits from crypto/rand.
func newEntryID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "d" + hex.EncodeToString(b[:])
}

// drawEnter serves POST /api/sales/{id}/entry: 201 a new entry (pending
// until its hold is authorised), 200 the buyer's live entry.
func (s *Server) drawEnter(ctx *fasthttp.RequestCtx, id []byte) {
	user, ok := s.authenticate(ctx)
	if !ok {
		writeAnswer(ctx, ansUnauth)
		return
	}
	// A malformed body is 400 whatever the sale.
	var body entryRequest
	if b := bytes.TrimSpace(ctx.PostBody()); len(b) > 0 {
		if !entryBodyExact(b) || json.Unmarshal(b, &body) != nil {
			s.writeError(ctx, errEntryBody)
			return
		}
	}
	e, sl, ok := s.drawSale(ctx, id)
	if !ok {
		return
	}
	now := s.clock.Now()
	if err := windowError(sl, now); err != nil {
		s.writeError(ctx, err)
		return
	}
	if !s.allowUser(user, now) {
		writeAnswer(ctx, ansRateLimit)
		ctx.Response.Header.SetCanonical(hRetryAfter, s.userRetryAfter)
		return
	}
	qty := int64(1)
	if body.Quantity != nil {
		qty = *body.Quantity
	}
	if err := sl.ValidateEntry(body.Variant, qty); err != nil {
		s.writeError(ctx, err)
		return
	}
	challenge, ttl := "none", time.Duration(0)
	if sl.ChallengeMaxNumber > 0 {
		var err error
		if challenge, ttl, err = s.qkeys.VerifyPoW(body.Payload, e.id, sl.ChallengeMaxNumber, now); err != nil {
			s.writeError(ctx, err)
			return
		}
	}
	code, entry, fresh, ok := s.drawCall(ctx, func(rctx context.Context) ([]any, error) {
		return lua.DrawEnter.Run(rctx, s.cfg.Primary, lua.DrawEnterKeys(e.id, challenge), user, newEntryID(),
			body.Variant, qty, now.UnixMilli(), fairqueue.MarkLife(ttl)).Slice()
	})
	if !ok {
		return
	}
	if code == lua.DrawClosed {
		s.writeError(ctx, flashgate.ErrClosed)
		return
	}
	status := fasthttp.StatusOK
	if fresh {
		status = fasthttp.StatusCreated
	}
	if st, _, _, _, _ := lua.ParseDrawEntry(entry); st == flashgate.DrawPending && s.cfg.Draws != nil {
		// Ask for the hold now, so that one answer carries it (or, with
		// simulated payments, enters the entry). A failure leaves the
		// entry pending, answered without its hold: the page asks again
		// with POST /entry/pay.
		if d, err := s.drawHold(user, e.id); err == nil {
			s.writeDrawEntry(ctx, status, sl, d)
			return
		} else if !errors.Is(err, flashgate.ErrNotPayable) {
			// Said at debug: a provider that is down would say it once
			// per entry; the page's /entry/pay gets the error itself.
			s.log.Debug("draw entry: its hold not made yet", "sale", e.id, "err", err)
		}
	}
	s.writeEntry(ctx, status, sl, entry)
}

// drawHold asks Config.Draws for user's hold in sale, within OrderTimeout.
func (s *Server) drawHold(user, sale string) (flashgate.DrawEntry, error) {
	hctx, cancel := context.WithTimeout(s.base, s.cfg.OrderTimeout)
	defer cancel()
	return s.cfg.Draws.HoldEntry(hctx, sale, user)
}

// drawPay serves POST /api/sales/{id}/entry/pay: 200 the buyer's pending
// entry with its card hold (payment_intent, client_secret), or the entry
// entered (simulated payments, or a hold already authorised); 404 without
// an entry, 409 not_payable for one withdrawn or drawn, 409 closed from
// the close.
func (s *Server) drawPay(ctx *fasthttp.RequestCtx, id []byte) {
	user, ok := s.authenticate(ctx)
	if !ok {
		writeAnswer(ctx, ansUnauth)
		return
	}
	e, sl, ok := s.drawSale(ctx, id)
	if !ok {
		return
	}
	if s.cfg.Draws == nil {
		writeAnswer(ctx, ansUnavail)
		return
	}
	now := s.clock.Now()
	if err := windowError(sl, now); errors.Is(err, flashgate.ErrClosed) {
		s.writeError(ctx, err)
		return
	}
	if !s.allowOrder(user, now) {
		writeAnswer(ctx, ansRateLimit)
		ctx.Response.Header.SetCanonical(hRetryAfter, s.orderRetryAfter)
		return
	}
	d, err := s.drawHold(user, e.id)
	if err != nil {
		s.writeError(ctx, err)
		return
	}
	s.writeDrawEntry(ctx, fasthttp.StatusOK, sl, d)
}

// drawWithdraw serves DELETE /api/sales/{id}/entry: 200 the withdrawn
// entry; 409 closed after the close.
func (s *Server) drawWithdraw(ctx *fasthttp.RequestCtx, id []byte) {
	user, ok := s.authenticate(ctx)
	if !ok {
		writeAnswer(ctx, ansUnauth)
		return
	}
	e, sl, ok := s.drawSale(ctx, id)
	if !ok {
		return
	}
	now := s.clock.Now()
	// Each withdrawal may ask the provider to release the hold (again):
	// the order routes' per-buyer limit bounds what one buyer's flood
	// of DELETEs costs the provider's rate, which every buyer shares.
	if !s.allowOrder(user, now) {
		writeAnswer(ctx, ansRateLimit)
		ctx.Response.Header.SetCanonical(hRetryAfter, s.orderRetryAfter)
		return
	}
	code, entry, _, ok := s.drawCall(ctx, func(rctx context.Context) ([]any, error) {
		// The read path releases the hold if this call's own release
		// (below, bounded by OrderTimeout) does not.
		return lua.DrawWithdraw.Run(rctx, s.cfg.Primary, lua.DrawWithdrawKeys(e.id), user, now.UnixMilli(),
			now.Add(s.cfg.OrderTimeout).UnixMilli()).Slice()
	})
	if !ok {
		return
	}
	if code == lua.DrawClosed {
		s.writeError(ctx, flashgate.ErrClosed)
		return
	}
	if s.cfg.Draws != nil {
		// Release the hold, now or on a retry: a withdrawal answered 503
		// here stands, and its hold is released by the next DELETE or
		// the control plane's read path.
		rctx, cancel := context.WithTimeout(s.base, s.cfg.OrderTimeout)
		d, err := s.cfg.Draws.ReleaseEntry(rctx, e.id, user)
		cancel()
		if err != nil {
			s.writeError(ctx, err)
			return
		}
		s.writeDrawEntry(ctx, fasthttp.StatusOK, sl, d)
		return
	}
	s.writeEntry(ctx, fasthttp.StatusOK, sl, entry)
}

// drawState serves GET /api/sales/{id}/entry: 200 the buyer's entry and
// where it stands; 404 without one.
func (s *Server) drawState(ctx *fasthttp.RequestCtx, id []byte) {
	user, ok := s.authenticate(ctx)
	if !ok {
		writeAnswer(ctx, ansUnauth)
		return
	}
	e, sl, ok := s.drawSale(ctx, id)
	if !ok {
		return
	}
	// A read is a script call on the sale's primary: the order routes'
	// per-buyer limit turns one buyer's flood away before Redis, as an
	// order's GET.
	if !s.allowOrder(user, s.clock.Now()) {
		writeAnswer(ctx, ansRateLimit)
		ctx.Response.Header.SetCanonical(hRetryAfter, s.orderRetryAfter)
		return
	}
	var out bool
	_, entry, _, ok := s.drawCall(ctx, func(rctx context.Context) ([]any, error) {
		v, err := lua.DrawState.Run(rctx, s.cfg.Primary, lua.DrawStateKeys(e.id), user).Slice()
		if len(v) > 4 {
			n, _ := v[4].(int64)
			out = n == 1
		}
		return v, err
	})
	if !ok {
		return
	}
	st, eid, qty, variant, ok := lua.ParseDrawEntry(entry)
	if !ok {
		s.writeError(ctx, errors.New("draw: an entry of another shape: "+entry))
		return
	}
	d := flashgate.DrawEntry{ID: eid, State: st, Variant: variant, Quantity: qty}
	if out {
		// Pending at the close: out of the draw, its hold released (or
		// none made) and the close finished. Its buyer's result is final:
		// nothing was charged (the item page polls until a final one).
		s.writeDrawEntryResult(ctx, fasthttp.StatusOK, sl, d, "lost")
		return
	}
	s.writeDrawEntry(ctx, fasthttp.StatusOK, sl, d)
}

// drawChallenge answers GET /api/sales/{id}/challenge of a draw sale: a
// challenge at the sale's difficulty while its window is open.
func (s *Server) drawChallenge(ctx *fasthttp.RequestCtx, id []byte) {
	e, sl, ok := s.drawSale(ctx, id)
	if !ok {
		return
	}
	now := s.clock.Now()
	if err := windowError(sl, now); err != nil {
		s.writeError(ctx, err)
		return
	}
	b := s.qkeys.AppendChallenge(make([]byte, 0, 256), e.id, sl.ChallengeMaxNumber, now)
	writeJSONHead(ctx, fasthttp.StatusOK)
	ctx.Response.SetBodyRaw(b)
}

// drawing reports whether id names a draw sale the cache knows.
func (s *Server) drawing(id []byte) bool {
	m := s.lookup(id).meta.Load()
	return m != nil && m.sale.Draw()
}
