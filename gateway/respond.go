package gateway

import (
	"errors"

	"github.com/valyala/fasthttp"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/jsonstr"
)

// Precomputed header names, values and bodies: the hot path only copies
// them.
var (
	ctJSON        = []byte("application/json")
	ctHTML        = []byte("text/html; charset=utf-8")
	hCacheControl = []byte(fasthttp.HeaderCacheControl)
	hETag         = []byte("Etag") // fasthttp's canonical form of ETag
	hVary         = []byte(fasthttp.HeaderVary)
	hRetryAfter   = []byte(fasthttp.HeaderRetryAfter)
	hAllow        = []byte(fasthttp.HeaderAllow)
	hEncoding     = []byte(fasthttp.HeaderContentEncoding)
	vNoStore      = []byte("no-store")
	vAPICache     = []byte("public, max-age=1")
	vAcceptEnc    = []byte("Accept-Encoding")
	vGzip         = []byte("gzip")
	vOne          = []byte("1")
	vGet          = []byte("GET, HEAD")
	vPost         = []byte("POST")
	strGzip       = []byte("gzip")
	bodyOKText    = []byte("ok\n")
	bodyReady     = []byte(flashgate.ReadyBody)
)

// errBodies holds the constant body {"error":"<code>"} of every code in
// flashgate's error table, and of "internal". It is built once at package
// initialization and only read after.
var errBodies = func() map[string][]byte {
	m := map[string][]byte{}
	for _, err := range append(flashgate.Errors(), errInternal) {
		_, code := flashgate.ErrorStatus(err)
		m[code] = []byte(`{"error":"` + code + `"}`)
	}
	return m
}()

// errInternal stands for any error outside the vocabulary.
var errInternal = errors.New("gateway: internal")

// answer is the status and constant body an error is answered with.
type answer struct {
	status int
	body   []byte
}

// answerFor returns err's answer from flashgate.ErrorStatus.
func answerFor(err error) answer {
	status, code := flashgate.ErrorStatus(err)
	b, ok := errBodies[code]
	if !ok {
		status, b = fasthttp.StatusInternalServerError, errBodies["internal"]
	}
	return answer{status, b}
}

// The answers the gateway gives without asking another tier.
var (
	ansInternal   = answerFor(errInternal)
	ansNotFound   = answerFor(flashgate.ErrNotFound)
	ansUnauth     = answerFor(flashgate.ErrUnauthorized)
	ansTooLarge   = answerFor(flashgate.ErrTooLarge)
	ansBadRequest = answerFor(flashgate.ErrBadRequest)
	ansRateLimit  = answerFor(flashgate.ErrRateLimited)
	ansUnavail    = answerFor(flashgate.ErrUnavailable)
	ansNoMethod   = answerFor(flashgate.ErrMethodNotAllowed)
)

// writeAnswer answers a.
func writeAnswer(ctx *fasthttp.RequestCtx, a answer) {
	writeJSON(ctx, a.status, a.body)
}

// writeJSON answers status with a constant JSON body.
func writeJSON(ctx *fasthttp.RequestCtx, status int, body []byte) {
	ctx.Response.SetStatusCode(status)
	ctx.Response.Header.SetContentTypeBytes(ctJSON)
	ctx.Response.Header.SetCanonical(hCacheControl, vNoStore)
	ctx.Response.SetBodyRaw(body)
}

// writeError answers err with its status and code from flashgate.ErrorStatus;
// the error's text never reaches the client.
func (s *Server) writeError(ctx *fasthttp.RequestCtx, err error) {
	a := answerFor(err)
	if a.status == fasthttp.StatusInternalServerError {
		s.log.Error("gateway: request failed", "path", string(ctx.Path()), "err", err)
	}
	writeAnswer(ctx, a)
}

// appendOrderJSON appends the body of an order answer to b.
func appendOrderJSON(b []byte, o flashgate.Order) []byte {
	b = append(b, `{"order_id":`...)
	b = jsonstr.Append(b, o.ID)
	b = append(b, `,"sale_id":`...)
	b = jsonstr.Append(b, o.SaleID)
	b = append(b, `,"user_id":`...)
	b = jsonstr.Append(b, o.UserID)
	if o.Variant != "" {
		b = append(b, `,"variant":`...)
		b = jsonstr.Append(b, o.Variant)
	}
	b = append(b, `,"status":`...)
	b = jsonstr.Append(b, string(o.Status))
	if o.PaymentIntent != "" {
		b = append(b, `,"payment_intent":`...)
		b = jsonstr.Append(b, o.PaymentIntent)
	}
	if o.ClientSecret != "" {
		b = append(b, `,"client_secret":`...)
		b = jsonstr.Append(b, o.ClientSecret)
	}
	return append(b, '}')
}

// appendPurchasedJSON appends the 409 body naming the user's live order.
func appendPurchasedJSON(b []byte, orderID string) []byte {
	b = append(b, `{"error":"already_purchased","order_id":`...)
	b = jsonstr.Append(b, orderID)
	return append(b, '}')
}

// writeOrder answers status with o's JSON.
func writeOrder(ctx *fasthttp.RequestCtx, status int, o flashgate.Order) {
	writeJSONHead(ctx, status)
	b := ctx.Response.SwapBody(nil)
	ctx.Response.SwapBody(appendOrderJSON(b[:0], o))
}

// writePurchased answers 409 already_purchased naming orderID.
func writePurchased(ctx *fasthttp.RequestCtx, orderID string) {
	writeJSONHead(ctx, fasthttp.StatusConflict)
	b := ctx.Response.SwapBody(nil)
	ctx.Response.SwapBody(appendPurchasedJSON(b[:0], orderID))
}

// writeJSONHead sets the head of a JSON answer whose body the caller
// formats in the response's own body buffer (fasthttp pools it, so such an
// answer allocates nothing).
func writeJSONHead(ctx *fasthttp.RequestCtx, status int) {
	ctx.Response.SetStatusCode(status)
	ctx.Response.Header.SetContentTypeBytes(ctJSON)
	ctx.Response.Header.SetCanonical(hCacheControl, vNoStore)
}
