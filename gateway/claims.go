package gateway

import (
	"bytes"
	"math"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

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

// maxJSONDepth bounds the nesting of unknown claims' values.
const maxJSONDepth = 32

// parseClaims reads a JWT payload: a JSON object whose registered claims
// have the types golang-jwt requires (sub, iss, jti strings; exp, nbf, iat
// numbers; aud a string or an array of strings; any of them null) and
// whose other members are any valid JSON. It is stricter than
// encoding/json where encoding/json would guess: a registered name given
// twice, or spelled in another case (encoding/json matches names without
// case), or a sub that is not valid UTF-8, is rejected.
func parseClaims(b []byte, c *claims) (ok bool) {
	*c = claims{}
	p := scanner{b: b}
	p.ws()
	if !p.eat('{') {
		return false
	}
	var seen [numClaims]bool
	p.ws()
	if p.eat('}') {
		return p.end()
	}
	for {
		p.ws()
		var kbuf [16]byte
		key, ok := p.str(kbuf[:0], len(kbuf))
		if !ok {
			return false
		}
		p.ws()
		if !p.eat(':') {
			return false
		}
		p.ws()
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
			if !p.skip(0) {
				return false
			}
		case p.null():
		case k == claimSub:
			s, ok := p.str(c.subBuf[:0], len(c.subBuf))
			if !ok || s == nil || !utf8.Valid(s) {
				return false
			}
			c.sub = s
		case k == claimExp || k == claimNbf || k == claimIat:
			n, ok := p.seconds()
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
			if !p.skipAudience() {
				return false
			}
		default: // iss, jti
			if !p.skipString() {
				return false
			}
		}
		p.ws()
		if p.eat('}') {
			return p.end()
		}
		if !p.eat(',') {
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
	for i, n := range claimNames {
		if string(key) == n {
			return i
		}
	}
	for _, n := range claimNames {
		if bytes.EqualFold(key, []byte(n)) {
			return -2
		}
	}
	return -1
}

// scanner reads JSON from b at i.
type scanner struct {
	b []byte
	i int
}

func (p *scanner) peek() byte {
	if p.i < len(p.b) {
		return p.b[p.i]
	}
	return 0
}

func (p *scanner) eat(c byte) bool {
	if p.peek() == c && p.i < len(p.b) {
		p.i++
		return true
	}
	return false
}

func (p *scanner) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// end reports whether only white space is left.
func (p *scanner) end() bool {
	p.ws()
	return p.i == len(p.b)
}

func (p *scanner) null() bool {
	if bytes.HasPrefix(p.b[p.i:], []byte("null")) {
		p.i += 4
		return true
	}
	return false
}

func (p *scanner) skipString() bool {
	_, ok := p.str(nil, 0)
	return ok
}

// skipAudience skips an aud value: a string or an array of strings.
func (p *scanner) skipAudience() bool {
	if p.peek() != '[' {
		return p.skipString()
	}
	p.i++
	p.ws()
	if p.eat(']') {
		return true
	}
	for {
		p.ws()
		if !p.skipString() {
			return false
		}
		p.ws()
		if p.eat(']') {
			return true
		}
		if !p.eat(',') {
			return false
		}
	}
}

// str reads a JSON string, appending its decoded bytes to dst while they
// fit in limit; it returns a nil slice (and true) for a valid string that
// did not fit. With limit 0 it only checks the syntax.
func (p *scanner) str(dst []byte, limit int) ([]byte, bool) {
	if !p.eat('"') {
		return nil, false
	}
	fits := limit > 0
	add := func(b ...byte) {
		if fits && len(dst)+len(b) <= limit {
			dst = append(dst, b...)
		} else {
			fits = false
		}
	}
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			if !fits {
				return nil, true
			}
			if dst == nil {
				dst = []byte{}
			}
			return dst, true
		case c < 0x20:
			return nil, false
		case c != '\\':
			add(c)
			p.i++
			continue
		}
		// An escape.
		if p.i+1 >= len(p.b) {
			return nil, false
		}
		e := p.b[p.i+1]
		p.i += 2
		switch e {
		case '"', '\\', '/':
			add(e)
		case 'b':
			add('\b')
		case 'f':
			add('\f')
		case 'n':
			add('\n')
		case 'r':
			add('\r')
		case 't':
			add('\t')
		case 'u':
			r, ok := p.hex4()
			if !ok {
				return nil, false
			}
			if utf16.IsSurrogate(r) {
				// Only a valid pair makes a character; a lone surrogate
				// (which encoding/json turns into U+FFFD) is refused.
				if !bytes.HasPrefix(p.b[p.i:], []byte(`\u`)) {
					return nil, false
				}
				p.i += 2
				r2, ok := p.hex4()
				if !ok {
					return nil, false
				}
				if r = utf16.DecodeRune(r, r2); r == utf8.RuneError {
					return nil, false
				}
			}
			var buf [utf8.UTFMax]byte
			add(buf[:utf8.EncodeRune(buf[:], r)]...)
		default:
			return nil, false
		}
	}
	return nil, false
}

