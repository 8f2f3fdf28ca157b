package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/jsonstr"
	"github.com/flashgate/flashgate/lua"
)

// The fair queue's edge (docs/api.md, "Fair queue"). Entering is one
// script call (lua.QueueEnter); every other answer — the status poll, the
// challenge, a not-admitted purchase — comes from the cached sale state:
// the leader publishes the admitted frontier as a threshold on the
// pre-start entrants' rank keys (q_theta) and a position (q_k), and a
// buyer's entry travels in a ticket the gateway signed (X-Queue-Ticket),
// so judging it takes the ticket's HMAC (and the rank key's, until the
// ticket carries it) and no lookup. The reserve script checks admission
// again, atomically, from the ranks in Redis. Files: queue_ticket.go
// (tickets, rank keys), queue_place.go (where a ticket stands),
// queue_routes.go (the routes, the not-admitted answer), queue_pow.go
// (proof of work).

// queueFields are the sale hash fields a fair sale's refresh reads.
var queueFields = []string{
	lua.FieldQOpen, lua.FieldQStarted, lua.FieldQSeed, lua.FieldQSeedSHA, lua.FieldQPre, lua.FieldQLate,
	lua.FieldQRanked, lua.FieldQAdmitted, lua.FieldQTheta, lua.FieldQExpired, lua.FieldQETheta,
	lua.FieldQRate, lua.FieldQMaxNumber,
}

// queueView is one reading of a fair queue's fields; immutable.
type queueView struct {
	open, started, ranked bool
	seed                  []byte // revealed at the start; nil before
	seedHex, seedSHA      string
	pre, late, k, e       int64
	rate, maxnum          int64
	theta, etheta         [sha256.Size]byte
	hasTheta, hasETheta   bool
	// seedTag names the revealed seed in the rank tickets made from it:
	// the first bytes of its SHA-256.
	seedTag [seedTagLen]byte
	// qtag names the queue in every ticket: the first queueTagLen hex
	// digits of seedSHA, the commitment published at the opening.
	qtag [queueTagLen]byte
}

// hTicket is the header that carries a buyer's queue ticket, canonical
// (see hAuthorization).
var hTicket = []byte("X-Queue-Ticket")

// challengeTTL is how long a proof-of-work challenge may be solved and
// used: minutes, not a whole pre-queue, so that work done early cannot be
// hoarded for the opening's rush or outlive a raised difficulty for long.
const challengeTTL = 5 * time.Minute

// queueReads adds the queue fields' HMGET of each fair sale of list to p.
func queueReads(ctx context.Context, p redis.Pipeliner, list []*sale) []*redis.SliceCmd {
	cmds := make([]*redis.SliceCmd, len(list))
	for i, e := range list {
		if m := e.meta.Load(); m != nil && m.sale.Fair() {
			cmds[i] = p.HMGet(ctx, lua.SaleKey(e.id), queueFields...)
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
		v := c.Val()
		if len(v) != len(queueFields) {
			continue
		}
		str := func(i int) string { s, _ := v[i].(string); return s }
		q := &queueView{
			open: lua.Int(v[0]) == 1, started: lua.Int(v[1]) == 1, seedHex: str(2), seedSHA: str(3),
			pre: lua.Int(v[4]), late: lua.Int(v[5]), ranked: lua.Int(v[6]) == 1, k: lua.Int(v[7]), e: lua.Int(v[9]),
			rate: lua.Int(v[11]), maxnum: lua.Int(v[12]),
		}
		q.qtag = queueTag(q.seedSHA)
		if b, err := hex.DecodeString(q.seedHex); err == nil && len(b) == 32 && q.started {
			q.seed = b
			sum := sha256.Sum256(b)
			copy(q.seedTag[:], sum[:])
		} else {
			q.seedHex = ""
		}
		if b, err := hex.DecodeString(str(8)); err == nil && len(b) == sha256.Size {
			copy(q.theta[:], b)
			q.hasTheta = true
		}
		if b, err := hex.DecodeString(str(10)); err == nil && len(b) == sha256.Size {
			copy(q.etheta[:], b)
			q.hasETheta = true
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
		b = t.Add(-time.Duration(m.sale.Prequeue())*time.Second).UTC().AppendFormat(b, time.RFC3339)
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
	b = strconv.AppendBool(b, q.open)
	b = append(b, `,"started":`...)
	b = strconv.AppendBool(b, q.started)
	b = append(b, `,"entrants":`...)
	b = strconv.AppendInt(b, q.pre+q.late, 10)
	b = append(b, `,"prequeue_entrants":`...)
	b = strconv.AppendInt(b, q.pre, 10)
	b = append(b, `,"admitted_position":`...)
	b = strconv.AppendInt(b, q.k, 10)
	b = append(b, `,"expired_position":`...)
	b = strconv.AppendInt(b, q.e, 10)
	b = append(b, `,"threshold":`...)
	b = hexOpt(b, q.hasTheta, &q.theta)
	b = append(b, `,"expired_threshold":`...)
	b = hexOpt(b, q.hasETheta, &q.etheta)
	b = append(b, `,"rate_per_minute":`...)
	b = strconv.AppendInt(b, q.rate, 10)
	b = append(b, `,"challenge_maxnumber":`...)
	b = strconv.AppendInt(b, q.maxnum, 10)
	b = append(b, `,"seed_sha256":`...)
	b = str(b, q.seedSHA)
	b = append(b, `,"seed":`...)
	b = str(b, q.seedHex)
	return append(b, '}')
}
