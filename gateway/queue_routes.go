package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/fairqueue"
	"github.com/flashgate/flashgate/gateway/bearer"
	"github.com/flashgate/flashgate/gateway/queueedge"
	"github.com/flashgate/flashgate/lua"
)

// The fair queue's routes: each reads the cached sale and its queue, and
// hands tickets, places and proofs of work to package queueedge, which
// formats the bodies; the answers' status and the sale's counters stay
// here. The sale state's queue part is read by queueReads and applyQueue
// (queue_state.go).

// routeQueue serves /api/sales/{id}/queue and /api/sales/{id}/challenge;
// ok is false for another path.
func (s *Server) routeQueue(ctx *fasthttp.RequestCtx, rest []byte, get, post bool) (route int, ok bool) {
	switch {
	case bytes.HasSuffix(rest, sQueue):
		id := rest[:len(rest)-len(sQueue)]
		if !flashgate.ValidID(id) {
			writeAnswer(ctx, ansNotFound)
			return routeOther, true
		}
		switch {
		case get:
			s.queueStatus(ctx, id)
		case post:
			s.queueEnter(ctx, id)
		default:
			methodNotAllowed(ctx, vGetPost)
		}
		return routeQueue, true
	case bytes.HasSuffix(rest, sChallenge):
		id := rest[:len(rest)-len(sChallenge)]
		if !flashgate.ValidID(id) {
			writeAnswer(ctx, ansNotFound)
			return routeOther, true
		}
		if !get {
			methodNotAllowed(ctx, vGet)
		} else {
			s.challenge(ctx, id)
		}
		return routeChallenge, true
	}
	return 0, false
}

var (
	sQueue     = []byte("/queue")
	sChallenge = []byte("/challenge")
	vGetPost   = []byte("GET, HEAD, POST")
)

// queueSale looks a fair sale up for a queue route and answers the request
// itself (and returns nil) when the sale has no fair queue to use.
func (s *Server) queueSale(ctx *fasthttp.RequestCtx, id []byte) (*sale, *saleState, *queueedge.View) {
	e, st, q := s.fairLookup(id)
	if q == nil {
		s.noQueue(ctx, e, st)
		return nil, nil, nil
	}
	return e, st, q
}

// fairLookup looks a sale up for a queue route without answering: q is
// nil when it has no fair queue to use (noQueue says why).
func (s *Server) fairLookup(id []byte) (*sale, *saleState, *queueedge.View) {
	e := s.lookup(id)
	st := e.state.Load()
	if v := judge(st, 0); v == verdictUnavailable || v == verdictNotFound || !e.fairSale() {
		return e, st, nil
	}
	return e, st, st.fairQueue()
}

// noQueue answers a queue route whose sale fairLookup found no fair queue
// to use in.
func (s *Server) noQueue(ctx *fasthttp.RequestCtx, e *sale, st *saleState) {
	switch v := judge(st, 0); {
	case v == verdictUnavailable, v == verdictNotFound:
		s.rejectLocal(ctx, e, v)
	case !e.fairSale():
		writeAnswer(ctx, ansNotFound)
	default:
		writeAnswer(ctx, ansUnavail)
	}
}

// queueStatus answers GET /api/sales/{id}/queue from the cache.
//
// A valid ticket binds the sale and the user as the token does (the
// gateway gave it to a verified request of that user), and the answer is
// that ticket's own place, which the sale's public figures and the user id
// determine. So the token's claims are read (bearer.Verifier.Subject) and its
// signature is checked only when no valid ticket comes; and a ticket bound
// to the request's token (the form this answer reissues) is judged without
// even reading the claims (boundStatus): a status poll of a waiting crowd
// costs one MAC, the ticket's, not two.
func (s *Server) queueStatus(ctx *fasthttp.RequestCtx, id []byte) {
	tok, ok := bearer.Token(ctx)
	if !ok {
		writeAnswer(ctx, ansUnauth)
		return
	}
	now := s.secondsNow()
	t := ctx.Request.Header.PeekCanonical(queueedge.Header)
	e, st, q := s.fairLookup(id)
	if q != nil && s.boundStatus(ctx, e, st, q, tok, t, now) {
		return
	}
	user, exp, ok := s.jwt.Subject(tok, now)
	verified := false
	if !ok {
		if user, ok = s.jwt.Verify(tok, now); !ok {
			writeAnswer(ctx, ansUnauth)
			return
		}
		verified, exp = true, 0
	}
	if q == nil {
		s.noQueue(ctx, e, st)
		return
	}
	tk, ok := s.qkeys.ReadTicket(t, e.id, user)
	if !ok {
		if !verified {
			if _, ok := s.jwt.Verify(tok, now); !ok {
				writeAnswer(ctx, ansUnauth)
				return
			}
		}
		// No (valid) ticket: the buyer has not entered, as far as this
		// request shows; entering again is idempotent and returns it.
		writeAnswer(ctx, ansNotFound)
		return
	}
	p := s.locate(e, st, q, &tk, user)
	writePlace(ctx, &p, q)
	s.qkeys.Reissue(ctx, &e.fair, user, t, &tk, &p, bearer.Sig(tok), exp)
}

