package queueedge

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/fairqueue"
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

// The proof of work's refusals (400 bad_request): errPoW is a missing,
// malformed, forged or foreign solution; errPoWExpired one whose challenge
// expired; errPoWWeak one whose signed difficulty is below the floor in
// force at entry (challenge_auto may have raised it since). The last two
// ask for a fresh challenge.
var (
	errPoW        = &flashgate.FieldError{Field: "payload", Reason: "no valid proof-of-work solution"}
	errPoWExpired = &flashgate.FieldError{Field: "payload", Reason: "challenge expired: fetch a new one"}
	errPoWWeak    = &flashgate.FieldError{Field: "payload", Reason: "challenge below the difficulty in force: fetch a new one"}
)

// challengeSig is the signature of a proof-of-work challenge:
// HMAC-SHA256(the gateway's proof-of-work key, challenge).
func (k *Keys) challengeSig(challenge string) []byte {
	return hmacSum(k.pow, challenge)
}

// VerifyPoW checks an ALTCHA payload for sale at now with one hash and one
// HMAC; it returns the challenge and the solution's remaining life. The
// salt is the challenge's terms (fairqueue.ChallengeSalt), covered by the
// signature (challenge is SHA-256 of salt and number, signature the HMAC
// of challenge). The sale must be
// sale, the number within 0..max, max at least floor (the difficulty in
// force now), and expires at least fairqueue.SolutionMinLife away.
func (k *Keys) VerifyPoW(payload, sale string, floor int64, now time.Time) (challenge string, ttl time.Duration, err error) {
	raw, err := base64.StdEncoding.DecodeString(payload)
	if err != nil {
		return "", 0, errPoW
	}
	var p powPayload
	if err := json.Unmarshal(raw, &p); err != nil || p.Algorithm != "SHA-256" || p.Number < 0 {
		return "", 0, errPoW
	}
	id, maxnum, expires, ok := fairqueue.ChallengeTerms(p.Salt)
	if !ok || id != sale || p.Number > maxnum {
		return "", 0, errPoW
	}
	sum := sha256.Sum256([]byte(p.Salt + strconv.FormatInt(p.Number, 10)))
	if hex.EncodeToString(sum[:]) != p.Challenge {
		return "", 0, errPoW
	}
	want := hex.EncodeToString(k.challengeSig(p.Challenge))
	if !hmac.Equal([]byte(want), []byte(p.Signature)) {
		return "", 0, errPoW
	}
	// The terms are the server's own from here on.
	if ttl = expires.Sub(now); ttl < fairqueue.SolutionMinLife {
		return "", 0, errPoWExpired
	}
	if maxnum < floor {
		return "", 0, errPoWWeak
	}
	return p.Challenge, ttl, nil
}

// AppendChallenge appends to b the body of GET /api/sales/{id}/challenge
// for sale: a fresh ALTCHA challenge at difficulty maxnum (Floor), good
// for fairqueue.ChallengeTTL from now. The caller answers it only once the
// queue is open: a challenge fetched before could be solved before.
func (k *Keys) AppendChallenge(b []byte, sale string, maxnum int64, now time.Time) []byte {
	// The salt and the secret number come from crypto/rand: a number a
	// client could predict would cost it no work.
	var rnd [20]byte
	_, _ = rand.Read(rnd[:])
	number := int64(binary.BigEndian.Uint64(rnd[12:]) % uint64(maxnum+1))
	salt := fairqueue.ChallengeSalt(hex.EncodeToString(rnd[:12]), sale, maxnum, now.Add(fairqueue.ChallengeTTL))
	sum := sha256.Sum256([]byte(salt + strconv.FormatInt(number, 10)))
	chal := hex.EncodeToString(sum[:])
	b = append(b, `{"algorithm":"SHA-256","challenge":"`...)
	b = append(b, chal...)
	b = append(b, `","maxnumber":`...)
	b = strconv.AppendInt(b, maxnum, 10)
	b = append(b, `,"salt":`...)
	b = jsonstr.Append(b, salt)
	b = append(b, `,"signature":"`...)
	b = hex.AppendEncode(b, k.challengeSig(chal))
	return append(b, `"}`...)
}

// Floor is the proof of work's difficulty in force in q: the queue's
// maxnumber now (challenge_auto raises it), never below the sale's
// challenge_maxnumber (saleMax, from the catalog).
func Floor(q *View, saleMax int64) int64 {
	return max(q.MaxNumber, 0, saleMax)
}
