package gateway

import (
	"bytes"
	"hash/maphash"

	"github.com/golang-jwt/jwt/v5"
	"github.com/valyala/fasthttp"
)

// maxTokenSize bounds the bearer tokens worth verifying.
const maxTokenSize = 4096

// maxSubject is the longest user id (the token's sub) accepted.
const maxSubject = 128

// tokenEntry is a verified token, kept so a repeat of it costs a hash and
// a map look-up instead of an HMAC and a JSON decode.
type tokenEntry struct {
	token string
	sub   string
	exp   int64 // unix seconds
}

var bearer = []byte("bearer ")

// authenticate returns the user id of the request's bearer token. A token
// seen before is found in the verified-token LRU without allocating.
func (s *Server) authenticate(ctx *fasthttp.RequestCtx) (string, bool) {
	h := ctx.Request.Header.Peek(fasthttp.HeaderAuthorization)
	if len(h) <= len(bearer) || !bytes.EqualFold(h[:len(bearer)], bearer) {
		return "", false
	}
	tok := bytes.TrimSpace(h[len(bearer):])
	if len(tok) == 0 || len(tok) > maxTokenSize {
		return "", false
	}
	key := maphash.Bytes(s.seed, tok)
	now := s.clock.Now().Unix()
	if e, ok := s.tokens.Get(key); ok && e.token == string(tok) {
		if now < e.exp {
			return e.sub, true
		}
		return "", false
	}
	return s.verify(string(tok), key, now)
}

// verify checks a token's signature and claims and caches it.
func (s *Server) verify(tok string, key uint64, now int64) (string, bool) {
	var claims jwt.RegisteredClaims
	t, err := s.parser.ParseWithClaims(tok, &claims, func(*jwt.Token) (any, error) {
		return s.cfg.JWTSecret, nil
	})
	if err != nil || !t.Valid || claims.ExpiresAt == nil {
		return "", false
	}
	sub := claims.Subject
	if sub == "" || len(sub) > maxSubject {
		return "", false
	}
	exp := claims.ExpiresAt.Unix()
	if now >= exp {
		return "", false
	}
	s.tokens.Add(key, &tokenEntry{token: tok, sub: sub, exp: exp})
	return sub, true
}
