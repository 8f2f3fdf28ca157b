// Package bearer owns the check of buyer tokens: the shape of the
// Authorization header, the HS256 signature and the registered claims (read
// by package jsonscan), with no reflection and no allocation per token. It
// answers "which user, if any" and nothing else: it may not import the
// gateway's root, knows no sale, route or answer, and imports only the
// module's root (for what a user id is) and jsonscan.
package bearer

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"hash"
	"sync"
	"sync/atomic"

	"github.com/valyala/fasthttp"

	"github.com/flashgate/flashgate"
)

// maxTokenSize bounds the bearer tokens worth verifying.
const maxTokenSize = 4096

// maxSubject is the longest user id (the token's sub) accepted.
const maxSubject = flashgate.MaxUserID

// SigLen is the length of an HS256 signature in unpadded base64url.
const SigLen = 43

var scheme = []byte("bearer ")

// hAuthorization is the header of the bearer token. The gateway reads its
// request headers with PeekCanonical: the server normalizes header names
// as it parses them (Server never sets DisableHeaderNamesNormalizing), so
// a lookup by the canonical name finds any spelling a client sent, without
// normalizing the key again per request.
var hAuthorization = []byte(fasthttp.HeaderAuthorization)

// Token returns the request's bearer token if it has the shape of a
// JWT: three non-empty segments, the last one as long as an HS256
// signature in unpadded base64url.
// It checks nothing cryptographic: docs/api.md has the shape judged before the
// sale's cached state, the signature after it.
func Token(ctx *fasthttp.RequestCtx) ([]byte, bool) {
	h := ctx.Request.Header.PeekCanonical(hAuthorization)
	if len(h) <= len(scheme) ||
		string(h[:len(scheme)]) != "Bearer " && !bytes.EqualFold(h[:len(scheme)], scheme) {
		return nil, false
	}
	tok := bytes.TrimSpace(h[len(scheme):])
	if len(tok) <= SigLen+1 || len(tok) > maxTokenSize {
		return nil, false
	}
	// Exactly two dots, the last one followed by a signature segment of
	// HS256's length, and no segment empty: plausible. Each test is a
	// vectorized byte search over its own segment. The alphabet is left to
	// the decoder (a byte loop over the token costs as much as the rest of
	// a rejection).
	last := len(tok) - SigLen - 1
	if tok[last] != '.' || bytes.IndexByte(tok[last+1:], '.') >= 0 {
		return nil, false
	}
	first := bytes.IndexByte(tok[:last], '.')
	if first <= 0 || first+1 == last || bytes.IndexByte(tok[first+1:last], '.') >= 0 {
		return nil, false
	}
	return tok, true
}

// Verifier checks HS256 buyer tokens without reflection or per-token state:
// the HMAC's keyed state is computed once and pooled, the claims are read
// by a small JSON scanner, and the header segments already seen in a valid
// token are recognised by comparison. It is at least as strict as
// golang-jwt with HS256 only and exp required (the tests compare both):
// whatever it accepts, golang-jwt accepts with the same sub.
//
// It is hand-written where golang-jwt would do because a benchmark shows it
// matters: golang-jwt's check of the same token took 6 to 13 times as long
// (BenchmarkVerifyJWT 9.5–12.3 µs and 45 allocations, BenchmarkVerify
// 0.75–1.8 µs and one, five rounds on a shared 2-core VM), several times the
// gateway's whole share of an admitted purchase (BenchmarkPurchaseGateway,
// 2.0–5.0 µs in the same rounds). Measured with five runs of
// go test -run '^$' -bench 'Verify|Claims|PurchaseGateway$|First$' -benchtime 200000x ./gateway
type Verifier struct {
	macs sync.Pool // of *macState
	// headers are header segments of tokens that passed every check; a
	// token whose header is one of them skips decoding it. Filled once, in
	// order, never evicted: an issuer uses one or two.
	headers [4]atomic.Pointer[[]byte]
}

// macState is one HMAC-SHA256 keyed with the secret, with scratch space for
// the decoded payload and signature.
type macState struct {
	mac     hash.Hash
	sum     [sha256.Size]byte
	sig     [sha256.Size + 3]byte
	payload [maxTokenSize]byte
	claims  claims
}

// NewVerifier returns a Verifier of tokens signed with secret.
func NewVerifier(secret []byte) *Verifier {
	key := bytes.Clone(secret)
	v := &Verifier{}
	v.macs.New = func() any { return &macState{mac: hmac.New(sha256.New, key)} }
	return v
}