func (p *scanner) hex4() (rune, bool) {
	if p.i+4 > len(p.b) {
		return 0, false
	}
	var r rune
	for _, c := range p.b[p.i : p.i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	p.i += 4
	return r, true
}

// number reads a JSON number and returns its text.
func (p *scanner) number() ([]byte, bool) {
	start := p.i
	p.eat('-')
	switch {
	case p.eat('0'):
	case p.peek() >= '1' && p.peek() <= '9':
		p.digits()
	default:
		return nil, false
	}
	if p.eat('.') {
		if !p.digits() {
			return nil, false
		}
	}
	if c := p.peek(); c == 'e' || c == 'E' {
		p.i++
		if !p.eat('+') {
			p.eat('-')
		}
		if !p.digits() {
			return nil, false
		}
	}
	return p.b[start:p.i], true
}

func (p *scanner) digits() bool {
	start := p.i
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
	}
	return p.i > start
}

// maxSeconds bounds the times accepted (year 5138): beyond it a float64
// loses whole seconds, and golang-jwt's conversion to time.Time overflows.
const maxSeconds = 1 << 36

// seconds reads a NumericDate as golang-jwt does (seconds, fractions
// dropped) and refuses times outside ±maxSeconds.
func (p *scanner) seconds() (int64, bool) {
	t, ok := p.number()
	if !ok {
		return 0, false
	}
	if n, ok := smallInt(t); ok {
		return n, true
	}
	f, err := strconv.ParseFloat(string(t), 64)
	if err != nil || math.IsNaN(f) || f > maxSeconds || f < -maxSeconds {
		return 0, false
	}
	return int64(math.Trunc(f)), true
}

// skip checks and skips any JSON value.
func (p *scanner) skip(depth int) bool {
	if depth > maxJSONDepth {
		return false
	}
	switch c := p.peek(); {
	case c == '"':
		return p.skipString()
	case c == '{':
		p.i++
		p.ws()
		if p.eat('}') {
			return true
		}
		for {
			p.ws()
			if !p.skipString() {
				return false
			}
			p.ws()
			if !p.eat(':') {
				return false
			}
			p.ws()
			if !p.skip(depth + 1) {
				return false
			}
			p.ws()
			if p.eat('}') {
				return true
			}
			if !p.eat(',') {
				return false
			}
		}
	case c == '[':
		p.i++
		p.ws()
		if p.eat(']') {
			return true
		}
		for {
			p.ws()
			if !p.skip(depth + 1) {
				return false
			}
			p.ws()
			if p.eat(']') {
				return true
			}
			if !p.eat(',') {
				return false
			}
		}
	case c == 't':
		return p.literal("true")
	case c == 'f':
		return p.literal("false")
	case c == 'n':
		return p.null()
	default:
		_, ok := p.number()
		return ok
	}
}

func (p *scanner) literal(s string) bool {
	if bytes.HasPrefix(p.b[p.i:], []byte(s)) {
		p.i += len(s)
		return true
	}
	return false
}

// smallInt reads a number written as an integer of at most 11 digits
// within ±maxSeconds, as seconds would read it, without converting to
// float64 (every token's exp is one); ok is false for any other text.
func smallInt(t []byte) (n int64, ok bool) {
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