// boundStatus answers a status poll whose ticket is bound to the
// request's token (queueedge.Keys.ReadBound) and whose place needs no user id
// to judge; it reports whether it answered. Anything else (no such
// ticket, a rank key to compute) is left to queueStatus's full path.
func (s *Server) boundStatus(ctx *fasthttp.RequestCtx, e *sale, st *saleState, q *queueedge.View, tok, t []byte, now int64) bool {
	tk, ok := s.qkeys.ReadBound(t, bearer.Sig(tok), &e.fair, now/1e9)
	if !ok {
		return false
	}
	p := s.locate(e, st, q, &tk, "")
	if p.NeedUser() {
		return false
	}
	writePlace(ctx, &p, q)
	return true
}

// writeNoPlace answers a place without one: 409 queue_reset, or 503
// unavailable while the sale's queue is being restored.
func writeNoPlace(ctx *fasthttp.RequestCtx, p *queueedge.Place) {
	if p.Restoring() {
		writeAnswer(ctx, ansUnavail)
		return
	}
	writeAnswer(ctx, ansQueueReset)
}

// writePlace answers 200 with the status JSON of p, or 409 queue_reset.
func writePlace(ctx *fasthttp.RequestCtx, p *queueedge.Place, q *queueedge.View) {
	if p.NoPlace() {
		writeNoPlace(ctx, p)
		return
	}
	writeJSONHead(ctx, fasthttp.StatusOK)
	b := ctx.Response.SwapBody(nil)
	b = append(p.AppendJSON(b[:0], q), '}')
	ctx.Response.SwapBody(b)
}

// queueEnter serves POST /api/sales/{id}/queue: one script call.
func (s *Server) queueEnter(ctx *fasthttp.RequestCtx, id []byte) {
	user, ok := s.authenticate(ctx)
	if !ok {
		writeAnswer(ctx, ansUnauth)
		return
	}
	e, st, q := s.queueSale(ctx, id)
	if e == nil {
		return
	}
	if st.closed {
		s.rejectLocal(ctx, e, verdictClosed)
		return
	}
	if !q.Open {
		s.writeError(ctx, flashgate.ErrNotStarted)
		return
	}
	now := s.clock.Now()
	if !s.allowUser(user, now) {
		writeAnswer(ctx, ansRateLimit)
		ctx.Response.Header.SetCanonical(hRetryAfter, s.userRetryAfter)
		return
	}
	var body struct {
		Payload string `json:"payload"`
	}
	if b := bytes.TrimSpace(ctx.PostBody()); len(b) > 0 {
		if err := json.Unmarshal(b, &body); err != nil {
			writeAnswer(ctx, ansBadRequest)
			return
		}
	}
	challenge, ttl := "none", time.Duration(0)
	if floor := powFloor(e, q); floor > 0 {
		var err error
		if challenge, ttl, err = s.qkeys.VerifyPoW(body.Payload, e.id, floor, now); err != nil {
			s.writeError(ctx, err)
			return
		}
	}
	rctx, cancel := context.WithTimeout(s.base, s.cfg.RedisTimeout)
	defer cancel()
	v, err := s.entrant.Run(rctx, e.id, lua.QueueEnterKeys(e.id, challenge), user, fairqueue.MarkLife(ttl))
	if errors.Is(err, queueedge.ErrShort) {
		// The entry stands on the primary but its replicas do not hold
		// it: no 201 a failover could take back. Entering again answers
		// it once they do.
		writeAnswer(ctx, ansUnavail)
		return
	}
	if err != nil || len(v) < 3 {
		s.logUnavailable(err)
		writeAnswer(ctx, ansUnavail)
		return
	}
	code, _ := v[0].(int64)
	entry, _ := v[1].(string)
	fresh, _ := v[2].(int64)
	switch code {
	case lua.EnterOK:
		if sha, _ := v[len(v)-1].(string); len(v) > 3 && sha != q.SeedSHA {
			// The entry went into a queue the cache has not seen (a
			// rebuilt one, its commitment not read yet): no ticket names
			// a queue the answer cannot place it in. Entering again
			// answers it once the cache has the queue.
			writeAnswer(ctx, ansUnavail)
			return
		}
	case lua.EnterNoSale:
		writeAnswer(ctx, ansNotFound)
		return
	case lua.EnterNotOpen:
		s.writeError(ctx, flashgate.ErrNotStarted)
		return
	case lua.EnterClosed:
		s.writeError(ctx, flashgate.ErrClosed)
		return
	case lua.EnterSolveUsed:
		s.writeError(ctx, &flashgate.FieldError{Field: "payload", Reason: "solution used already"})
		return
	default:
		writeAnswer(ctx, ansNotFound)
		return
	}
	tk, q := queueedge.Entered(q, entry, fresh == 1) // its queue's commitment is the cache's (above)
	p := s.locate(e, st, q, &tk, user)
	status := fasthttp.StatusOK
	if fresh == 1 {
		status = fasthttp.StatusCreated
	}
	writeJSONHead(ctx, status)
	b := p.AppendJSON(nil, q)
	b = append(b, `,"ticket":"`...)
	b = s.qkeys.AppendEntered(b, e.id, user, &tk)
	b = append(b, `"}`...)
	ctx.Response.SetBodyRaw(b)
}

