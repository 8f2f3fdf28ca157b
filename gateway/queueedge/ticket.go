package queueedge

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"hash"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/dchest/siphash"
	"github.com/valyala/fasthttp"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/fairqueue"
	"github.com/flashgate/flashgate/gateway/bearer"
)

// Tickets are hand-written here, in three forms, because a benchmark shows
// each matters on the waiting crowd's status poll (gateway/queue_bench_test.go,
// 12 alternating rounds on a shared 2-core machine, medians of the per-round
// ratios): the short form "<entry>.<user MAC>" is the ticket itself; the "k"
// entry, which carries the rank key, answers in 0.69× the time of an entry
// whose rank key must be computed (BenchmarkQueueStatusShort against
// BenchmarkQueueStatusFirst; fastest runs 1,715 and 2,481 ns); the bound form,
// judged by one SipHash without reading the token's claims, in 0.46× the time
// of the short form of the same ticket (BenchmarkQueueStatus against
// BenchmarkQueueStatusShort; fastest runs 667 and 1,715 ns). Their format
// rests on fairqueue's rank key; their MACs on Config.QueueSecret.

// Keys are the gateway's keys for tickets and challenges, derived from
// its queue secret (gateway.Config.QueueSecret).
type Keys struct {
	ticket, token, pow []byte
	tickets            sync.Pool // of *macBuf keyed with ticket
}

// macBuf is a keyed HMAC-SHA256 with scratch space for its message and
// sum, pooled so that judging a ticket or a rank key allocates nothing.
type macBuf struct {
	h   hash.Hash
	msg []byte
	sum [sha256.Size]byte
}

// mac returns the HMAC of parts joined by sep (sep < 0: none).
func (m *macBuf) mac(sep int, parts ...string) [sha256.Size]byte {
	m.msg = m.msg[:0]
	for i, p := range parts {
		if i > 0 && sep >= 0 {
			m.msg = append(m.msg, byte(sep))
		}
		m.msg = append(m.msg, p...)
	}
	m.h.Reset()
	m.h.Write(m.msg)
	m.h.Sum(m.sum[:0])
	return m.sum
}

// hmacSum returns HMAC-SHA256(key, msg): how the queue's keys are derived.
func hmacSum(key []byte, msg string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(msg))
	return m.Sum(nil)
}

// NewKeys derives the keys of tickets and challenges from secret.
func NewKeys(secret []byte) *Keys {
	k := &Keys{ticket: hmacSum(secret, "ticket"), token: hmacSum(secret, "ticket token"), pow: hmacSum(secret, "pow")}
	k.tickets.New = func() any { return &macBuf{h: hmac.New(sha256.New, k.ticket)} }
	return k
}

// DeriveSecret is the queue secret a gateway uses when
// gateway.Config.QueueSecret is empty: HMAC-SHA256(key = the JWT secret, message =
// "flashgate fair queue v1"). Every gateway of a deployment derives the
// same.
func DeriveSecret(jwtSecret []byte) []byte {
	return hmacSum(jwtSecret, "flashgate fair queue v1")
}

// ticketMACLen is the bytes of HMAC a ticket carries, ticketMACB64 their
// length in unpadded base64url.
const (
	ticketMACLen = 16
	ticketMACB64 = 22
)

// AppendTicket appends the ticket of user's entry in sale to b:
// "<entry>.<base64url HMAC(sale 0 user 0 entry)[:16]>".
func (k *Keys) AppendTicket(b []byte, sale, user string, entry []byte) []byte {
	sum := k.ticketMAC(sale, user, entry)
	b = append(b, entry...)
	b = append(b, '.')
	return base64.RawURLEncoding.AppendEncode(b, sum[:ticketMACLen])
}

func (k *Keys) ticketMAC(sale, user string, entry []byte) [sha256.Size]byte {
	m := k.tickets.Get().(*macBuf)
	m.msg = append(append(append(append(m.msg[:0], sale...), 0), user...), 0)
	m.msg = append(m.msg, entry...)
	m.h.Reset()
	m.h.Write(m.msg)
	m.h.Sum(m.sum[:0])
	sum := m.sum
	k.tickets.Put(m)
	return sum
}

