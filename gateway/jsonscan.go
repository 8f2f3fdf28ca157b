package gateway

import (
	"bytes"
	"math"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/flashgate/flashgate"
)

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
		// A run of plain bytes is appended at once.
		run := p.i
		for run < len(p.b) && p.b[run] >= 0x20 && p.b[run] != '"' && p.b[run] != '\\' {
			run++
		}
		if run > p.i {
			add(p.b[p.i:run]...)
			p.i = run
			continue
		}
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

// purchaseKeyLen bounds the purchase body's member names as they are
// decoded: the longest known one, "quantity", fits.
const purchaseKeyLen = 16

// parsePurchase reads the optional purchase body {"quantity":n,"variant":"id"}:
// n a whole number ≥ 1 (default 1), id a variant id (flashgate.ValidVariantID),
// either of them absent or null. The variant is decoded into vbuf and
// returned as a slice of it (nil when the body names none), so the parse
// allocates nothing. It is stricter than encoding/json where that one would
// guess: a member given twice, or named in another case, is refused, as is
// any other member, anything after the object, or a body that is not an
// object (null among them, which encoding/json would read as {}).
func parsePurchase(body []byte, vbuf *[flashgate.MaxVariantIDLen]byte) (qty int64, variant []byte, ok bool) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return 1, nil, true
	}
	p := scanner{b: body}
	if !p.eat('{') {
		return 0, nil, false
	}
	qty = 1
	var seenQty, seenVariant bool
	p.ws()
	if p.eat('}') {
		return qty, nil, p.end()
	}
	for {
		p.ws()
		var kbuf [purchaseKeyLen]byte
		key, ok := p.str(kbuf[:0], len(kbuf))
		if !ok {
			return 0, nil, false
		}
		p.ws()
		if !p.eat(':') {
			return 0, nil, false
		}
		p.ws()
		switch string(key) {
		case "quantity":
			if seenQty {
				return 0, nil, false
			}
			seenQty = true
			if p.null() {
				break
			}
			if qty, ok = p.quantity(); !ok {
				return 0, nil, false
			}
		case "variant":
			if seenVariant {
				return 0, nil, false
			}
			seenVariant = true
			if p.null() {
				break
			}
			v, ok := p.str(vbuf[:0], len(vbuf))
			if !ok || !flashgate.ValidVariantID(v) {
				return 0, nil, false
			}
			variant = v
		default:
			return 0, nil, false
		}
		p.ws()
		if p.eat('}') {
			if !p.end() {
				return 0, nil, false
			}
			return qty, variant, true
		}
		if !p.eat(',') {
			return 0, nil, false
		}
	}
}

// quantity reads a JSON number that is a whole number in 1..MaxInt64,
// written as one (no fraction or exponent, as encoding/json's int64 wants).
func (p *scanner) quantity() (int64, bool) {
	num, ok := p.number()
	if !ok || len(num) == 0 || num[0] < '1' || num[0] > '9' {
		return 0, false
	}
	var n int64
	for _, c := range num {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := int64(c - '0')
		if n > (math.MaxInt64-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}
