package gateway

import (
	"bytes"
	"math"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/gateway/jsonscan"
)

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
	p := jsonscan.New(body)
	if !p.Eat('{') {
		return 0, nil, false
	}
	qty = 1
	var seenQty, seenVariant bool
	p.Space()
	if p.Eat('}') {
		return qty, nil, p.End()
	}
	for {
		p.Space()
		var kbuf [purchaseKeyLen]byte
		key, ok := p.Str(kbuf[:0], len(kbuf))
		if !ok {
			return 0, nil, false
		}
		p.Space()
		if !p.Eat(':') {
			return 0, nil, false
		}
		p.Space()
		switch string(key) {
		case "quantity":
			if seenQty {
				return 0, nil, false
			}
			seenQty = true
			if p.Null() {
				break
			}
			if qty, ok = quantity(&p); !ok {
				return 0, nil, false
			}
		case "variant":
			if seenVariant {
				return 0, nil, false
			}
			seenVariant = true
			if p.Null() {
				break
			}
			v, ok := p.Str(vbuf[:0], len(vbuf))
			if !ok || !flashgate.ValidVariantID(v) {
				return 0, nil, false
			}
			variant = v
		default:
			return 0, nil, false
		}
		p.Space()
		if p.Eat('}') {
			if !p.End() {
				return 0, nil, false
			}
			return qty, variant, true
		}
		if !p.Eat(',') {
			return 0, nil, false
		}
	}
}

// quantity reads a JSON number that is a whole number in 1..MaxInt64,
// written as one (no fraction or exponent, as encoding/json's int64 wants).
func quantity(p *jsonscan.Scanner) (int64, bool) {
	num, ok := p.Number()
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
