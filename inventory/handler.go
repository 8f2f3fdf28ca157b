package inventory

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"log/slog"

	"github.com/valyala/fasthttp"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/jsonstr"
)

// MaxBodySize is the largest request body the handler reads; larger bodies
// are answered 413 too_large. Servers should also set
// fasthttp.Server.MaxRequestBodySize to it, with ServerErrorHandler, so that
// a large body is refused before it is read.
const MaxBodySize = 4 << 10

// The split-mode routes NewHandler serves and Client calls.
const (
	PathReserve = "/v1/reserve"
	PathRelease = "/v1/release"
	PathHealthz = "/healthz"
	PathReadyz  = "/readyz"
)

var (
	contentJSON   = []byte("application/json")
	bodyOK        = []byte(`{"status":"ok"}`)
	bodyReady     = []byte(flashgate.ReadyBody)
	bodyReleasedT = []byte(`{"released":true}`)
	bodyReleasedF = []byte(`{"released":false}`)
)

// reserveRequest is the body of POST /v1/reserve. OrderID, when set, is
// the order id the caller minted (Service.ReserveOrder).
type reserveRequest struct {
	OrderID  string `json:"order_id"`
	SaleID   string `json:"sale_id"`
	UserID   string `json:"user_id"`
	Quantity int64  `json:"quantity"`
	Variant  string `json:"variant,omitempty"` // "" for a sale of one stock
}

// HandlerConfig configures NewHandler. The zero value works.
type HandlerConfig struct {
	// Logger receives panics and readiness failures. Nil: discarded.
	Logger *slog.Logger
	// Token, when set, is the bearer token every /v1/ call must carry,
	// compared in constant time; a call without it is 401 unauthorized.
	// The health routes stay open. Empty: none (any caller that reaches
	// the listener may reserve, so keep it on a private network).
	Token string
}

