package lua

import (
	"strconv"
)

// Int reads an integer from a value of an HGET or HMGET reply: 0 when the
// field is absent or holds no integer.
func Int(v any) int64 {
	s, _ := v.(string)
	if s == "" {
		return 0 // and no strconv.NumError to allocate
	}
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// Hash is an HMGET reply read by field name (the Field constants), so a
// reader names the fields it uses instead of counting positions in the
// reply. It is how every tier reads a sale hash: the gateway's refresh
// (gateway/saleread.go), the fair queue's fields (fairqueue.Read), the
// control plane's figures (controlplane/internal/salehash).
type Hash struct {
	fields []string
	vals   []any
	next   int // where the next lookup starts: readers go in field order
}

// ReadHash pairs the values of an HMGET reply with the fields it asked
// for, in the same order; ok is false when the reply does not hold one
// value per field.
func ReadHash(fields []string, vals []any) (h Hash, ok bool) {
	if len(vals) != len(fields) {
		return Hash{}, false
	}
	return Hash{fields: fields, vals: vals}, true
}

// value is field's value, nil when it is absent or was not asked for.
func (h *Hash) value(field string) any {
	n := len(h.fields)
	for k := range n {
		i := h.next + k
		if i >= n {
			i -= n
		}
		if h.fields[i] == field {
			h.next = i + 1
			return h.vals[i]
		}
	}
	return nil
}

// Has reports whether the hash holds field.
func (h *Hash) Has(field string) bool { return h.value(field) != nil }

// Int is field's value as an integer: 0 when it is absent or no integer.
func (h *Hash) Int(field string) int64 { return Int(h.value(field)) }

// Str is field's value: "" when it is absent.
func (h *Hash) Str(field string) string {
	s, _ := h.value(field).(string)
	return s
}
