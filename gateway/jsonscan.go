package gateway

import (
	"bytes"
	"unicode/utf16"
	"unicode/utf8"
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
