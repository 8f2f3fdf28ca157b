package flashgate

import "unicode/utf8"

// MaxUserID is the longest user id, in bytes.
const MaxUserID = 128

// ValidUserID is the one rule for a buyer's user id (a token's sub), for
// strings and for request bytes alike: 1–MaxUserID bytes of valid UTF-8
// without control characters (Unicode's Cc: U+0000–U+001F, U+007F–U+009F),
// so NUL, tabs, line breaks, ESC and DEL are refused. Everything else is
// allowed, which covers what identity providers put in sub: e-mail
// addresses (international ones too), UUIDs, "auth0|64f…", "google-oauth2|1…",
// numbers. A database stores every id this rule accepts; see docs/api.md,
// "Buyer identity". It allocates nothing.
func ValidUserID[T ~string | ~[]byte](id T) bool {
	if len(id) == 0 || len(id) > MaxUserID {
		return false
	}
	for i := 0; i < len(id); {
		c := id[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f {
				return false
			}
			i++
			continue
		}
		var buf [utf8.UTFMax]byte
		n := copy(buf[:], id[i:])
		r, size := utf8.DecodeRune(buf[:n])
		if r == utf8.RuneError && size <= 1 || r >= 0x80 && r <= 0x9f {
			return false
		}
		i += size
	}
	return true
}
