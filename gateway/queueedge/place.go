package queueedge

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	mrand "math/rand/v2"
	"strconv"
	"time"

	"github.com/flashgate/flashgate"
)

// Queue states of docs/api.md.
const (
	qsPrequeue = "prequeue"
	qsWaiting  = "waiting"
	qsAdmitted = "admitted"
	qsBought   = "purchased"
	qsExpired  = "expired"
	qsClosed   = "closed"
	// qsReset is no state of the answer: the ticket's queue is gone
	// (409 queue_reset).
	qsReset = "queue_reset"
	// qsRestoring is no state of the answer either: the cache holds no
	// commitment for the sale (its hash was lost and the control plane has
	// not restored the queue yet), so no ticket can be judged; 503
	// unavailable, and the buyer retries with the same ticket.
	qsRestoring = "restoring"
)

// NoPlace reports whether p is an answer without a place (queue_reset or
// a queue being restored): such an answer reissues no ticket.
func (p *Place) NoPlace() bool { return p.state == qsReset || p.state == qsRestoring }

// Restoring reports whether p is the answer of a queue being restored (503
// unavailable; NoPlace's other answer is 409 queue_reset).
func (p *Place) Restoring() bool { return p.state == qsRestoring }

// Admitted reports whether p lets a purchase through to the reserve: the
// buyer is admitted, or bought through the ticket already (the reserve
// answers that).
func (p *Place) Admitted() bool { return p.state == qsAdmitted || p.state == qsBought }

// NeedUser reports whether Locate was given no user id and needed one.
func (p *Place) NeedUser() bool { return p.needUser }

// Place is where a ticket stands in the cached queue.
type Place struct {
	state    string
	position int64 // 0: not known yet
	ahead    int64
	eta      int64 // seconds; -1 unknown
	pollMS   int64
	// rankComputed: Locate computed the buyer's rank key (and stored it
	// in the ticket): the ticket's "k" form is worth issuing.
	rankComputed bool
	// needUser: Locate was given no user id and needed one to compute
	// the rank key; nothing else is set.
	needUser bool
	// order is the order a purchased ticket bought.
	order []byte
}

// Locate judges a ticket against the cached queue q of c's sale: no
// Redis. closed is the sale's cached state, startsAt its catalog start (nil:
// none), clock read only for a pre-start place. For a pre-start entry it
// uses the rank key the ticket carries, when it carries one of the
// revealed seed, and otherwise computes it and stores it in tk; with user
// "" (not read) it then answers NeedUser instead.
func Locate(c *Cache, q *View, closed bool, startsAt *time.Time, clock flashgate.Clock, tk *Ticket, user string) Place {
	p := Place{eta: -1}
	switch {
	case closed:
		p.state = qsClosed
	case tk.queue != q.qtag && q.SeedSHA == "":
		p.state = qsRestoring
		return p
	case tk.queue != q.qtag:
		p.state = qsReset
		return p
	case tk.purchased:
		p.state, p.order = qsBought, tk.order
	case !q.Started || tk.kind == 'p' && q.Seed == nil:
		p.state = qsPrequeue
	case tk.kind == 'l':
		p.position = q.Prequeued + tk.n
		p.state = frontierState(p.position, q.Admitted, q.Expired)
	default:
		admitted, expired, ok := false, false, false
		if tk.hasRank && tk.tag == q.seedTag {
			admitted, expired, ok = q.judgeRank(tk.rank[:])
		}
		if !ok && user == "" {
			return Place{needUser: true}
		}
		if !ok {
			var h [sha256.Size]byte
			c.rankKey(q, user, &h)
			admitted, expired, _ = q.judgeRank(h[:])
			copy(tk.rank[:], h[:])
			tk.tag, tk.hasRank, p.rankComputed = q.seedTag, true, true
		}
		// The place among the pre-start entrants is estimated from the rank
		// key (uniform over the entrants); the threshold decides.
		est := 1 + int64(float64(binary.BigEndian.Uint64(tk.rank[:8]))/(1<<64)*float64(q.Prequeued))
		est = min(max(est, 1), max(q.Prequeued, 1))
		switch {
		case expired:
			p.state, p.position = qsExpired, min(est, q.Expired)
		case admitted:
			p.state, p.position = qsAdmitted, min(max(est, q.Expired+1), q.Admitted)
		default:
			p.state, p.position = qsWaiting, max(est, q.Admitted+1)
		}
	}
	if p.state == qsWaiting {
		p.ahead = max(p.position-q.Admitted-1, 0)
		if q.Rate > 0 {
			p.eta = (p.ahead + 1) * 60 / q.Rate
		}
	}
	p.pollMS = pollAfter(p, startsAt, clock)
	return p
}

