package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/fairqueue"
	"github.com/flashgate/flashgate/internal/jsonstr"
	"github.com/flashgate/flashgate/lua"
)

// The fair queue's edge (docs/api.md, "Fair queue"). Entering is one
// script call (lua.QueueEnter); every other answer — the status poll, the
// challenge, a not-admitted purchase — comes from the cached sale state:
// the leader publishes the admitted frontier as a threshold on the
// pre-start entrants' rank keys (queue_threshold) and a position (queue_admitted), and a
// buyer's entry travels in a ticket the gateway signed (X-Queue-Ticket),
// so judging it takes the ticket's HMAC (and the rank key's, until the
// ticket carries it) and no lookup. The reserve script checks admission
// again, atomically, from the ranks in Redis. Files: queue_ticket.go
// (tickets, rank keys), queue_place.go (where a ticket stands),
// queue_routes.go (the routes, the not-admitted answer), queue_pow.go
// (proof of work).

// queueView is one reading of a fair queue's fields; immutable.
type queueView struct {
	fairqueue.View
	// seedTag names the revealed seed in the rank tickets made from it:
	// the first bytes of its SHA-256.
	seedTag [seedTagLen]byte
	// qtag names the queue in every ticket: the first queueTagLen hex
	// digits of SeedSHA, the commitment published at the opening.
	qtag [queueTagLen]byte
}

// hTicket is the header that carries a buyer's queue ticket, canonical
// (see hAuthorization).
var hTicket = []byte("X-Queue-Ticket")

// queueReads adds the queue fields' HMGET of each fair sale of list to p.
func queueReads(ctx context.Context, p redis.Pipeliner, list []*sale) []*redis.SliceCmd {
	cmds := make([]*redis.SliceCmd, len(list))
	for i, e := range list {
		if m := e.meta.Load(); m != nil && m.sale.Fair() {
			cmds[i] = p.HMGet(ctx, lua.SaleKey(e.id), fairqueue.Fields...)
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
		v, ok := fairqueue.Read(c.Val())
		if !ok {
			continue
		}
		q := &queueView{View: v, qtag: queueTag(v.SeedSHA)}
		if q.Seed != nil {
			sum := sha256.Sum256(q.Seed)
			copy(q.seedTag[:], sum[:])
		}
		out[i].q = q
	}
}

// queueTag is the queue tag of the commitment seedSHA: its first
// queueTagLen characters, "0"-padded (a queue the cache has no commitment
// of has the tag "00000000").
func queueTag(seedSHA string) [queueTagLen]byte {
	var t [queueTagLen]byte
	for i := range t {
		t[i] = '0'
	}
	copy(t[:], seedSHA)
	return t
}

// fairQueue returns st's queue when the sale has a fair queue whose state
// is known, else nil.
func (st *saleState) fairQueue() *queueView {
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
// GET /api/sales/{id}: the seed's SHA-256 from the queue's opening, the
// seed itself from the start, the thresholds the buyer checks their rank
// key against.
func appendQueueJSON(b []byte, st *saleState, m *saleMeta) []byte {
	if !m.sale.Fair() {
		return b
	}
	b = append(b, `,"queue":{"mode":"fair","opens_at":`...)
	if t := m.sale.StartsAt; t != nil {
		b = append(b, '"')
		b = fairqueue.OpensAt(m.sale).UTC().AppendFormat(b, time.RFC3339)
		b = append(b, '"')
	} else {
		b = append(b, "null"...)
	}
	q := st.fairQueue()
	if q == nil {
		q = &queueView{}
	}
	str := func(b []byte, v string) []byte {
		if v == "" {
			return append(b, "null"...)
		}
		return jsonstr.Append(b, v)
	}
	hexOpt := func(b []byte, ok bool, v *[sha256.Size]byte) []byte {
		if !ok {
			return append(b, "null"...)
		}
		b = append(b, '"')
		b = hex.AppendEncode(b, v[:])
		return append(b, '"')
	}
	b = append(b, `,"open":`...)
	b = strconv.AppendBool(b, q.Open)
	b = append(b, `,"started":`...)
	b = strconv.AppendBool(b, q.Started)
	b = append(b, `,"entrants":`...)
	b = strconv.AppendInt(b, q.Prequeued+q.Late, 10)
	b = append(b, `,"prequeue_entrants":`...)
	b = strconv.AppendInt(b, q.Prequeued, 10)
	b = append(b, `,"admitted_position":`...)
	b = strconv.AppendInt(b, q.Admitted, 10)
	b = append(b, `,"expired_position":`...)
	b = strconv.AppendInt(b, q.Expired, 10)
	b = append(b, `,"threshold":`...)
	b = hexOpt(b, q.HasThreshold, &q.Threshold)
	b = append(b, `,"expired_threshold":`...)
	b = hexOpt(b, q.HasExpiredThreshold, &q.ExpiredThreshold)
	b = append(b, `,"rate_per_minute":`...)
	b = strconv.AppendInt(b, q.Rate, 10)
	b = append(b, `,"challenge_maxnumber":`...)
	b = strconv.AppendInt(b, q.MaxNumber, 10)
	b = append(b, `,"seed_sha256":`...)
	b = str(b, q.SeedSHA)
	b = append(b, `,"seed":`...)
	b = str(b, q.SeedHex)
	return append(b, '}')
}
