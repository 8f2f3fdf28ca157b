package gateway

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"hash"
	mrand "math/rand/v2"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/jsonstr"
	"github.com/flashgate/flashgate/lua"
)

// The fair queue's edge (docs/api.md, "Fair queue"). Entering is one
// script call (lua.QueueEnter); every other answer — the status poll, the
// challenge, a not-admitted purchase — comes from the cached sale state:
// the leader publishes the admitted frontier as a threshold on the
// pre-start entrants' rank keys (q_theta) and a position (q_k), and a
// buyer's entry travels in a ticket the gateway signed (X-Queue-Ticket),
// so judging it takes two HMACs and no lookup. The reserve script checks
// admission again, atomically, from the ranks in Redis.

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
}

// hTicket is the header that carries a buyer's queue ticket.
var hTicket = []byte("X-Queue-Ticket")

// challengeTTL is how long a proof-of-work challenge may be solved and
// used.
const challengeTTL = 10 * time.Minute

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
			open: num(v[0]) == 1, started: num(v[1]) == 1, seedHex: str(2), seedSHA: str(3),
			pre: num(v[4]), late: num(v[5]), ranked: num(v[6]) == 1, k: num(v[7]), e: num(v[9]),
			rate: num(v[11]), maxnum: num(v[12]),
		}
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

// queueKeys are the gateway's keys for tickets and challenges, derived from
// Config.QueueSecret.
type queueKeys struct {
	ticket, pow []byte
	tickets     sync.Pool // of *macBuf keyed with ticket
}

// macBuf is a keyed HMAC with scratch space for its message and sum, pooled
// so that judging a ticket or a rank key allocates nothing.
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

func newQueueKeys(secret []byte) *queueKeys {
	derive := func(label string) []byte {
		m := hmac.New(sha256.New, secret)
		m.Write([]byte(label))
		return m.Sum(nil)
	}
	k := &queueKeys{ticket: derive("ticket"), pow: derive("pow")}
	k.tickets.New = func() any { return &macBuf{h: hmac.New(sha256.New, k.ticket)} }
	return k
}

// DeriveQueueSecret is the queue secret a gateway uses when
// Config.QueueSecret is empty: HMAC-SHA256(key = the JWT secret, message =
// "flashgate fair queue v1"). Every gateway of a deployment derives the
// same.
func DeriveQueueSecret(jwtSecret []byte) []byte {
	m := hmac.New(sha256.New, jwtSecret)
	m.Write([]byte("flashgate fair queue v1"))
	return m.Sum(nil)
}

// ticketMACLen is the bytes of HMAC a ticket carries, ticketMACB64 their
// length in unpadded base64url.
const (
	ticketMACLen = 16
	ticketMACB64 = 22
)

// appendTicket appends the ticket of user's entry in sale to b:
// "<entry>.<base64url HMAC(sale 0 user 0 entry)[:16]>".
func (k *queueKeys) appendTicket(b []byte, sale, user string, entry []byte) []byte {
	sum := k.ticketMAC(sale, user, entry)
	b = append(b, entry...)
	b = append(b, '.')
	return base64.RawURLEncoding.AppendEncode(b, sum[:ticketMACLen])
}

