package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/flashgate/flashgate"
)

var (
	pHealthz  = []byte("/healthz")
	pReadyz   = []byte("/readyz")
	pSales    = []byte("/sales/")
	pAPISales = []byte("/api/sales/")
	pOrders   = []byte("/api/orders/")
	pStatic   = []byte("/static/")
	pAPI      = []byte("/api/")
	sOrders   = []byte("/orders")
	sPay      = []byte("/pay")
	sCancel   = []byte("/cancel")
)

// serve is the top handler: it routes on the raw request path (never the
// normalized one, so "..", "%2e" and "//" tricks match nothing), recovers
// from panics and counts the answer.
func (s *Server) serve(ctx *fasthttp.RequestCtx) {
	var start time.Duration
	if s.m != nil {
		start = time.Since(monoBase)
	}
	route := routeOther
	defer func() {
		if v := recover(); v != nil {
			s.log.Error("gateway: panic serving a request", "path", string(ctx.Path()), "panic", fmt.Sprint(v))
			ctx.Response.Reset()
			writeAnswer(ctx, ansInternal)
		}
		if s.m != nil {
			s.m.request(ctx, route, ctx.Response.StatusCode(), time.Since(monoBase)-start)
		}
	}()
	route = s.route(ctx)
}

// monoBase is the reading of the clock request latencies are measured
// from: time.Since of it reads only the monotonic clock, where time.Now
// reads the wall clock too. (The servers run with LazyRequestTime, so
// fasthttp reads no clock for a request time nobody asks for.)
var monoBase = time.Now()

// route dispatches one request and returns the route it took.
func (s *Server) route(ctx *fasthttp.RequestCtx) int {
	path := ctx.Request.URI().PathOriginal()
	get := ctx.IsGet() || ctx.IsHead()
	post := ctx.IsPost()
	switch {
	case bytes.HasPrefix(path, pSales):
		id := path[len(pSales):]
		if !flashgate.ValidID(id) {
			s.notFoundPage(ctx)
			return routeOther
		}
		if !get {
			methodNotAllowed(ctx, vGet)
			return routePage
		}
		s.itemPage(ctx, id)
		return routePage

	case bytes.HasPrefix(path, pAPISales):
		rest := path[len(pAPISales):]
		if r, ok := s.routeQueue(ctx, rest, get, post); ok { // queue.go
			return r
		}
		if bytes.HasSuffix(rest, sOrders) {
			id := rest[:len(rest)-len(sOrders)]
			if !flashgate.ValidID(id) {
				writeAnswer(ctx, ansNotFound)
				return routeOther
			}
			if !post {
				methodNotAllowed(ctx, vPost)
				return routePurchase
			}
			s.purchase(ctx, id)
			return routePurchase
		}
		if !flashgate.ValidID(rest) {
			writeAnswer(ctx, ansNotFound)
			return routeOther
		}
		if !get {
			methodNotAllowed(ctx, vGet)
			return routeAPISale
		}
		s.apiSale(ctx, rest)
		return routeAPISale

	case bytes.HasPrefix(path, pOrders):
		rest := path[len(pOrders):]
		action, r, want := orderGet, routeOrder, vGet
		switch {
		case bytes.HasSuffix(rest, sPay):
			action, r, want = orderPay, routePay, vPost
			rest = rest[:len(rest)-len(sPay)]
		case bytes.HasSuffix(rest, sCancel):
			action, r, want = orderCancel, routeCancel, vPost
			rest = rest[:len(rest)-len(sCancel)]
		}
		if !flashgate.ValidID(rest) {
			writeAnswer(ctx, ansNotFound)
			return routeOther
		}
		if (action == orderGet && !get) || (action != orderGet && !post) {
			methodNotAllowed(ctx, want)
			return r
		}
		s.order(ctx, rest, action)
		return r

	case bytes.Equal(path, pHealthz):
		if !get {
			methodNotAllowed(ctx, vGet)
		} else {
			ctx.Response.Header.SetCanonical(hCacheControl, vNoStore)
			ctx.Response.Header.SetCanonical(hVersion, vVersion)
			ctx.SetBodyString("ok\n")
		}
		return routeHealthz

	case bytes.Equal(path, pReadyz):
		switch {
		case !get:
			methodNotAllowed(ctx, vGet)
		case s.isReady():
			ctx.Response.Header.SetContentTypeBytes(ctJSON)
			ctx.Response.Header.SetCanonical(hCacheControl, vNoStore)
			ctx.Response.SetBodyRaw(bodyReady)
		default:
			writeAnswer(ctx, ansUnavail)
		}
		return routeReadyz

	case bytes.HasPrefix(path, pStatic):
		a := s.assets[string(path[len(pStatic):])]
		if a == nil {
			writeAnswer(ctx, ansNotFound)
			return routeOther
		}
		if !get {
			methodNotAllowed(ctx, vGet)
			return routeStatic
		}
		s.writePage(ctx, a)
		return routeStatic

	case bytes.Equal(path, pOpenAPI):
		if !get {
			methodNotAllowed(ctx, vGet)
		} else {
			s.writePage(ctx, openAPIPage())
		}
		return routeStatic

	case bytes.HasPrefix(path, pAPI):
		writeAnswer(ctx, ansNotFound)
		return routeOther
	}
	// Only item pages answer with pages; any other path is the API's 404.
	writeAnswer(ctx, ansNotFound)
	return routeOther
}

