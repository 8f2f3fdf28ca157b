package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"

	"github.com/valyala/fasthttp"

	"github.com/flashgate/flashgate"
)

// verdictErrs maps each local verdict but verdictAdmit to its sentinel.
var verdictErrs = [...]error{
	verdictUnavailable: flashgate.ErrUnavailable,
	verdictNotFound:    flashgate.ErrNotFound,
	verdictClosed:      flashgate.ErrClosed,
	verdictNotStarted:  flashgate.ErrNotStarted,
	verdictSoldOut:     flashgate.ErrSoldOut,
}

// verdictAnswers holds each verdict's answer from the error table.
var verdictAnswers = func() (a [len(verdictErrs)]answer) {
	for v, err := range verdictErrs {
		if err != nil {
			a[v] = answerFor(err)
		}
	}
	return a
}()

// rejectLocal answers a purchase the cached state turns away, counting it
// for the primary's "rejected" field.
func (s *Server) rejectLocal(ctx *fasthttp.RequestCtx, e *sale, v int) {
	if v <= verdictAdmit || v >= len(verdictAnswers) {
		v = verdictSoldOut
	}
	if v == verdictNotFound && e.meta.Load() == nil {
		// The catalog never answered for this id (it is down): it may name
		// a sale, so answer as for an unreadable one.
		v = verdictUnavailable
	}
	writeAnswer(ctx, verdictAnswers[v])
	switch v {
	case verdictUnavailable:
		s.m.decision(ctx, decUnavailable)
		return
	case verdictNotFound:
		s.m.decision(ctx, decNotFound)
		return
	case verdictClosed:
		s.m.decision(ctx, decClosed)
	case verdictNotStarted:
		s.m.decision(ctx, decNotStarted)
	default:
		s.m.decision(ctx, decSoldOut)
	}
	e.rejected.Add(1)
}

// purchase judges POST /api/sales/{id}/orders in docs/api.md's order: a bearer
// header of plausible shape, the cached state (answered locally: the
// sale's state is public, so a crowd turned away costs no HMAC, no Redis
// call and no limiter token), the token's signature and claims, rate
// limits, body, admission, reserve.
func (s *Server) purchase(ctx *fasthttp.RequestCtx, id []byte) {
	body := ctx.PostBody()
	if len(body) > s.cfg.MaxBodySize {
		writeAnswer(ctx, ansTooLarge)
		return
	}
	tok, ok := bearerToken(ctx)
	if !ok {
		writeAnswer(ctx, ansUnauth)
		return
	}
	e := s.lookup(id)
	if v := judge(e.state.Load(), e.admitted.Load()); v != verdictAdmit {
		s.rejectLocal(ctx, e, v)
		return
	}
	if s.fairRejected(ctx, e, tok, s.secondsNow()) { // queue_routes.go
		return
	}
	now := s.clock.Now()
	user, ok := s.jwt.verify(tok, now.UnixNano())
	if !ok {
		writeAnswer(ctx, ansUnauth)
		return
	}
	// The user's bucket first: one user hammering the button spends only
	// their own tokens, never the sale's that everyone shares.
	if !s.allowUser(user, now) {
		s.m.decision(ctx, decRateLimited)
		e.rejected.Add(1)
		writeAnswer(ctx, ansRateLimit)
		ctx.Response.Header.SetCanonical(hRetryAfter, s.userRetryAfter)
		return
	}
	if e.limiter != nil && !e.limiter.AllowN(now, 1) {
		s.m.decision(ctx, decRateLimited)
		e.rejected.Add(1)
		writeAnswer(ctx, ansRateLimit)
		ctx.Response.Header.SetCanonical(hRetryAfter, vOne)
		return
	}
	qty, ok := parseQuantity(body)
	if !ok {
		writeAnswer(ctx, ansBadRequest)
		return
	}
	st := e.state.Load()
	if q := st.fairQueue(); q != nil {
		if !s.fairAdmit(ctx, e, st, q, user) { // queue.go
			return
		}
	} else if v := e.admit(); v != verdictAdmit {
		s.rejectLocal(ctx, e, v)
		return
	}
	s.m.decision(ctx, decAdmitted)
	orderID, err := s.cfg.Reserver.Reserve(s.base, e.id, user, "", qty)
	if err != nil {
		var pe *flashgate.PurchasedError
		if errors.As(err, &pe) {
			writePurchased(ctx, pe.OrderID)
			return
		}
		if errors.Is(err, flashgate.ErrUnavailable) {
			s.logUnavailable(err)
		}
		s.writeError(ctx, err)
		return
	}
	if st.fairQueue() != nil {
		s.setBoughtTicket(ctx, e, user, orderID)
	}
	writeOrder(ctx, fasthttp.StatusCreated, flashgate.Order{ID: orderID, SaleID: e.id, UserID: user, Status: flashgate.StatusReserved})
}

// parseQuantity reads the optional {"quantity":n} body; n defaults to 1.
// Any other field is refused, as the description's additionalProperties:
// false says, and so is anything after the object or any body that is not
// an object (null among them, which encoding/json would read as {}).
func parseQuantity(body []byte) (int64, bool) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return 1, true
	}
	if body[0] != '{' {
		return 0, false
	}
	var req struct {
		Quantity *int64 `json:"quantity"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return 0, false
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return 0, false
	}
	if req.Quantity == nil {
		return 1, true
	}
	if *req.Quantity < 1 {
		return 0, false
	}
	return *req.Quantity, true
}