func (k *queueKeys) ticketMAC(sale, user string, entry []byte) [sha256.Size]byte {
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

// ticket is a verified entry: kind 'p' (before the start), 'l' (arrival
// n after it); purchased when the buyer bought through it. A pre-start
// entry may carry the buyer's rank key (hasRank: the "k" form, below).
type ticket struct {
	kind      byte
	n         int64
	purchased bool
	hasRank   bool
	// rank is the first rankLen bytes of the buyer's rank key under the
	// seed that tag names.
	rank [rankLen]byte
	tag  [seedTagLen]byte
}

// The "k" form of a pre-start entry, "k<base64url(seed tag ‖ rank key
// prefix)>", is issued once the seed is revealed (queueStatus and
// fairAdmit send it in X-Queue-Ticket), so that judging the ticket needs
// no rank HMAC: the ticket's MAC vouches for the rank key it carries. A
// prefix equal to a threshold's is judged from the full rank key.
const (
	rankLen      = 16
	seedTagLen   = 5
	rankEntryB64 = (rankLen + seedTagLen + 2) / 3 * 4 // 28: no padding at 21 bytes
)

// readTicket verifies a ticket for (sale, user).
func (k *queueKeys) readTicket(t []byte, sale, user string) (ticket, bool) {
	dot := bytes.LastIndexByte(t, '.')
	if dot < 1 || len(t)-dot-1 != ticketMACB64 {
		return ticket{}, false
	}
	entry := t[:dot]
	// The MAC is compared in its (canonical) base64url form: encoding the
	// computed one costs less than decoding the one sent.
	sum := k.ticketMAC(sale, user, entry)
	var mac [ticketMACB64]byte
	base64.RawURLEncoding.Encode(mac[:], sum[:ticketMACLen])
	if !hmac.Equal(t[dot+1:], mac[:]) {
		return ticket{}, false
	}
	var tk ticket
	if entry[0] == 'b' {
		tk.purchased = true
		entry = entry[1:]
	}
	switch {
	case len(entry) == 1 && entry[0] == 'p':
		tk.kind = 'p'
	case len(entry) == 1+rankEntryB64 && entry[0] == 'k':
		var raw [seedTagLen + rankLen]byte
		if n, err := base64.RawURLEncoding.Decode(raw[:], entry[1:]); err != nil || n != len(raw) {
			return ticket{}, false
		}
		tk.kind, tk.hasRank = 'p', true
		copy(tk.tag[:], raw[:seedTagLen])
		copy(tk.rank[:], raw[seedTagLen:])
	case len(entry) > 1 && entry[0] == 'l':
		n, err := strconv.ParseInt(string(entry[1:]), 10, 64)
		if err != nil || n < 1 {
			return ticket{}, false
		}
		tk.kind, tk.n = 'l', n
	default:
		return ticket{}, false
	}
	return tk, true
}

// appendEntry appends tk's entry in its canonical form ("k" for a
// pre-start entry with a rank key) to b.
func appendEntry(b []byte, tk *ticket) []byte {
	if tk.purchased {
		b = append(b, 'b')
	}
	switch {
	case tk.kind == 'l':
		b = append(b, 'l')
		return strconv.AppendInt(b, tk.n, 10)
	case tk.hasRank:
		var raw [seedTagLen + rankLen]byte
		copy(raw[:], tk.tag[:])
		copy(raw[seedTagLen:], tk.rank[:])
		b = append(b, 'k')
		return base64.RawURLEncoding.AppendEncode(b, raw[:])
	}
	return append(b, 'p')
}

// reissue sends the "k" form of tk in X-Queue-Ticket when locate has just
// computed its rank key (the request's ticket had none, or one of another
// seed).
func (s *Server) reissue(ctx *fasthttp.RequestCtx, e *sale, user string, tk *ticket, p *place) {
	if !p.rankComputed {
		return
	}
	var eb [2 + rankEntryB64]byte
	var tb [2 + rankEntryB64 + 1 + 24]byte
	entry := appendEntry(eb[:0], tk)
	ctx.Response.Header.SetCanonical(hTicket, s.qkeys.appendTicket(tb[:0], e.id, user, entry))
}

// rankMacs pools HMACs keyed with one sale's seed.
type rankMacs struct {
	seed string
	pool sync.Pool
}

// fairCache is what a sale keeps for its fair queue between refreshes.
type fairCache struct {
	macs atomic.Pointer[rankMacs]
}

// rankKey computes flashgate.QueueRank for user, as bytes.
func (e *sale) rankKey(q *queueView, user string, out *[sha256.Size]byte) {
	rm := e.fair.macs.Load()
	if rm == nil || rm.seed != q.seedHex {
		seed := q.seed
		rm = &rankMacs{seed: q.seedHex}
		rm.pool.New = func() any { return &macBuf{h: hmac.New(sha256.New, seed)} }
		e.fair.macs.Store(rm)
	}
	m := rm.pool.Get().(*macBuf)
	*out = m.mac('/', e.id, user)
	rm.pool.Put(m)
}

// Queue states of docs/api.md.
const (
	qsPrequeue = "prequeue"
	qsWaiting  = "waiting"
	qsAdmitted = "admitted"
	qsBought   = "purchased"
	qsExpired  = "expired"
	qsClosed   = "closed"
)

// place is where a ticket stands in the cached queue.
type place struct {
	state    string
	position int64 // 0: not known yet
	ahead    int64
	eta      int64 // seconds; -1 unknown
	pollMS   int64
	// rankComputed: locate computed the buyer's rank key (and stored it
	// in the ticket): the ticket's "k" form is worth issuing.
	rankComputed bool
}

// locate judges a ticket against the cached queue: no Redis. For a
// pre-start entry it uses the rank key the ticket carries, when it carries
// one of the revealed seed, and otherwise computes it and stores it in tk.
func (s *Server) locate(e *sale, st *saleState, q *queueView, tk *ticket, user string) place {
	p := place{eta: -1}
	switch {
	case st.closed:
		p.state = qsClosed
	case tk.purchased:
		p.state = qsBought
	case !q.started || tk.kind == 'p' && q.seed == nil:
		p.state = qsPrequeue
	case tk.kind == 'l':
		p.position = q.pre + tk.n
		p.state = frontierState(p.position, q.k, q.e)
	default:
		admitted, expired, ok := false, false, false
		if tk.hasRank && tk.tag == q.seedTag {
			admitted, expired, ok = q.judgeRank(tk.rank[:])
		}
		if !ok {
			var h [sha256.Size]byte
			e.rankKey(q, user, &h)
			admitted, expired, _ = q.judgeRank(h[:])
			copy(tk.rank[:], h[:])
			tk.tag, tk.hasRank, p.rankComputed = q.seedTag, true, true
		}
		// The place among the pre-start entrants is estimated from the rank
		// key (uniform over the entrants); the threshold decides.
		est := 1 + int64(float64(binary.BigEndian.Uint64(tk.rank[:8]))/(1<<64)*float64(q.pre))
		est = min(max(est, 1), max(q.pre, 1))
		switch {
		case expired:
			p.state, p.position = qsExpired, min(est, q.e)
		case admitted:
			p.state, p.position = qsAdmitted, min(max(est, q.e+1), q.k)
		default:
			p.state, p.position = qsWaiting, max(est, q.k+1)
		}
	}
	if p.state == qsWaiting {
		p.ahead = max(p.position-q.k-1, 0)
		if q.rate > 0 {
			p.eta = (p.ahead + 1) * 60 / q.rate
		}
	}
	p.pollMS = s.pollAfter(p, st, e)
	return p
}

// judgeRank compares a rank key, or a prefix of one, with the thresholds:
// admitted iff ≤ theta, expired iff ≤ etheta. ok is false when a prefix
// equals a threshold's and so cannot decide.
func (q *queueView) judgeRank(h []byte) (admitted, expired, ok bool) {
	if q.k > 0 && q.hasTheta {
		c := bytes.Compare(h, q.theta[:len(h)])
		if c == 0 && len(h) < sha256.Size {
			return false, false, false
		}
		admitted = c <= 0
	}
	if q.e > 0 && q.hasETheta {
		c := bytes.Compare(h, q.etheta[:len(h)])
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
// start), the longer, within 1–30 s, and jittered by ±20%.
func (s *Server) pollAfter(p place, st *saleState, e *sale) int64 {
	ms := int64(0)
	switch p.state {
	case qsClosed, qsBought, qsExpired:
		return 0
	case qsAdmitted:
		ms = 5000
	case qsPrequeue:
		ms = 30000
		if m := e.meta.Load(); m != nil && m.sale.StartsAt != nil {
			ms = m.sale.StartsAt.Sub(s.clock.Now()).Milliseconds() / 3
		}
	default:
		if p.eta >= 0 {
			ms = p.eta * 1000 / 3
		} else {
			ms = 1000 + p.ahead*20
		}
	}
	ms = min(max(ms, 1000), 30000)
	return ms + ms*int64(mrand.IntN(41)-20)/100
}

// appendPlace appends the status JSON of p to b.
func appendPlace(b []byte, p place, q *queueView) []byte {
	b = append(b, `{"state":"`...)
	b = append(b, p.state...)
	b = append(b, `","position":`...)
	b = appendOptInt(b, p.position, p.position > 0)
	b = append(b, `,"ahead":`...)
	b = appendOptInt(b, p.ahead, p.position > 0)
	b = append(b, `,"admitted_position":`...)
	b = strconv.AppendInt(b, q.k, 10)
	b = append(b, `,"eta_seconds":`...)
	b = appendOptInt(b, p.eta, p.eta >= 0)
	b = append(b, `,"poll_after_ms":`...)
	return strconv.AppendInt(b, p.pollMS, 10)
}

func appendOptInt(b []byte, n int64, ok bool) []byte {
	if !ok {
		return append(b, "null"...)
	}
	return strconv.AppendInt(b, n, 10)
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

// routeQueue serves /api/sales/{id}/queue and /api/sales/{id}/challenge;
// ok is false for another path.
func (s *Server) routeQueue(ctx *fasthttp.RequestCtx, rest []byte, get, post bool) (route int, ok bool) {
	switch {
	case bytes.HasSuffix(rest, sQueue):
		id := rest[:len(rest)-len(sQueue)]
		if !flashgate.ValidID(id) {
			writeAnswer(ctx, ansNotFound)
			return routeOther, true
		}
		switch {
		case get:
			s.queueStatus(ctx, id)
		case post:
			s.queueEnter(ctx, id)
		default:
			methodNotAllowed(ctx, vGetPost)
		}
		return routeQueue, true
	case bytes.HasSuffix(rest, sChallenge):
		id := rest[:len(rest)-len(sChallenge)]
		if !flashgate.ValidID(id) {
			writeAnswer(ctx, ansNotFound)
			return routeOther, true
		}
		if !get {
			methodNotAllowed(ctx, vGet)
		} else {
			s.challenge(ctx, id)
		}
		return routeChallenge, true
	}
	return 0, false
}

var (
	sQueue     = []byte("/queue")
	sChallenge = []byte("/challenge")
	vGetPost   = []byte("GET, HEAD, POST")
)

// queueSale looks a fair sale up for a queue route and answers the request
// itself (and returns nil) when the sale has no fair queue to use.
func (s *Server) queueSale(ctx *fasthttp.RequestCtx, id []byte) (*sale, *saleState, *queueView) {
	e := s.lookup(id)
	st := e.state.Load()
	switch v := judge(st, 0); {
	case v == verdictUnavailable, v == verdictNotFound:
		s.rejectLocal(ctx, e, v)
		return nil, nil, nil
	case !e.fairSale():
		writeAnswer(ctx, ansNotFound)
		return nil, nil, nil
	}
	q := st.fairQueue()
	if q == nil {
		writeAnswer(ctx, ansUnavail)
		return nil, nil, nil
	}
	return e, st, q
}

// queueStatus answers GET /api/sales/{id}/queue from the cache.
func (s *Server) queueStatus(ctx *fasthttp.RequestCtx, id []byte) {
	user, ok := s.authenticate(ctx)
	if !ok {
		writeAnswer(ctx, ansUnauth)
		return
	}
	e, st, q := s.queueSale(ctx, id)
	if e == nil {
		return
	}
	tk, ok := s.qkeys.readTicket(ctx.Request.Header.PeekBytes(hTicket), e.id, user)
	if !ok {
		// No (valid) ticket: the buyer has not entered, as far as this
		// request shows; entering again is idempotent and returns it.
		writeAnswer(ctx, ansNotFound)
		return
	}
	p := s.locate(e, st, q, &tk, user)
	writeJSONHead(ctx, fasthttp.StatusOK)
	s.reissue(ctx, e, user, &tk, &p)
	b := ctx.Response.SwapBody(nil)
	b = append(appendPlace(b[:0], p, q), '}')
	ctx.Response.SwapBody(b)
}

// powPayload is the decoded body of an ALTCHA solution.
type powPayload struct {
	Algorithm string `json:"algorithm"`
	Challenge string `json:"challenge"`
	Number    int64  `json:"number"`
	Salt      string `json:"salt"`
	Signature string `json:"signature"`
}

// errPoW is a missing, malformed, expired or wrong proof of work.
var errPoW = &flashgate.FieldError{Field: "payload", Reason: "no valid proof-of-work solution"}

// verifyPoW checks an ALTCHA payload for sale at now with one hash and one
// HMAC; it returns the challenge and the solution's remaining life.
func (s *Server) verifyPoW(payload, sale string, now time.Time) (challenge string, ttl time.Duration, err error) {
	raw, err := base64.StdEncoding.DecodeString(payload)
	if err != nil {
		return "", 0, errPoW
	}
	var p powPayload
	if err := json.Unmarshal(raw, &p); err != nil || p.Algorithm != "SHA-256" || p.Number < 0 {
		return "", 0, errPoW
	}
	_, query, _ := stringsCut(p.Salt, '?')
	params, err := url.ParseQuery(query)
	if err != nil || params.Get("sale") != sale {
		return "", 0, errPoW
	}
	exp, err := strconv.ParseInt(params.Get("expires"), 10, 64)
	if err != nil {
		return "", 0, errPoW
	}
	ttl = time.Unix(exp, 0).Sub(now)
	if ttl <= 0 {
		return "", 0, errPoW
	}
	sum := sha256.Sum256([]byte(p.Salt + strconv.FormatInt(p.Number, 10)))
	if hex.EncodeToString(sum[:]) != p.Challenge {
		return "", 0, errPoW
	}
	m := hmac.New(sha256.New, s.qkeys.pow)
	m.Write([]byte(p.Challenge))
	want := hex.EncodeToString(m.Sum(nil))
	if !hmac.Equal([]byte(want), []byte(p.Signature)) {
		return "", 0, errPoW
	}
	return p.Challenge, ttl, nil
}

func stringsCut(s string, sep byte) (before, after string, found bool) {
	if i := bytes.IndexByte([]byte(s), sep); i >= 0 {
		return s[:i], s[i+1:], true
	}
	return s, "", false
}

// queueEnter serves POST /api/sales/{id}/queue: one script call.
func (s *Server) queueEnter(ctx *fasthttp.RequestCtx, id []byte) {
	user, ok := s.authenticate(ctx)
	if !ok {
		writeAnswer(ctx, ansUnauth)
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
	if !q.open {
		s.writeError(ctx, flashgate.ErrNotStarted)
		return
	}
	now := s.clock.Now()
	if !s.allowUser(user, now) {
		writeAnswer(ctx, ansRateLimit)
		ctx.Response.Header.SetCanonical(hRetryAfter, s.userRetryAfter)
		return
	}
	var body struct {
		Payload string `json:"payload"`
	}
	if b := bytes.TrimSpace(ctx.PostBody()); len(b) > 0 {
		if err := json.Unmarshal(b, &body); err != nil {
			writeAnswer(ctx, ansBadRequest)
			return
		}
	}
	challenge, ttl := "none", time.Duration(0)
	if m := e.meta.Load(); q.maxnum > 0 || m.sale.ChallengeMaxNumber > 0 {
		var err error
		if challenge, ttl, err = s.verifyPoW(body.Payload, e.id, now); err != nil {
			s.writeError(ctx, err)
			return
		}
	}
	rctx, cancel := context.WithTimeout(s.base, s.cfg.RedisTimeout)
	defer cancel()
	v, err := lua.QueueEnter.Run(rctx, s.cfg.Primary, lua.QueueEnterKeys(e.id, challenge), user, max(ttl.Milliseconds(), 0)).Slice()
	if err != nil || len(v) != 3 {
		s.logUnavailable(err)
		writeAnswer(ctx, ansUnavail)
		return
	}
	code, _ := v[0].(int64)
	entry, _ := v[1].(string)
	fresh, _ := v[2].(int64)
	switch code {
	case lua.EnterOK:
	case lua.EnterNoSale:
		writeAnswer(ctx, ansNotFound)
		return
	case lua.EnterNotOpen:
		s.writeError(ctx, flashgate.ErrNotStarted)
		return
	case lua.EnterClosed:
		s.writeError(ctx, flashgate.ErrClosed)
		return
	case lua.EnterSolveUsed:
		s.writeError(ctx, &flashgate.FieldError{Field: "payload", Reason: "solution used already"})
		return
	default:
		writeAnswer(ctx, ansNotFound)
		return
	}
	var tk ticket
	switch {
	case entry == "p" || len(entry) > 1 && entry[0] == 'r':
		tk.kind, entry = 'p', "p"
	case len(entry) > 1 && entry[0] == 'l':
		tk.kind = 'l'
		tk.n, _ = strconv.ParseInt(entry[1:], 10, 64)
	}
	if fresh == 1 && !q.started && tk.kind == 'l' {
		// The cache has not seen the start yet; the entry has.
		q = &queueView{started: true, pre: q.pre, k: q.k, e: q.e, rate: q.rate}
	}
	p := s.locate(e, st, q, &tk, user)
	status := fasthttp.StatusOK
	if fresh == 1 {
		status = fasthttp.StatusCreated
	}
	writeJSONHead(ctx, status)
	b := appendPlace(nil, p, q)
	b = append(b, `,"ticket":"`...)
	if tk.hasRank {
		entry = string(appendEntry(nil, &tk))
	}
	b = s.qkeys.appendTicket(b, e.id, user, []byte(entry))
	b = append(b, `"}`...)
	ctx.Response.SetBodyRaw(b)
}

// challenge answers GET /api/sales/{id}/challenge with a fresh ALTCHA
// challenge for the sale at the cached maxnumber.
func (s *Server) challenge(ctx *fasthttp.RequestCtx, id []byte) {
	e, st, q := s.queueSale(ctx, id)
	if e == nil {
		return
	}
	if st.closed {
		s.rejectLocal(ctx, e, verdictClosed)
		return
	}
	// The salt and the secret number come from crypto/rand: a number a
	// client could predict would cost it no work.
	var rnd [20]byte
	_, _ = rand.Read(rnd[:])
	maxnum := max(q.maxnum, 0)
	number := int64(binary.BigEndian.Uint64(rnd[12:]) % uint64(maxnum+1))
	salt := hex.EncodeToString(rnd[:12]) + "?expires=" + strconv.FormatInt(s.clock.Now().Add(challengeTTL).Unix(), 10) + "&sale=" + e.id
	sum := sha256.Sum256([]byte(salt + strconv.FormatInt(number, 10)))
	chal := hex.EncodeToString(sum[:])
	m := hmac.New(sha256.New, s.qkeys.pow)
	m.Write([]byte(chal))
	b := make([]byte, 0, 256)
	b = append(b, `{"algorithm":"SHA-256","challenge":"`...)
	b = append(b, chal...)
	b = append(b, `","maxnumber":`...)
	b = strconv.AppendInt(b, maxnum, 10)
	b = append(b, `,"salt":`...)
	b = jsonstr.Append(b, salt)
	b = append(b, `,"signature":"`...)
	b = hex.AppendEncode(b, m.Sum(nil))
	b = append(b, `"}`...)
	writeJSONHead(ctx, fasthttp.StatusOK)
	ctx.Response.SetBodyRaw(b)
}

// fairAdmit judges a purchase in a fair queue from the cache: true lets it
// through to the reserve (which checks again); false has answered 409
// not_admitted with the buyer's position, or closed.
func (s *Server) fairAdmit(ctx *fasthttp.RequestCtx, e *sale, st *saleState, q *queueView, user string) bool {
	tk, ok := s.qkeys.readTicket(ctx.Request.Header.PeekBytes(hTicket), e.id, user)
	if !ok {
		s.m.decision(ctx, decNotAdmitted)
		e.rejected.Add(1)
		writeAnswer(ctx, ansNotAdmitted)
		return false
	}
	p := s.locate(e, st, q, &tk, user)
	if p.state == qsAdmitted || p.state == qsBought {
		e.admitted.Add(1)
		return true
	}
	s.m.decision(ctx, decNotAdmitted)
	e.rejected.Add(1)
	writeJSONHead(ctx, fasthttp.StatusConflict)
	s.reissue(ctx, e, user, &tk, &p)
	b := ctx.Response.SwapBody(nil)
	b = append(b[:0], `{"error":"not_admitted","state":"`...)
	b = append(b, p.state...)
	b = append(b, `","position":`...)
	b = appendOptInt(b, p.position, p.position > 0)
	b = append(b, `,"admitted_position":`...)
	b = strconv.AppendInt(b, q.k, 10)
	ctx.Response.SwapBody(append(b, '}'))
	return false
}

// setBoughtTicket gives a buyer who reserved through a ticket its
// purchased form, so that their status answers "purchased".
func (s *Server) setBoughtTicket(ctx *fasthttp.RequestCtx, e *sale, user string) {
	t := ctx.Request.Header.PeekBytes(hTicket)
	tk, ok := s.qkeys.readTicket(t, e.id, user)
	if !ok || tk.purchased {
		return
	}
	entry := t[:bytes.LastIndexByte(t, '.')]
	var buf [64]byte
	b := append(buf[:0], 'b')
	b = append(b, entry...)
	ctx.Response.Header.SetCanonical(hTicket, s.qkeys.appendTicket(nil, e.id, user, b))
}

var ansNotAdmitted = answerFor(flashgate.ErrNotAdmitted)

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
