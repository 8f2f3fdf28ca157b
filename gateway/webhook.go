package gateway

import (
	"context"

	"github.com/valyala/fasthttp"
)

var hStripeSignature = []byte("Stripe-Signature")

// webhook passes a payment provider's event to Config.Webhooks: 200 once it
// is stored (or was before), 400 bad_signature for a bad, stale or missing
// signature (the handler refuses and counts them all alike), 503 when the
// database cannot take it now (the provider delivers it again).
func (s *Server) webhook(ctx *fasthttp.RequestCtx) {
	sig := ctx.Request.Header.PeekBytes(hStripeSignature)
	wctx, cancel := context.WithTimeout(s.base, s.cfg.OrderTimeout)
	defer cancel()
	// The body is fasthttp's buffer, bounded by MaxBodySize; the handler
	// copies what it keeps.
	if err := s.cfg.Webhooks.Webhook(wctx, ctx.PostBody(), string(sig)); err != nil {
		s.writeError(ctx, err)
		return
	}
	ctx.Response.Header.SetContentTypeBytes(ctJSON)
	ctx.Response.Header.SetCanonical(hCacheControl, vNoStore)
	ctx.SetBodyString(`{"received":true}` + "\n")
}
