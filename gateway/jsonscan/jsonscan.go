// Package jsonscan owns the gateway's small JSON scanner: it reads what the
// hot paths must read (a token's claims, a purchase body) without
// reflection or allocation, checking the syntax as strictly as
// encoding/json. It knows no claim, member or request, and may not import
// the gateway's root or any other package of the module.
package jsonscan

import (
	"bytes"
	"unicode/utf16"
	"unicode/utf8"
)

// Scanner reads JSON from b at i.
type Scanner struct {
	b []byte
	i int
}

// New returns a Scanner at the start of b.
func New(b []byte) Scanner { return Scanner{b: b} }

// Pos returns how far the scanner has read.
func (p *Scanner) Pos() int { return p.i }

// MaxDepth bounds the nesting of the values Skip skips.
const MaxDepth = 32

// Peek returns the byte at the scanner, 0 at the end.
func (p *Scanner) Peek() byte {
	if p.i < len(p.b) {
		return p.b[p.i]
	}
	return 0
}

// Eat consumes c if it is the next byte and reports whether it was.
func (p *Scanner) Eat(c byte) bool {
	if p.Peek() == c && p.i < len(p.b) {
		p.i++
		return true
	}
	return false
}

// Space skips white space.
func (p *Scanner) Space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// End reports whether only white space is left.
func (p *Scanner) End() bool {
	p.Space()
	return p.i == len(p.b)
}

// Null consumes a null literal and reports whether there was one.
func (p *Scanner) Null() bool {
	if bytes.HasPrefix(p.b[p.i:], []byte("null")) {
		p.i += 4
		return true
	}
	return false
}

// SkipString checks and skips a JSON string.
func (p *Scanner) SkipString() bool {
	_, ok := p.Str(nil, 0)
	return ok
}

// Str reads a JSON string, appending its decoded bytes to dst while they
// fit in limit; it returns a nil slice (and true) for a valid string that
// did not fit. With limit 0 it only checks the syntax.
func (p *Scanner) Str(dst []byte, limit int) ([]byte, bool) {
	if !p.Eat('"') {
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

func (p *Scanner) hex4() (rune, bool) {
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

// Number reads a JSON number and returns its text.
func (p *Scanner) Number() ([]byte, bool) {
	start := p.i
	p.Eat('-')
	switch {
	case p.Eat('0'):
	case p.Peek() >= '1' && p.Peek() <= '9':
		p.digits()
	default:
		return nil, false
	}
	if p.Eat('.') {
		if !p.digits() {
			return nil, false
		}
	}
	if c := p.Peek(); c == 'e' || c == 'E' {
		p.i++
		if !p.Eat('+') {
			p.Eat('-')
		}
		if !p.digits() {
			return nil, false
		}
	}
	return p.b[start:p.i], true
}

func (p *Scanner) digits() bool {
	start := p.i
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
	}
	return p.i > start
}

// Skip checks and skips any JSON value.
func (p *Scanner) Skip(depth int) bool {
	if depth > MaxDepth {
		return false
	}
	switch c := p.Peek(); {
	case c == '"':
		return p.SkipString()
	case c == '{':
		p.i++
		p.Space()
		if p.Eat('}') {
			return true
		}
		for {
			p.Space()
			if !p.SkipString() {
				return false
			}
			p.Space()
			if !p.Eat(':') {
				return false
			}
			p.Space()
			if !p.Skip(depth + 1) {
				return false
			}
			p.Space()
			if p.Eat('}') {
				return true
			}
			if !p.Eat(',') {
				return false
			}
		}
	case c == '[':
		p.i++
		p.Space()
		if p.Eat(']') {
			return true
		}
		for {
			p.Space()
			if !p.Skip(depth + 1) {
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
	case c == 't':
		return p.literal("true")
	case c == 'f':
		return p.literal("false")
	case c == 'n':
		return p.Null()
	default:
		_, ok := p.Number()
		return ok
	}
}

func (p *Scanner) literal(s string) bool {
	if bytes.HasPrefix(p.b[p.i:], []byte(s)) {
		p.i += len(s)
		return true
	}
	return false
}
