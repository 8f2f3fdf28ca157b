package bearer

import (
	"bytes"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/flashgate/flashgate/gateway/jsonscan"
)

// The claims scanner (parseClaims here, the scanner in package jsonscan) is
// hand-written where encoding/json would do because a benchmark shows it
// matters: it read a token's payload in 0.07–0.27 µs with no allocation,
// encoding/json into golang-jwt's RegisteredClaims in 1.6–4.1 µs with 11
// (BenchmarkClaims, BenchmarkClaimsJSON: 12 to 49 times as long, five
// rounds on a shared 2-core VM). The fair queue's answers from the cache
// read the claims without a signature check (the first status poll, 409
// not_admitted: BenchmarkQueueStatusFirst 1.3–3.5 µs, BenchmarkNotAdmittedFirst
// 2.1–3.9 µs in the same rounds); encoding/json would add 66% to 215% to
// those paths, which run at a bare server's speed. Measured with the
// command at Verifier's top (verify.go).

// claims are the registered claims the gateway uses. sub points into
// scratch space of the caller's.
type claims struct {
	sub            []byte
	exp, nbf       int64 // unix seconds
	hasExp, hasNbf bool
	subBuf         [maxSubject * 2]byte
}

// Registered claim names, as golang-jwt's RegisteredClaims decodes them.
const (
	claimSub = iota
	claimExp
	claimNbf
	claimIat
	claimIss
	claimAud
	claimJti
	numClaims
)

var claimNames = [numClaims]string{"sub", "exp", "nbf", "iat", "iss", "aud", "jti"}

// parseClaims reads a JWT payload: a JSON object whose registered claims
// have the types golang-jwt requires (sub, iss, jti strings; exp, nbf, iat
// numbers; aud a string or an array of strings; any of them null) and
// whose other members are any valid JSON. It is stricter than
// encoding/json where encoding/json would guess: a registered name given
// twice, or spelled in another case (encoding/json matches names without
// case), or a sub that is not valid UTF-8, is rejected.
func parseClaims(b []byte, c *claims) (ok bool) {
	// subBuf is scratch: only the fields before it are reset.
	c.sub, c.exp, c.nbf, c.hasExp, c.hasNbf = nil, 0, 0, false, false
	p := jsonscan.New(b)
	p.Space()
	if !p.Eat('{') {
		return false
	}
	var seen [numClaims]bool
	p.Space()
	if p.Eat('}') {
		return p.End()
	}
	for {
		p.Space()
		var kbuf [16]byte
		key, ok := p.Str(kbuf[:0], len(kbuf))
		if !ok {
			return false
		}
		p.Space()
		if !p.Eat(':') {
			return false
		}
		p.Space()
		k := claimIndex(key)
		if k >= 0 {
			if seen[k] {
				return false
			}
			seen[k] = true
		}
		switch {
		case k == -2:
			return false
		case k == -1:
			if !p.Skip(0) {
				return false
			}
		case p.Null():
		case k == claimSub:
			s, ok := p.Str(c.subBuf[:0], len(c.subBuf))
			if !ok || s == nil || !utf8.Valid(s) {
				return false
			}
			c.sub = s
		case k == claimExp || k == claimNbf || k == claimIat:
			n, ok := seconds(&p)
			if !ok {
				return false
			}
			switch k {
			case claimExp:
				c.exp, c.hasExp = n, true
			case claimNbf:
				c.nbf, c.hasNbf = n, true
			}
		case k == claimAud:
			if !skipAudience(&p) {
				return false
			}
		default: // iss, jti
			if !p.SkipString() {
				return false
			}
		}
		p.Space()
		if p.Eat('}') {
			return p.End()
		}
		if !p.Eat(',') {
			return false
		}
	}
}

// claimIndex returns the registered claim key names, -1 for another name,
// or -2 for a name encoding/json would take for a registered one though
// it is spelled otherwise. key is nil when it did not fit the scratch
// buffer (longer than any name that folds onto a registered one).
func claimIndex(key []byte) int {
	if key == nil {
		return -1
	}
	switch string(key) {
	case "sub":
		return claimSub
	case "exp":
		return claimExp
	case "nbf":
		return claimNbf
	case "iat":
		return claimIat
	case "iss":
		return claimIss
	case "aud":
		return claimAud
	case "jti":
		return claimJti
	}
	for _, n := range claimNames {
		if bytes.EqualFold(key, []byte(n)) {
			return -2
		}
	}
	return -1
}

// skipAudience skips an aud value: a string or an array of strings.
func skipAudience(p *jsonscan.Scanner) bool {
	if !p.Eat('[') {
		return p.SkipString()
	}
	p.Space()
	if p.Eat(']') {
		return true
	}
	for {
		p.Space()
		if !p.SkipString() {
			return false
		}
		p.Space()
		if p.Eat(']') {
			return true
		}
		if !p.Eat(',') {
			return false
		}
	}
}

// maxSeconds bounds the times accepted (year 5138): beyond it a float64
// loses whole seconds, and golang-jwt's conversion to time.Time overflows.
const maxSeconds = 1 << 36

// seconds reads a NumericDate as golang-jwt does (seconds, fractions
// dropped) and refuses times outside ±maxSeconds.
func seconds(p *jsonscan.Scanner) (int64, bool) {
	t, ok := p.Number()
	if !ok {
		return 0, false
	}
	if n, ok := SmallInt(t); ok {
		return n, true
	}
	f, err := strconv.ParseFloat(string(t), 64)
	if err != nil || math.IsNaN(f) || f > maxSeconds || f < -maxSeconds {
		return 0, false
	}
	return int64(math.Trunc(f)), true
}

// SmallInt reads a number written as an integer of at most 11 digits
// within ±maxSeconds, as seconds would read it, without converting to
// float64 (every token's exp is one); ok is false for any other text.
func SmallInt(t []byte) (n int64, ok bool) {
	neg := len(t) > 0 && t[0] == '-'
	d := t
	if neg {
		d = t[1:]
	}
	if len(d) == 0 || len(d) > 11 {
		return 0, false
	}
	for _, c := range d {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if n > maxSeconds {
		return 0, false
	}
	if neg {
		n = -n
	}
	return n, true
}
