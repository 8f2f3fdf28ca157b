package gateway

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/gateway/queueedge"
)

// The fair queue in the sale cache: what the refresh reads of it, what a
// cached sale keeps for it (sale.fair, a queueedge.Cache) and the calls of
// package queueedge that need the cached sale.

// queueReads adds the queue fields' HMGET of each fair sale of list to p.
func queueReads(ctx context.Context, p redis.Pipeliner, list []*sale) []*redis.SliceCmd {
	cmds := make([]*redis.SliceCmd, len(list))
	for i, e := range list {
		if e.fairSale() {
			cmds[i] = queueedge.Read(ctx, p, e.id)
		}
	}
	return cmds
}

// applyQueue parses the queue fields read into each state.
func applyQueue(cmds []*redis.SliceCmd, out []*saleState) {
	for i, c := range cmds {
		if c == nil || !out[i].found {
			continue
		}
		if q := queueedge.Parse(c.Val()); q != nil {
			out[i].q = q
		}
	}
}

// fairQueue returns st's queue when the sale has a fair queue whose state
// is known, else nil.
func (st *saleState) fairQueue() *queueedge.View {
	if st == nil {
		return nil
	}
	return st.q
}

// fairSale reports whether the catalog says the sale has a fair queue.
func (e *sale) fairSale() bool {
	m := e.meta.Load()
	return m != nil && m.sale.Fair()
}

// appendQueueJSON appends a fair sale's public queue figures to the body of
// GET /api/sales/{id} (queueedge.AppendJSON).
func appendQueueJSON(b []byte, st *saleState, m *saleMeta) []byte {
	return queueedge.AppendJSON(b, st.fairQueue(), &m.sale)
}

// locate judges a ticket of e against its cached queue q
// (queueedge.Locate).
func (s *Server) locate(e *sale, st *saleState, q *queueedge.View, tk *queueedge.Ticket, user string) queueedge.Place {
	var startsAt *time.Time
	if m := e.meta.Load(); m != nil {
		startsAt = m.sale.StartsAt
	}
	return queueedge.Locate(&e.fair, q, st.closed, startsAt, s.clock, tk, user)
}

// powFloor is the proof of work's difficulty in force for e
// (queueedge.Floor).
func powFloor(e *sale, q *queueedge.View) int64 {
	var saleMax int64
	if m := e.meta.Load(); m != nil {
		saleMax = m.sale.ChallengeMaxNumber
	}
	return queueedge.Floor(q, saleMax)
}

// challenge answers GET /api/sales/{id}/challenge with a fresh ALTCHA
// challenge for the sale at the difficulty in force (powFloor), once the
// queue is open: a challenge fetched before could be solved before.
func (s *Server) challenge(ctx *fasthttp.RequestCtx, id []byte) {
	if s.drawing(id) {
		s.drawChallenge(ctx, id) // draw_routes.go
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
	b := s.qkeys.AppendChallenge(make([]byte, 0, 256), e.id, powFloor(e, q), s.clock.Now())
	writeJSONHead(ctx, fasthttp.StatusOK)
	ctx.Response.SetBodyRaw(b)
}

// setBoughtTicket gives a buyer who reserved order through a ticket its
// purchased form (queueedge.Keys.SetBought).
func (s *Server) setBoughtTicket(ctx *fasthttp.RequestCtx, e *sale, user, order string) {
	s.qkeys.SetBought(ctx, e.id, user, order)
}

// DeriveQueueSecret is the queue secret a gateway uses when
// Config.QueueSecret is empty (queueedge.DeriveSecret): every gateway of a
// deployment derives the same.
func DeriveQueueSecret(jwtSecret []byte) []byte {
	return queueedge.DeriveSecret(jwtSecret)
}