// The bound form of a ticket, "<entry>.<user MAC>.<exp>.<token MAC>",
// also names one token: the token MAC is SipHash-2-4 with its 128-bit
// output (key: the first 16 bytes of the sale's token key) of
// sig[:boundSigLen] entry "." exp, over the token's signature segment and
// its exp claim (unix seconds, decimal); the sale's token key is
// HMAC-SHA256(token key, sale id). The status poll and the not-admitted
// answer issue it to a request whose ticket they judged by its user MAC;
// from then on, with that token, the ticket is judged without reading the
// token's claims (readBound): the token is the one whose claims named the
// ticket's user, and its exp is in the ticket. With any other token it is
// judged by its user MAC, as a short ticket. The waiting crowd's answers
// compute it for every request, and a bound ticket decides no more than
// which cached answer a request gets (an admitted place goes on to the
// signature check and the user MAC), so it is SipHash, a keyed PRF made
// for short messages: about 30 ns and a few hundred bytes of code, where
// keyed BLAKE3 took three times that and HMAC-SHA256 five.

// boundSigLen is how much of the token's signature segment a bound ticket
// names: 132 bits, which tell one token from another (binding decides
// nothing else: any token with the ticket's own user MAC gets the same
// place).
const boundSigLen = 22

// saleTokenKey is the SipHash key of the token MACs of sale id: the first
// 16 bytes of HMAC-SHA256(token key, id). Cache.Init stores it.
func (k *Keys) saleTokenKey(id string) [2]uint64 {
	sum := hmacSum(k.token, id)
	return [2]uint64{binary.LittleEndian.Uint64(sum), binary.LittleEndian.Uint64(sum[8:])}
}

// tokenMAC is the token MAC of a bound ticket of c's sale, in base64url.
func (c *Cache) tokenMAC(sig, entry, exp []byte) [ticketMACB64]byte {
	// A well-formed message is at most boundSigLen+maxEntryLen+1+20
	// bytes: it stays on the stack.
	var buf [boundSigLen + maxEntryLen + 1 + 20]byte
	msg := append(append(buf[:0], sig[:boundSigLen]...), entry...)
	msg = append(append(msg, '.'), exp...)
	lo, hi := siphash.Hash128(c.tokenKey[0], c.tokenKey[1], msg)
	var sum [ticketMACLen]byte
	binary.LittleEndian.PutUint64(sum[:], lo)
	binary.LittleEndian.PutUint64(sum[8:], hi)
	var mac [ticketMACB64]byte
	base64.RawURLEncoding.Encode(mac[:], sum[:])
	return mac
}

// appendBound appends to b the bound form of a ticket whose entry and
// user MAC (base64url) are given, for the token with signature segment sig
// and exp.
func (k *Keys) appendBound(b []byte, c *Cache, entry, umac, sig []byte, exp int64) []byte {
	var eb [20]byte
	expB := strconv.AppendInt(eb[:0], exp, 10)
	tmac := c.tokenMAC(sig, entry, expB)
	b = append(append(append(b, entry...), '.'), umac...)
	b = append(append(append(b, '.'), expB...), '.')
	return append(b, tmac[:]...)
}

// ticketText is a ticket split into its parts, unverified: entry and
// user MAC; in the bound form also exp (and expAt, its value) and the
// token MAC.
type ticketText struct {
	entry, umac, exp, tmac []byte
	expAt                  int64
}

// ticketParts splits a ticket; ok is false for any shape but the short
// and the bound form.
func ticketParts(t []byte) (tt ticketText, ok bool) {
	dot := bytes.IndexByte(t, '.')
	if dot < 1 || len(t) < dot+1+ticketMACB64 {
		return ticketText{}, false
	}
	tt.entry, tt.umac = t[:dot], t[dot+1:dot+1+ticketMACB64]
	rest := t[dot+1+ticketMACB64:]
	if len(rest) == 0 {
		return tt, true
	}
	if rest[0] != '.' || len(rest) < 1+1+1+ticketMACB64 || rest[len(rest)-ticketMACB64-1] != '.' {
		return ticketText{}, false
	}
	tt.exp, tt.tmac = rest[1:len(rest)-ticketMACB64-1], rest[len(rest)-ticketMACB64:]
	if tt.expAt, ok = bearer.SmallInt(tt.exp); !ok || tt.expAt <= 0 || tt.exp[0] == '0' {
		return ticketText{}, false
	}
	return tt, true
}