// methodNotAllowed answers 405 with Allow and, like every error, a JSON code.
func methodNotAllowed(ctx *fasthttp.RequestCtx, allow []byte) {
	writeAnswer(ctx, ansNoMethod)
	ctx.Response.Header.SetCanonical(hAllow, allow)
}

// serveError answers the errors fasthttp finds before the handler runs
// (a body over the limit, a malformed request) in the API's JSON. A
// connection that timed out or went away before a whole request arrived is
// closed without an answer: nobody asked anything, and on a keep-alive
// connection an unsolicited 400 would be read as the answer to the next
// request a client sends on it.
func (s *Server) serveError(ctx *fasthttp.RequestCtx, err error) {
	var nothing fasthttp.ErrNothingRead
	var ne net.Error
	if errors.As(err, &nothing) || errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded) {
		// fasthttp writes whatever the handler leaves; a closed connection
		// takes nothing.
		if c := ctx.Conn(); c != nil {
			_ = c.Close()
		}
		return
	}
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		writeAnswer(ctx, ansTooLarge)
		ctx.SetConnectionClose()
		return
	}
	var small *fasthttp.ErrSmallBuffer
	if errors.As(err, &small) {
		// Headers over the buffer are the one bad request with its own
		// status, 431; the code stays the table's bad_request.
		writeJSON(ctx, fasthttp.StatusRequestHeaderFieldsTooLarge, ansBadRequest.body)
		ctx.SetConnectionClose()
		return
	}
	writeAnswer(ctx, ansBadRequest)
	ctx.SetConnectionClose()
}

// apiSale answers GET /api/sales/{id} with the sale's precomputed JSON.
// It may lag Redis by one StateRefresh, and carries "public, max-age=1" so
// a CDN can absorb the polling of a waiting crowd.
func (s *Server) apiSale(ctx *fasthttp.RequestCtx, id []byte) {
	e := s.lookup(id)
	d := e.api.Load()
	if d == nil {
		writeAnswer(ctx, ansUnavail)
		return
	}
	ctx.Response.SetStatusCode(d.status)
	ctx.Response.Header.SetContentTypeBytes(ctJSON)
	if d.status == fasthttp.StatusOK {
		ctx.Response.Header.SetCanonical(hCacheControl, vAPICache)
	} else {
		ctx.Response.Header.SetCanonical(hCacheControl, vNoStore)
	}
	ctx.Response.SetBodyRaw(d.body)
}

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
	orderID, err := s.cfg.Reserver.Reserve(s.base, e.id, user, qty)
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
		s.setBoughtTicket(ctx, e, user)
	}
	writeOrder(ctx, fasthttp.StatusCreated, flashgate.Order{ID: orderID, SaleID: e.id, UserID: user, Status: flashgate.StatusReserved})
}

// parseQuantity reads the optional {"quantity":n} body; n defaults to 1.
// Any other field is refused, as the description's additionalProperties:
// false says, and so is anything after the object.
func parseQuantity(body []byte) (int64, bool) {
	if len(bytes.TrimSpace(body)) == 0 {
		return 1, true
	}
	var req struct {
		Quantity *int64 `json:"quantity"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return 0, false
	}
	if _, err := dec.Token(); err != io.EOF {
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

// Order route actions.
const (
	orderGet = iota
	orderPay
	orderCancel
)

// order serves the buyer's order routes for the authenticated user.
func (s *Server) order(ctx *fasthttp.RequestCtx, id []byte, action int) {
	user, ok := s.authenticate(ctx)
	if !ok {
		writeAnswer(ctx, ansUnauth)
		return
	}
	if s.cfg.Orders == nil {
		writeAnswer(ctx, ansUnavail)
		return
	}
	// Each user's own bucket, apart from purchases: polling an order
	// never spends a purchase attempt.
	if !s.allowOrder(user, s.clock.Now()) {
		writeAnswer(ctx, ansRateLimit)
		ctx.Response.Header.SetCanonical(hRetryAfter, s.orderRetryAfter)
		return
	}
	// A stalled database or Redis answers 503 within OrderTimeout rather
	// than holding the handler.
	octx, cancel := context.WithTimeout(s.base, s.cfg.OrderTimeout)
	defer cancel()
	var (
		o   flashgate.Order
		err error
	)
	switch action {
	case orderPay:
		o, err = s.cfg.Orders.Pay(octx, string(id), user)
	case orderCancel:
		o, err = s.cfg.Orders.Cancel(octx, string(id), user)
	default:
		o, err = s.cfg.Orders.Order(octx, string(id), user)
	}
	if err != nil {
		if octx.Err() != nil && s.base.Err() == nil {
			s.logOrderLate(err)
			writeAnswer(ctx, ansUnavail)
			return
		}
		s.writeError(ctx, err)
		return
	}
	if o.UserID != user {
		// The Orders service must not hand out other users' orders; if
		// it does, answer as for an order that is not there.
		writeAnswer(ctx, ansNotFound)
		return
	}
	writeOrder(ctx, fasthttp.StatusOK, o)
}