// judgeRank compares a rank key, or a prefix of one, with the thresholds:
// admitted iff ≤ theta, expired iff ≤ etheta. ok is false when a prefix
// equals a threshold's and so cannot decide.
func (q *View) judgeRank(h []byte) (admitted, expired, ok bool) {
	if q.Admitted > 0 && q.HasThreshold {
		c := bytes.Compare(h, q.Threshold[:len(h)])
		if c == 0 && len(h) < sha256.Size {
			return false, false, false
		}
		admitted = c <= 0
	}
	if q.Expired > 0 && q.HasExpiredThreshold {
		c := bytes.Compare(h, q.ExpiredThreshold[:len(h)])
		if c == 0 && len(h) < sha256.Size {
			return false, false, false
		}
		expired = c <= 0
	}
	return admitted, expired, true
}

func frontierState(pos, k, e int64) string {
	switch {
	case pos <= e:
		return qsExpired
	case pos <= k:
		return qsAdmitted
	}
	return qsWaiting
}

// pollAfter spreads the polls: the further from the frontier (or the
// start), the longer, jittered by ±20%, and within 1–30 s.
func pollAfter(p Place, startsAt *time.Time, clock flashgate.Clock) int64 {
	ms := int64(0)
	switch p.state {
	case qsClosed, qsBought, qsExpired:
		return 0
	case qsAdmitted:
		ms = 5000
	case qsPrequeue:
		ms = 30000
		if startsAt != nil {
			ms = startsAt.Sub(clock.Now()).Milliseconds() / 3
		}
	default:
		if p.eta >= 0 {
			ms = p.eta * 1000 / 3
		} else {
			ms = 1000 + p.ahead*20
		}
	}
	// The jitter goes on before the bounds: 30 s jittered up would leave
	// the contract's 1–30 s (35.7 s was seen).
	ms += ms * int64(mrand.IntN(41)-20) / 100
	return min(max(ms, minPollMS), maxPollMS)
}

// minPollMS and maxPollMS bound poll_after_ms outside a final state
// (docs/api.md).
const (
	minPollMS = 1000
	maxPollMS = 30000
)

// AppendJSON appends the status JSON of p in q to b, without its closing
// brace (the entry's answer adds its ticket).
func (p *Place) AppendJSON(b []byte, q *View) []byte {
	b = append(b, `{"state":"`...)
	b = append(b, p.state...)
	b = append(b, `","position":`...)
	b = appendOptInt(b, p.position, p.position > 0)
	b = append(b, `,"ahead":`...)
	b = appendOptInt(b, p.ahead, p.position > 0)
	b = append(b, `,"admitted_position":`...)
	b = strconv.AppendInt(b, q.Admitted, 10)
	b = append(b, `,"eta_seconds":`...)
	b = appendOptInt(b, p.eta, p.eta >= 0)
	b = append(b, `,"poll_after_ms":`...)
	b = strconv.AppendInt(b, p.pollMS, 10)
	if len(p.order) > 0 {
		// An order id is ValidID's: nothing in it needs escaping.
		b = append(b, `,"order_id":"`...)
		b = append(b, p.order...)
		b = append(b, '"')
	}
	return b
}

// AppendNotAdmitted appends the body of 409 not_admitted at p in q to b.
func (p *Place) AppendNotAdmitted(b []byte, q *View) []byte {
	b = append(b, `{"error":"not_admitted","state":"`...)
	b = append(b, p.state...)
	b = append(b, `","position":`...)
	b = appendOptInt(b, p.position, p.position > 0)
	b = append(b, `,"admitted_position":`...)
	b = strconv.AppendInt(b, q.Admitted, 10)
	return append(b, '}')
}

func appendOptInt(b []byte, n int64, ok bool) []byte {
	if !ok {
		return append(b, "null"...)
	}
	return strconv.AppendInt(b, n, 10)
}
