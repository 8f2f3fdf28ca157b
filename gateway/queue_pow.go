package gateway

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/jsonstr"
)

// powPayload is the decoded body of an ALTCHA solution.
type powPayload struct {
	Algorithm string `json:"algorithm"`
	Challenge string `json:"challenge"`
	Number    int64  `json:"number"`
	Salt      string `json:"salt"`
	Signature string `json:"signature"`
}

// errPoW is a missing, malformed, expired or wrong proof of work.
var errPoW = &flashgate.FieldError{Field: "payload", Reason: "no valid proof-of-work solution"}

// verifyPoW checks an ALTCHA payload for sale at now with one hash and one
// HMAC; it returns the challenge and the solution's remaining life.
func (s *Server) verifyPoW(payload, sale string, now time.Time) (challenge string, ttl time.Duration, err error) {
	raw, err := base64.StdEncoding.DecodeString(payload)
	if err != nil {
		return "", 0, errPoW
	}
	var p powPayload
	if err := json.Unmarshal(raw, &p); err != nil || p.Algorithm != "SHA-256" || p.Number < 0 {
		return "", 0, errPoW
	}
	_, query, _ := stringsCut(p.Salt, '?')
	params, err := url.ParseQuery(query)
	if err != nil || params.Get("sale") != sale {
		return "", 0, errPoW
	}
	exp, err := strconv.ParseInt(params.Get("expires"), 10, 64)
	if err != nil {
		return "", 0, errPoW
	}
	ttl = time.Unix(exp, 0).Sub(now)
	if ttl <= 0 {
		return "", 0, errPoW
	}
	sum := sha256.Sum256([]byte(p.Salt + strconv.FormatInt(p.Number, 10)))
	if hex.EncodeToString(sum[:]) != p.Challenge {
		return "", 0, errPoW
	}
	m := hmac.New(sha256.New, s.qkeys.pow)
	m.Write([]byte(p.Challenge))
	want := hex.EncodeToString(m.Sum(nil))
	if !hmac.Equal([]byte(want), []byte(p.Signature)) {
		return "", 0, errPoW
	}
	return p.Challenge, ttl, nil
}

func stringsCut(s string, sep byte) (before, after string, found bool) {
	if i := bytes.IndexByte([]byte(s), sep); i >= 0 {
		return s[:i], s[i+1:], true
	}
	return s, "", false
}

// challenge answers GET /api/sales/{id}/challenge with a fresh ALTCHA
// challenge for the sale at the cached maxnumber.
func (s *Server) challenge(ctx *fasthttp.RequestCtx, id []byte) {
	e, st, q := s.queueSale(ctx, id)
	if e == nil {
		return
	}
	if st.closed {
		s.rejectLocal(ctx, e, verdictClosed)
		return
	}
	// The salt and the secret number come from crypto/rand: a number a
	// client could predict would cost it no work.
	var rnd [20]byte
	_, _ = rand.Read(rnd[:])
	maxnum := max(q.maxnum, 0)
	number := int64(binary.BigEndian.Uint64(rnd[12:]) % uint64(maxnum+1))
	salt := hex.EncodeToString(rnd[:12]) + "?expires=" + strconv.FormatInt(s.clock.Now().Add(challengeTTL).Unix(), 10) + "&sale=" + e.id
	sum := sha256.Sum256([]byte(salt + strconv.FormatInt(number, 10)))
	chal := hex.EncodeToString(sum[:])
	m := hmac.New(sha256.New, s.qkeys.pow)
	m.Write([]byte(chal))
	b := make([]byte, 0, 256)
	b = append(b, `{"algorithm":"SHA-256","challenge":"`...)
	b = append(b, chal...)
	b = append(b, `","maxnumber":`...)
	b = strconv.AppendInt(b, maxnum, 10)
	b = append(b, `,"salt":`...)
	b = jsonstr.Append(b, salt)
	b = append(b, `,"signature":"`...)
	b = hex.AppendEncode(b, m.Sum(nil))
	b = append(b, `"}`...)
	writeJSONHead(ctx, fasthttp.StatusOK)
	ctx.Response.SetBodyRaw(b)
}