// fairRejected answers 409 not_admitted, before the token's signature is
// checked, a purchase in a fair queue whose valid ticket places its buyer
// outside the admitted window: like a sold-out answer, it turns the
// waiting crowd away from the cache. The ticket binds sale and user (see
// queueStatus), and the answer is the ticket's own place; a ticket bound
// to this token is judged without reading its claims. Any other purchase
// (no fair queue, no valid ticket, an admitted place) goes on to the
// signature check; it reports whether it answered.
func (s *Server) fairRejected(ctx *fasthttp.RequestCtx, e *sale, tok []byte, now int64) bool {
	st := e.state.Load()
	q := st.fairQueue()
	if q == nil {
		return false
	}
	t := ctx.Request.Header.PeekCanonical(queueedge.Header)
	if tk, ok := s.qkeys.ReadBound(t, bearer.Sig(tok), &e.fair, now/1e9); ok {
		if p := s.locate(e, st, q, &tk, ""); !p.NeedUser() {
			if p.Admitted() {
				return false
			}
			s.notAdmitted(ctx, e, q, &p)
			return true
		}
	}
	user, exp, ok := s.jwt.Subject(tok, now)
	if !ok {
		return false
	}
	tk, ok := s.qkeys.ReadTicket(t, e.id, user)
	if !ok {
		return false
	}
	p := s.locate(e, st, q, &tk, user)
	if p.Admitted() {
		return false
	}
	s.notAdmitted(ctx, e, q, &p)
	s.qkeys.Reissue(ctx, &e.fair, user, t, &tk, &p, bearer.Sig(tok), exp)
	return true
}

// fairAdmit judges a purchase in a fair queue from the cache: true lets it
// through to the reserve (which checks again); false has answered 409
// not_admitted with the buyer's position, or closed.
func (s *Server) fairAdmit(ctx *fasthttp.RequestCtx, e *sale, st *saleState, q *queueedge.View, user string) bool {
	t := ctx.Request.Header.PeekCanonical(queueedge.Header)
	tk, ok := s.qkeys.ReadTicket(t, e.id, user)
	if !ok {
		s.m.decision(ctx, decNotAdmitted)
		e.rejected.Add(1)
		writeAnswer(ctx, ansNotAdmitted)
		return false
	}
	p := s.locate(e, st, q, &tk, user)
	if p.Admitted() {
		e.admitted.Add(1)
		return true
	}
	s.notAdmitted(ctx, e, q, &p)
	// The token was verified, its claims not kept: a new rank key is
	// reissued in the short form.
	s.qkeys.Reissue(ctx, &e.fair, user, t, &tk, &p, nil, 0)
	return false
}

// notAdmitted answers 409 not_admitted with the buyer's place (409
// queue_reset for a ticket of a queue that is gone).
func (s *Server) notAdmitted(ctx *fasthttp.RequestCtx, e *sale, q *queueedge.View, p *queueedge.Place) {
	s.m.decision(ctx, decNotAdmitted)
	e.rejected.Add(1)
	if p.NoPlace() {
		writeNoPlace(ctx, p)
		return
	}
	writeJSONHead(ctx, fasthttp.StatusConflict)
	b := ctx.Response.SwapBody(nil)
	ctx.Response.SwapBody(p.AppendNotAdmitted(b[:0], q))
}

var (
	ansNotAdmitted = answerFor(flashgate.ErrNotAdmitted)
	ansQueueReset  = answerFor(flashgate.ErrQueueReset)
)