// NewHandler serves s over HTTP for split deployments:
//
//	POST /v1/reserve {"sale_id","user_id","quantity"[,"order_id"]} → 200 {"order_id"}
//	POST /v1/release  a flashgate.Order                → 200 {"released":bool}
//	GET  /healthz → 200;  GET /readyz → 200 {"status":"ready"}, or 503 when Redis does not answer
//
// Errors are {"error":code} with the status of flashgate.ErrorStatus, plus
// "order_id" for already_purchased; internal error text never leaves.
// Unknown paths are 404 not_found, wrong methods 405 method_not_allowed.
func NewHandler(s *Service, cfg HandlerConfig) fasthttp.RequestHandler {
	h := &handler{s: s, log: cfg.Logger}
	if h.log == nil {
		h.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Token != "" {
		h.auth = []byte("Bearer " + cfg.Token)
	}
	return h.serve
}

type handler struct {
	s    *Service
	log  *slog.Logger
	auth []byte // the whole Authorization value /v1/ calls need; nil = none
}

// authorized reports whether the request may call /v1/ routes.
func (h *handler) authorized(ctx *fasthttp.RequestCtx) bool {
	if h.auth == nil {
		return true
	}
	got := ctx.Request.Header.Peek(fasthttp.HeaderAuthorization)
	return subtle.ConstantTimeCompare(got, h.auth) == 1
}

func (h *handler) serve(ctx *fasthttp.RequestCtx) {
	defer func() {
		if r := recover(); r != nil {
			h.log.Error("inventory handler panic", "panic", r, "path", string(ctx.Path()))
			ctx.ResetBody()
			writeError(ctx, errors.New("panic"))
		}
	}()
	path := ctx.Path()
	if bytes.HasPrefix(path, []byte("/v1/")) && !h.authorized(ctx) {
		writeError(ctx, flashgate.ErrUnauthorized)
		return
	}
	switch string(path) {
	case PathReserve:
		if !h.method(ctx, fasthttp.MethodPost) {
			return
		}
		h.reserve(ctx)
	case PathRelease:
		if !h.method(ctx, fasthttp.MethodPost) {
			return
		}
		h.release(ctx)
	case PathHealthz:
		if !h.method(ctx, fasthttp.MethodGet) {
			return
		}
		writeJSON(ctx, fasthttp.StatusOK, bodyOK)
	case PathReadyz:
		if !h.method(ctx, fasthttp.MethodGet) {
			return
		}
		if err := h.s.Ping(ctx); err != nil {
			h.log.Warn("not ready", "err", err)
			writeError(ctx, flashgate.ErrUnavailable)
			return
		}
		writeJSON(ctx, fasthttp.StatusOK, bodyReady)
	default:
		writeError(ctx, flashgate.ErrNotFound)
	}
}

// method answers 405 and returns false unless the request uses m (or HEAD
// for a GET route).
func (h *handler) method(ctx *fasthttp.RequestCtx, m string) bool {
	got := ctx.Method()
	if string(got) == m || m == fasthttp.MethodGet && ctx.IsHead() {
		return true
	}
	ctx.Response.Header.Set(fasthttp.HeaderAllow, m)
	writeError(ctx, flashgate.ErrMethodNotAllowed)
	return false
}

// body returns the request body, or answers 413 and returns false.
func body(ctx *fasthttp.RequestCtx) ([]byte, bool) {
	if ctx.Request.Header.ContentLength() > MaxBodySize {
		writeError(ctx, flashgate.ErrTooLarge)
		return nil, false
	}
	b := ctx.PostBody()
	if len(b) > MaxBodySize {
		writeError(ctx, flashgate.ErrTooLarge)
		return nil, false
	}
	return b, true
}

func (h *handler) reserve(ctx *fasthttp.RequestCtx) {
	b, ok := body(ctx)
	if !ok {
		return
	}
	var req reserveRequest
	if err := json.Unmarshal(b, &req); err != nil {
		writeError(ctx, flashgate.ErrBadRequest)
		return
	}
	// The Redis deadline is the client's read timeout (docs/design.md, house style 7). The
	// request context ends when the server starts shutting down: a call
	// in flight then must still finish and answer, not fail with the
	// shutdown's cancellation (a graceful shutdown waits for it).
	rctx := context.WithoutCancel(ctx)
	var orderID string
	var err error
	if req.OrderID != "" {
		orderID, err = h.s.ReserveOrder(rctx, req.OrderID, req.SaleID, req.UserID, req.Variant, req.Quantity)
	} else {
		orderID, err = h.s.Reserve(rctx, req.SaleID, req.UserID, req.Variant, req.Quantity)
	}
	if err != nil {
		h.logError("reserve", err)
		writeError(ctx, err)
		return
	}
	var arr [96]byte
	buf := append(arr[:0], `{"order_id":`...)
	buf = jsonstr.Append(buf, orderID)
	buf = append(buf, '}')
	writeJSON(ctx, fasthttp.StatusOK, buf)
}

func (h *handler) release(ctx *fasthttp.RequestCtx) {
	b, ok := body(ctx)
	if !ok {
		return
	}
	var o flashgate.Order
	if err := json.Unmarshal(b, &o); err != nil {
		writeError(ctx, flashgate.ErrBadRequest)
		return
	}
	released, err := h.s.Release(context.WithoutCancel(ctx), o) // see reserve
	if err != nil {
		h.logError("release", err)
		writeError(ctx, err)
		return
	}
	if released {
		writeJSON(ctx, fasthttp.StatusOK, bodyReleasedT)
	} else {
		writeJSON(ctx, fasthttp.StatusOK, bodyReleasedF)
	}
}

// logError logs failures that are the server's, not the caller's.
func (h *handler) logError(op string, err error) {
	status, _ := flashgate.ErrorStatus(err)
	if status >= 500 {
		h.log.Warn("inventory call failed", "op", op, "err", err)
	}
}

// ServerErrorHandler is a fasthttp.Server.ErrorHandler answering in the
// handler's vocabulary: 413 too_large for a body over the server's
// MaxRequestBodySize, 400 bad_request for other unreadable requests.
func ServerErrorHandler(ctx *fasthttp.RequestCtx, err error) {
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		writeError(ctx, flashgate.ErrTooLarge)
		return
	}
	writeError(ctx, flashgate.ErrBadRequest)
}

// writeError answers err's status and {"error":code}, adding the live
// order id to already_purchased, and "paused":true to a reserve refused
// for a paused sale (flashgate.ErrPaused: it took nothing).
func writeError(ctx *fasthttp.RequestCtx, err error) {
	status, code := flashgate.ErrorStatus(err)
	var arr [128]byte
	buf := append(arr[:0], `{"error":"`...)
	buf = append(buf, code...) // codes are plain ASCII words
	buf = append(buf, '"')
	var pe *flashgate.PurchasedError
	if errors.As(err, &pe) {
		buf = append(buf, `,"order_id":`...)
		buf = jsonstr.Append(buf, pe.OrderID)
	}
	if errors.Is(err, flashgate.ErrPaused) {
		buf = append(buf, `,"paused":true`...)
	}
	buf = append(buf, '}')
	if status == fasthttp.StatusServiceUnavailable {
		ctx.Response.Header.Set(fasthttp.HeaderRetryAfter, "1")
	}
	writeJSON(ctx, status, buf)
}

func writeJSON(ctx *fasthttp.RequestCtx, status int, b []byte) {
	ctx.SetStatusCode(status)
	ctx.SetContentTypeBytes(contentJSON)
	ctx.SetBody(b)
}