// ReadBound verifies a bound ticket for the token whose signature segment
// is sig at now (unix seconds) in c's sale: its token MAC must name the
// sale, sig, entry and exp, and exp must not have passed. The caller still needs the
// user whenever judging the entry does (Place.NeedUser).
func (k *Keys) ReadBound(t, sig []byte, c *Cache, now int64) (Ticket, bool) {
	tt, ok := ticketParts(t)
	if !ok || tt.exp == nil || now >= tt.expAt {
		return Ticket{}, false
	}
	mac := c.tokenMAC(sig, tt.entry, tt.exp)
	if !hmac.Equal(tt.tmac, mac[:]) {
		return Ticket{}, false
	}
	return parseEntry(tt.entry)
}

// Ticket is a verified entry: kind 'p' (before the start), 'l' (arrival
// n after it); purchased when the buyer bought through it. A pre-start
// entry may carry the buyer's rank key (hasRank: the "k" form, below).
// queue names the queue it was given in (View.qtag); order is the
// order a purchased ticket bought (a slice of the ticket's text).
type Ticket struct {
	kind      byte
	n         int64
	purchased bool
	hasRank   bool
	queue     [TagLen]byte
	order     []byte
	// rank is the first rankLen bytes of the buyer's rank key under the
	// seed that tag names.
	rank [rankLen]byte
	tag  [seedTagLen]byte
}

// The "k" form of a pre-start entry, "k<base64url(seed tag ‖ rank key
// prefix)>", is issued once the seed is revealed (the status poll and a
// not-admitted purchase send it in X-Queue-Ticket), so that judging the
// ticket needs no rank HMAC: the ticket's MAC vouches for the rank key it
// carries. A prefix equal to a threshold's is judged from the full rank
// key.
const (
	rankLen      = 16
	seedTagLen   = 5
	rankEntryB64 = (rankLen + seedTagLen + 2) / 3 * 4 // 28: no padding at 21 bytes
)

// Every entry ends with ":<queue tag>", the first TagLen hex digits
// of the queue's seed_sha256 (the commitment published at the opening), so
// that the ticket's MACs cover the queue it was given in: a ticket of a
// queue that is gone (a lost Redis whose queue was not restored) is told
// apart from a forged one and answered 409 queue_reset, never a made-up
// place. A restored queue keeps its commitment, and so its tickets.
const TagLen = 8

// maxEntryLen is the longest entry: "b<order id>~", a "k" entry, and the
// queue tag.
const maxEntryLen = 1 + 64 + 1 + 1 + rankEntryB64 + 1 + TagLen

// ReadTicket verifies a ticket, short or bound, for (sale, user) by its
// user MAC.
func (k *Keys) ReadTicket(t []byte, sale, user string) (Ticket, bool) {
	tt, ok := ticketParts(t)
	if !ok {
		return Ticket{}, false
	}
	// The MAC is compared in its (canonical) base64url form: encoding the
	// computed one costs less than decoding the one sent.
	sum := k.ticketMAC(sale, user, tt.entry)
	var mac [ticketMACB64]byte
	base64.RawURLEncoding.Encode(mac[:], sum[:ticketMACLen])
	if !hmac.Equal(tt.umac, mac[:]) {
		return Ticket{}, false
	}
	return parseEntry(tt.entry)
}

// parseEntry reads a ticket's entry.
func parseEntry(entry []byte) (Ticket, bool) {
	var tk Ticket
	if len(entry) < 2+TagLen || entry[len(entry)-TagLen-1] != ':' {
		return Ticket{}, false
	}
	copy(tk.queue[:], entry[len(entry)-TagLen:])
	entry = entry[:len(entry)-TagLen-1]
	if entry[0] == 'b' {
		i := bytes.IndexByte(entry, '~')
		if i < 0 || !flashgate.ValidID(entry[1:i]) {
			return Ticket{}, false
		}
		tk.purchased, tk.order = true, entry[1:i]
		entry = entry[i+1:]
		if len(entry) == 0 {
			return Ticket{}, false
		}
	}
	switch {
	case len(entry) == 1 && entry[0] == 'p':
		tk.kind = 'p'
	case len(entry) == 1+rankEntryB64 && entry[0] == 'k':
		var raw [seedTagLen + rankLen]byte
		if n, err := base64.RawURLEncoding.Decode(raw[:], entry[1:]); err != nil || n != len(raw) {
			return Ticket{}, false
		}
		tk.kind, tk.hasRank = 'p', true
		copy(tk.tag[:], raw[:seedTagLen])
		copy(tk.rank[:], raw[seedTagLen:])
	case len(entry) > 1 && entry[0] == 'l':
		n, err := strconv.ParseInt(string(entry[1:]), 10, 64)
		if err != nil || n < 1 {
			return Ticket{}, false
		}
		tk.kind, tk.n = 'l', n
	default:
		return Ticket{}, false
	}
	return tk, true
}

