package gateway

import (
	"errors"
	"math/rand/v2"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/gateway/bearer"
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
	if v == verdictNotFound {
		switch m := e.meta.Load(); {
		case m == nil:
			// The catalog never answered for this id (it is down): it may
			// name a sale, so answer as for an unreadable one.
			v = verdictUnavailable
		case m.found:
			// The catalog has the sale, Redis has no hash of it: Redis
			// lost it (a FLUSHALL, a fresh Redis) and the re-sync
			// rebuilds it. Retry, not 404.
			s.m.decision(ctx, decUnavailable)
			s.answerSaleLost(ctx)
			return
		}
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
// limits, body, admission, reserve. A purchase naming a variant the cache
// knows is sold out is answered with the cached state, as a sold-out sale.
func (s *Server) purchase(ctx *fasthttp.RequestCtx, id []byte) {
	body := ctx.PostBody()
	if len(body) > s.cfg.MaxBodySize {
		writeAnswer(ctx, ansTooLarge)
		return
	}
	tok, ok := bearer.Token(ctx)
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
	// The body is read here only for a sale with variants, whose sold-out
	// ones the cache answers; a sale of one stock reads it below.
	var vbuf [flashgate.MaxVariantIDLen]byte
	var qty int64
	var variant []byte
	parsed, bodyOK := false, false
	m := e.meta.Load()
	vi := -1
	if m != nil && m.vs != nil {
		qty, variant, bodyOK = parsePurchase(body, &vbuf)
		parsed = true
		if bodyOK && variant != nil {
			if vi = m.vs.index(variant); vi >= 0 && e.state.Load().variantSoldOut(m.vs, vi) {
				s.rejectVariant(ctx, e, m.vs, vi)
				return
			}
		}
	}
	now := s.clock.Now()
	user, ok := s.jwt.Verify(tok, now.UnixNano())
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
	if !parsed {
		qty, variant, bodyOK = parsePurchase(body, &vbuf)
	}
	vid, ok := purchaseVariant(m, vi, variant)
	if !bodyOK || !ok {
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
	if s.reserves != nil && !s.reserves.Acquire() {
		// Over the adaptive limit: more reserves in flight would only
		// queue. Answered at once, and the admission goes back as for an
		// attempt that could not buy (a fair queue's ticket stays good).
		if st.fairQueue() == nil {
			e.admitted.Add(-1)
		}
		s.shed(ctx, e)
		return
	}
	s.m.decision(ctx, decAdmitted)
	var began time.Time
	if s.reserves != nil {
		began = s.clock.Now()
	}
	orderID, err := s.cfg.Reserver.Reserve(s.base, e.id, user, vid, qty)
	if s.reserves != nil {
		end := s.clock.Now()
		s.reserves.Release(end.Sub(began), end.UnixNano())
	}
	if err != nil {
		if errors.Is(err, flashgate.ErrNotFound) {
			// The cached state judged the sale open, so it exists: a
			// reserve that finds no sale in Redis means Redis lost it
			// (a FLUSHALL, a fresh Redis) before the state refresh saw
			// the loss. The re-sync rebuilds it: retry, not 404.
			s.lostSale(ctx, e, st)
			return
		}
		if st.fairQueue() == nil && couldNotBuy(err) {
			// The attempt did not buy (the buyer holds an order already,
			// the quantity or variant is refused, the sale is paused or
			// fenced for a rebuild, Redis or the inventory is
			// unreachable): the admission it was counted goes back, so
			// that the admission cap counts only attempts that bought or
			// could still buy.
			e.admitted.Add(-1)
		}
		var pe *flashgate.PurchasedError
		if errors.As(err, &pe) {
			writePurchased(ctx, pe.OrderID)
			return
		}
		if errors.Is(err, flashgate.ErrUnavailable) {
			s.logUnavailable(err)
		}
		if vi >= 0 && errors.Is(err, flashgate.ErrSoldOut) {
			// The variant sold out since the cache's reading.
			writeJSON(ctx, fasthttp.StatusConflict, m.vs.soldOut[vi])
			return
		}
		s.writeError(ctx, err)
		return
	}
	if st.fairQueue() != nil {
		s.setBoughtTicket(ctx, e, user, orderID)
	}
	writeOrder(ctx, fasthttp.StatusCreated, flashgate.Order{ID: orderID, SaleID: e.id, UserID: user, Variant: vid, Status: flashgate.StatusReserved})
}

// shedRetryAfter are the Retry-After values of a shed purchase (and of
// one whose sale Redis lost), one picked at random so that the buyers
// turned away together do not all come back in the same second.
var shedRetryAfter = [...][]byte{[]byte("1"), []byte("2"), []byte("3")}

// ansSaleLost answers a purchase of a sale Redis lost.
var ansSaleLost = answerFor(flashgate.ErrSaleLost)

// lostSale answers a purchase whose reserve found no sale in Redis while
// the cached state (st) said it sells: 503 unavailable with a jittered
// Retry-After, the admission given back (nothing was taken).
func (s *Server) lostSale(ctx *fasthttp.RequestCtx, e *sale, st *saleState) {
	if st.fairQueue() == nil {
		e.admitted.Add(-1)
	}
	s.answerSaleLost(ctx)
}

// answerSaleLost answers a request about a sale Redis lost: 503
// unavailable with a jittered Retry-After. The cached state says so once
// the state refresh saw the loss (rejectLocal); a reserve says so before.
func (s *Server) answerSaleLost(ctx *fasthttp.RequestCtx) {
	s.logUnavailable(flashgate.ErrSaleLost)
	writeAnswer(ctx, ansSaleLost)
	ctx.Response.Header.SetCanonical(hRetryAfter, shedRetryAfter[rand.IntN(len(shedRetryAfter))])
}

// shed answers a purchase the adaptive reserve limit turns away: 503
// unavailable with a jittered Retry-After.
func (s *Server) shed(ctx *fasthttp.RequestCtx, e *sale) {
	s.m.decision(ctx, decShed)
	e.rejected.Add(1)
	writeAnswer(ctx, verdictAnswers[verdictUnavailable])
	ctx.Response.Header.SetCanonical(hRetryAfter, shedRetryAfter[rand.IntN(len(shedRetryAfter))])
}

// couldNotBuy reports whether err, a Reserver's refusal, is one of an
// attempt that gets no 201: the buyer's live order (ErrAlreadyPurchased), a
// quantity or variant the sale refuses (ErrBadRequest), or a 503
// (ErrUnavailable: a sale paused or fenced for a rebuild, Redis or the
// inventory unreachable, a WAIT short of replicas). A 503 gives its
// admission back even though a timed-out reserve may have taken its units:
// the cap then admits a few attempts more than it counts, which the reserve
// script's stock check refuses, while keeping the admission of every
// refused attempt left units unsold behind a full cap after a failover.
// Sold out keeps its admission.
func couldNotBuy(err error) bool {
	return errors.Is(err, flashgate.ErrAlreadyPurchased) || errors.Is(err, flashgate.ErrBadRequest) || errors.Is(err, flashgate.ErrUnavailable)
}

// rejectVariant answers a purchase of vs's variant i, which the cached
// state says is sold out, counting it as rejectLocal does.
func (s *Server) rejectVariant(ctx *fasthttp.RequestCtx, e *sale, vs *variantSet, i int) {
	writeJSON(ctx, fasthttp.StatusConflict, vs.soldOut[i])
	s.m.decision(ctx, decSoldOut)
	e.rejected.Add(1)
}

// purchaseVariant returns the variant id a purchase passes to the Reserver,
// given the sale's catalog entry m, the variant the body names (nil for
// none) and its index in m's variants (vi, -1 when not among them). It
// reports false when the body names none on a sale with variants, one the
// sale does not have, or one on a sale without. Without a catalog entry
// (the catalog never answered) the Reserver judges the variant.
func purchaseVariant(m *saleMeta, vi int, variant []byte) (string, bool) {
	switch {
	case m == nil:
		return string(variant), true
	case m.vs == nil:
		return "", variant == nil
	case vi < 0:
		return "", false
	}
	return m.vs.ids[vi], true
}
