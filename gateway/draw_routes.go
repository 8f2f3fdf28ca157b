package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
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
// of an entry is the payment side's.

var (
	sEntry         = []byte("/entry")
	vGetPostDelete = []byte("GET, HEAD, POST, DELETE")
	errEntryBody   = &flashgate.FieldError{Field: "body", Reason: `{"variant"?, "quantity"?, "payload"?}`}
)

// routeDraw serves /api/sales/{id}/entry; ok is false for another path.
func (s *Server) routeDraw(ctx *fasthttp.RequestCtx, rest []byte, get, post bool) (route int, ok bool) {
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
	a := entryAnswer{EntryID: id, State: string(st), Result: drawResult(st), Variant: variant, Quantity: qty,
		EntriesOpenAt: sl.EntriesOpenAt, EntriesCloseAt: sl.EntriesCloseAt}
	if st == flashgate.DrawCaptured {
		a.OrderID = flashgate.DrawOrderID(id)
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
		d := json.NewDecoder(bytes.NewReader(b))
		d.DisallowUnknownFields()
		if err := d.Decode(&body); err != nil {
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
	s.writeEntry(ctx, status, sl, entry)
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
	code, entry, _, ok := s.drawCall(ctx, func(rctx context.Context) ([]any, error) {
		return lua.DrawWithdraw.Run(rctx, s.cfg.Primary, lua.DrawChangeKeys(e.id), user, now.UnixMilli()).Slice()
	})
	if !ok {
		return
	}
	if code == lua.DrawClosed {
		s.writeError(ctx, flashgate.ErrClosed)
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
	_, entry, _, ok := s.drawCall(ctx, func(rctx context.Context) ([]any, error) {
		return lua.DrawState.Run(rctx, s.cfg.Primary, lua.DrawStateKeys(e.id), user).Slice()
	})
	if !ok {
		return
	}
	s.writeEntry(ctx, fasthttp.StatusOK, sl, entry)
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