// appendEntry appends tk's entry in its canonical form ("k" for a
// pre-start entry with a rank key) to b.
func appendEntry(b []byte, tk *Ticket) []byte {
	if tk.purchased {
		b = append(append(append(b, 'b'), tk.order...), '~')
	}
	switch {
	case tk.kind == 'l':
		b = append(b, 'l')
		b = strconv.AppendInt(b, tk.n, 10)
	case tk.hasRank:
		var raw [seedTagLen + rankLen]byte
		copy(raw[:], tk.tag[:])
		copy(raw[seedTagLen:], tk.rank[:])
		b = append(b, 'k')
		b = base64.RawURLEncoding.AppendEncode(b, raw[:])
	default:
		b = append(b, 'p')
	}
	return append(append(b, ':'), tk.queue[:]...)
}

// Reissue sends in X-Queue-Ticket the canonical ticket of tk for the
// request's token, when it differs from t, the ticket the request sent and
// that was judged by its user MAC: its "k" form once Locate has computed
// the rank key (t had none, or one of another seed), bound to the token
// whose signature segment is sig and exp claim exp. exp 0 (the token was
// verified, its claims not kept): the short form. Nothing is sent for a
// place without one (Place.NoPlace).
func (k *Keys) Reissue(ctx *fasthttp.RequestCtx, c *Cache, user string, t []byte, tk *Ticket, p *Place, sig []byte, exp int64) {
	if p.NoPlace() {
		return
	}
	sent, _ := ticketParts(t)
	entry, umac := sent.entry, sent.umac
	var eb [maxEntryLen]byte
	if p.rankComputed {
		entry = appendEntry(eb[:0], tk)
	}
	var mb [ticketMACB64]byte
	if !bytes.Equal(entry, sent.entry) {
		sum := k.ticketMAC(c.id, user, entry)
		base64.RawURLEncoding.Encode(mb[:], sum[:ticketMACLen])
		umac = mb[:]
	}
	var tb [maxEntryLen + 1 + ticketMACB64 + 1 + 20 + 1 + ticketMACB64]byte
	var out []byte
	if exp > 0 {
		out = k.appendBound(tb[:0], c, entry, umac, sig, exp)
	} else {
		out = append(append(append(tb[:0], entry...), '.'), umac...)
	}
	if !bytes.Equal(out, t) {
		ctx.Response.Header.SetCanonical(Header, out)
	}
}

// rankMacs pools fairqueue.Rankers keyed with one sale's seed.
type rankMacs struct {
	seed string
	pool sync.Pool
}

// Cache is what a sale keeps for its fair queue between refreshes. Init
// it before the sale is shared; it must not be copied after.
type Cache struct {
	id       string
	macs     atomic.Pointer[rankMacs]
	tokenKey [2]uint64 // the SipHash key of token MACs (saleTokenKey)
}

// Init readies c for sale id under k.
func (c *Cache) Init(k *Keys, id string) {
	c.id, c.tokenKey = id, k.saleTokenKey(id)
}

// rankKey computes user's rank key (fairqueue.Ranker) under q's seed.
func (c *Cache) rankKey(q *View, user string, out *[sha256.Size]byte) {
	rm := c.macs.Load()
	if rm == nil || rm.seed != q.SeedHex {
		seed := q.Seed
		rm = &rankMacs{seed: q.SeedHex}
		rm.pool.New = func() any { return fairqueue.NewRanker(seed) }
		c.macs.Store(rm)
	}
	r := rm.pool.Get().(*fairqueue.Ranker)
	r.Key(c.id, user, out)
	rm.pool.Put(r)
}

// SetBought gives a buyer who reserved order through the request's ticket
// its purchased form, "b<order>~<entry>", so that their status answers
// "purchased" with the order's id (whose own status tells whether it
// still holds the unit: docs/api.md).
func (k *Keys) SetBought(ctx *fasthttp.RequestCtx, sale, user, order string) {
	t := ctx.Request.Header.PeekCanonical(Header)
	tk, ok := k.ReadTicket(t, sale, user)
	if !ok || !flashgate.ValidID(order) {
		return
	}
	tk.purchased, tk.order = true, []byte(order)
	var buf [maxEntryLen]byte
	ctx.Response.Header.SetCanonical(Header, k.AppendTicket(nil, sale, user, appendEntry(buf[:0], &tk)))
}
