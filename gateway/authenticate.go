package gateway

import (
	"github.com/valyala/fasthttp"

	"github.com/flashgate/flashgate/gateway/bearer"
)

// authenticate returns the user id of the request's bearer token, checking
// its shape, signature and claims.
func (s *Server) authenticate(ctx *fasthttp.RequestCtx) (string, bool) {
	tok, ok := bearer.Token(ctx)
	if !ok {
		return "", false
	}
	return s.jwt.Verify(tok, s.clock.Now().UnixNano())
}
