// Package queueedge is the fair queue's edge in the gateway (docs/api.md,
// "Fair queue"): the cached reading of a queue (View), the tickets the
// gateway signs and judges (Keys, Ticket, the per-sale Cache), where a
// ticket stands (Place), the proof of work's challenges and solutions, and
// the entry script with its WAIT for replicas (Entrant).
//
// It owns the ticket's format and MACs, the queue's states and the bodies of
// its answers. It may not touch the gateway's root: not its sale cache, its
// router, its rate limits, its metrics or its error answers. The root reads
// the sale state, routes the request, and writes the status of an answer
// whose body this package formats; the one header set here is the queue's
// own, X-Queue-Ticket (Keys.Reissue, Keys.SetBought). Nothing here reads
// Redis but the entry (Entrant.Run).
package queueedge

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/fairqueue"
	"github.com/flashgate/flashgate/internal/jsonstr"
	"github.com/flashgate/flashgate/lua"
)

// The fair queue's edge (docs/api.md, "Fair queue"). Entering is one
// script call (lua.QueueEnter); every other answer — the status poll, the
// challenge, a not-admitted purchase — comes from the cached sale state:
// the leader publishes the admitted frontier as a threshold on the
// pre-start entrants' rank keys (queue_threshold) and a position
// (queue_admitted), and a buyer's entry travels in a ticket the gateway
// signed (X-Queue-Ticket), so judging it takes the ticket's HMAC (and the
// rank key's, until the ticket carries it) and no lookup. The reserve
// script checks admission again, atomically, from the ranks in Redis.
// Files: ticket.go (tickets, rank keys), place.go (where a ticket stands),
// pow.go (proof of work), wait.go (the entry and its WAIT); the routes are
// the gateway root's queue_routes.go.

// View is one reading of a fair queue's fields; immutable.
type View struct {
	fairqueue.View
	// seedTag names the revealed seed in the rank tickets made from it:
	// the first bytes of its SHA-256.
	seedTag [seedTagLen]byte
	// qtag names the queue in every ticket: the first TagLen hex digits
	// of SeedSHA, the commitment published at the opening.
	qtag [TagLen]byte
}

// Header is the header that carries a buyer's queue ticket, in fasthttp's
// canonical form.
var Header = []byte("X-Queue-Ticket")

// Read adds the queue fields' HMGET of sale id to p.
func Read(ctx context.Context, p redis.Pipeliner, id string) *redis.SliceCmd {
	return p.HMGet(ctx, lua.SaleKey(id), fairqueue.Fields...)
}

// Parse returns the view of the queue fields vals (Read's reply), or nil
// when they hold no queue.
func Parse(vals []any) *View {
	v, ok := fairqueue.Read(vals)
	if !ok {
		return nil
	}
	q := &View{View: v, qtag: Tag(v.SeedSHA)}
	if q.Seed != nil {
		sum := sha256.Sum256(q.Seed)
		copy(q.seedTag[:], sum[:])
	}
	return q
}

// Tag is the queue tag of the commitment seedSHA: its first TagLen
// characters, "0"-padded (a queue the cache has no commitment of has the
// tag "00000000").
func Tag(seedSHA string) [TagLen]byte {
	var t [TagLen]byte
	for i := range t {
		t[i] = '0'
	}
	copy(t[:], seedSHA)
	return t
}

// AppendJSON appends a fair sale's public queue figures to the body of
// GET /api/sales/{id}: the seed's SHA-256 from the queue's opening, the
// seed itself from the start, the thresholds the buyer checks their rank
// key against. q is the cached reading (nil: none yet); a sale without a
// fair queue appends nothing.
func AppendJSON(b []byte, q *View, sl *flashgate.Sale) []byte {
	if !sl.Fair() {
		return b
	}
	b = append(b, `,"queue":{"mode":"fair","opens_at":`...)
	if t := sl.StartsAt; t != nil {
		b = append(b, '"')
		b = fairqueue.OpensAt(*sl).UTC().AppendFormat(b, time.RFC3339)
		b = append(b, '"')
	} else {
		b = append(b, "null"...)
	}
	if q == nil {
		q = &View{}
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

// Entered returns the ticket of an entry into q the entry script answered
// with entry ("p" or "r…" before the start, "l<n>" for arrival n after
// it), and the view to place it in: when fresh (a new entry) saw the start
// that q has not seen yet, a started view with q's figures.
func Entered(q *View, entry string, fresh bool) (Ticket, *View) {
	tk := Ticket{queue: q.qtag} // the entry's queue: its commitment is the cache's (the caller checks)
	switch {
	case entry == "p" || len(entry) > 1 && entry[0] == 'r':
		tk.kind = 'p'
	case len(entry) > 1 && entry[0] == 'l':
		tk.kind = 'l'
		tk.n, _ = strconv.ParseInt(entry[1:], 10, 64)
	}
	if fresh && !q.Started && tk.kind == 'l' {
		// The cache has not seen the start yet; the entry has.
		q = &View{View: fairqueue.View{Started: true, Prequeued: q.Prequeued, Admitted: q.Admitted, Expired: q.Expired, Rate: q.Rate}, qtag: q.qtag}
	}
	return tk, q
}

// AppendEntered appends to b the ticket of tk, an entry of user in sale.
func (k *Keys) AppendEntered(b []byte, sale, user string, tk *Ticket) []byte {
	return k.AppendTicket(b, sale, user, appendEntry(nil, tk))
}