// Verify returns the token's sub if its signature and claims hold at now
// (unix nanoseconds) and the sub is a user id (flashgate.ValidUserID).
func (v *Verifier) Verify(tok []byte, now int64) (string, bool) {
	head, payload, sig, ok := segments(tok)
	if !ok {
		return "", false
	}
	m := v.macs.Get().(*macState)
	defer v.macs.Put(m)
	if base64.RawURLEncoding.DecodedLen(len(sig)) > len(m.sig) {
		return "", false
	}
	n, err := base64.RawURLEncoding.Decode(m.sig[:], sig)
	if err != nil || n != sha256.Size {
		return "", false
	}
	m.mac.Reset()
	m.mac.Write(tok[:len(head)+1+len(payload)])
	if !hmac.Equal(m.mac.Sum(m.sum[:0]), m.sig[:n]) {
		return "", false
	}
	// Only a signed header is worth decoding: without the secret nobody
	// makes the gateway parse JSON.
	known := v.knownHeader(head)
	if !known && !hs256Header(head) {
		return "", false
	}
	sub, ok := m.claimsAt(payload, now)
	if !ok {
		return "", false
	}
	if !known {
		v.remember(head)
	}
	return sub, true
}

// claimsAt decodes a token's payload segment and returns its sub if it is
// a user id (flashgate.ValidUserID), exp is present and the times hold at
// now (unix nanoseconds).
func (m *macState) claimsAt(payload []byte, now int64) (string, bool) {
	if base64.RawURLEncoding.DecodedLen(len(payload)) > len(m.payload) {
		return "", false
	}
	n, err := base64.RawURLEncoding.Decode(m.payload[:], payload)
	if err != nil {
		return "", false
	}
	c := &m.claims
	if !parseClaims(m.payload[:n], c) || !flashgate.ValidUserID(c.sub) || !c.hasExp {
		return "", false
	}
	// Whole seconds on both sides (nbf and exp are whole seconds): nbf in
	// nanoseconds would overflow int64 past the year 2262.
	sec := now / 1e9
	if sec >= c.exp || c.hasNbf && sec < c.nbf {
		return "", false
	}
	return string(c.sub), true
}

// Subject returns the sub of a token whose header is one a verified token
// had and whose claims hold at now (unix nanoseconds), WITHOUT checking its
// signature. Only the fair queue's answers use it (the gateway's queue_routes.go), and
// only together with a ticket whose MAC binds the sale and this user: the
// ticket, which the gateway gave to a verified request of the user, then
// vouches for the caller, and the answer is that ticket's own place. A
// token with a header never verified here is refused (the caller verifies
// it fully), so that without the secret nobody makes the gateway decode a
// header; the claims scanner is the one verify runs, fuzzed.
//
// It returns the token's exp (unix seconds) too.
func (v *Verifier) Subject(tok []byte, now int64) (sub string, exp int64, ok bool) {
	head, payload, _, ok := segments(tok)
	if !ok || !v.knownHeader(head) {
		return "", 0, false
	}
	m := v.macs.Get().(*macState)
	defer v.macs.Put(m)
	sub, ok = m.claimsAt(payload, now)
	return sub, m.claims.exp, ok
}

// Sig is the signature segment of a token of Bearer's shape.
func Sig(tok []byte) []byte { return tok[len(tok)-SigLen:] }

// segments splits a token into its three dot-separated segments.
func segments(tok []byte) (head, payload, sig []byte, ok bool) {
	i := bytes.IndexByte(tok, '.')
	if i < 0 {
		return nil, nil, nil, false
	}
	j := bytes.IndexByte(tok[i+1:], '.')
	if j < 0 {
		return nil, nil, nil, false
	}
	j += i + 1
	if bytes.IndexByte(tok[j+1:], '.') >= 0 {
		return nil, nil, nil, false
	}
	return tok[:i], tok[i+1 : j], tok[j+1:], true
}

func (v *Verifier) knownHeader(head []byte) bool {
	for i := range v.headers {
		p := v.headers[i].Load()
		if p == nil {
			return false
		}
		if bytes.Equal(*p, head) {
			return true
		}
	}
	return false
}

func (v *Verifier) remember(head []byte) {
	h := bytes.Clone(head)
	for i := range v.headers {
		if v.headers[i].CompareAndSwap(nil, &h) {
			return
		}
		if bytes.Equal(*v.headers[i].Load(), head) {
			return
		}
	}
}

// hs256Header reports whether a header segment decodes to a JSON object
// whose alg is "HS256", as golang-jwt reads it (this path allocates; it
// runs once per distinct header).
func hs256Header(seg []byte) bool {
	b, err := base64.RawURLEncoding.DecodeString(string(seg))
	if err != nil {
		return false
	}
	var h map[string]any
	if err := json.Unmarshal(b, &h); err != nil {
		return false
	}
	alg, ok := h["alg"].(string)
	return ok && alg == "HS256"
}
