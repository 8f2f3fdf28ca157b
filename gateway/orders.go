package gateway

import (
	"context"

	"github.com/valyala/fasthttp"

	"github.com/flashgate/flashgate"
)

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
