package gateway

import (
	"bytes"
	"errors"
	"fmt"
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
	pWebhook  = []byte("/webhooks/stripe")
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
		if r, ok := s.routeQueue(ctx, rest, get, post); ok { // queue_routes.go
			return r
		}
		if r, ok := s.routeDraw(ctx, rest, get, post); ok { // draw_routes.go
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

	case bytes.Equal(path, pWebhook):
		switch {
		case !post:
			methodNotAllowed(ctx, vPost)
		case s.cfg.Webhooks == nil: // simulated payments
			writeAnswer(ctx, ansNotFound)
		default:
			s.webhook(ctx)
		}
		return routeWebhook
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
