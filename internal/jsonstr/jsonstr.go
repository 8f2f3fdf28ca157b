// Package jsonstr writes JSON strings without reflection or allocation, for
// the tiers' hand-built answers.
package jsonstr

import "unicode/utf8"

// Append appends s to b as a JSON string and returns the extended buffer.
// Like encoding/json it escapes quotes, backslashes, control characters,
// '<', '>', '&', U+2028 and U+2029, and writes each invalid UTF-8 byte as
// U+FFFD, so the result is valid JSON for any s.
func Append(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c < 0x20 || c == '<' || c == '>' || c == '&':
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, `\ufffd`...)
		} else if r == '\u2028' || r == '\u2029' {
			b = append(b, `\u202`...)
			b = append(b, hex[r&0xf])
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}
