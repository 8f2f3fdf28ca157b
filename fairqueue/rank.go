package fairqueue

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"hash"
)

// The rank key of a pre-start entrant: HMAC-SHA256(key = the queue's seed,
// message = "<sale>/<user>"). Entrants who entered before the start are
// admitted smallest rank key first; the seed is revealed at the start, so
// anyone can check their own rank key (docs/api.md, "Fair queue").

// RankKeySize is the length of a rank key in bytes.
const RankKeySize = sha256.Size

// Ranker computes rank keys under one seed. It reuses its HMAC and scratch
// space, so a key costs no allocation; it is not safe for concurrent use
// (pool it).
type Ranker struct {
	h   hash.Hash
	msg []byte
	// sum is the HMAC's output: summing into the caller's array instead
	// would make it escape (an allocation on every call).
	sum [RankKeySize]byte
}

// NewRanker returns a Ranker keyed with seed.
func NewRanker(seed []byte) *Ranker {
	return &Ranker{h: hmac.New(sha256.New, seed), msg: make([]byte, 0, 128)}
}

// Key writes the rank key of user in sale to out.
func (r *Ranker) Key(sale, user string, out *[RankKeySize]byte) {
	r.msg = append(append(append(r.msg[:0], sale...), '/'), user...)
	r.h.Reset()
	r.h.Write(r.msg)
	r.h.Sum(r.sum[:0])
	*out = r.sum
}

// Rank is the rank key of user in sale under seed, in lowercase hex (as
// the queue's thresholds are published).
func Rank(seed []byte, sale, user string) string {
	var k [RankKeySize]byte
	NewRanker(seed).Key(sale, user, &k)
	return hex.EncodeToString(k[:])
}

// CompareKeys orders rank keys as the queue admits them: -1 when a comes
// first (the smaller key), 1 when b does, 0 when they are equal.
func CompareKeys(a, b *[RankKeySize]byte) int { return bytes.Compare(a[:], b[:]) }

// Commitment is the published commitment of seed: the lowercase hex of
// its SHA-256 (the queue's seed_sha256), so that once the seed is revealed
// anyone can check it is the one fixed before the entries.
func Commitment(seed []byte) string {
	sum := sha256.Sum256(seed)
	return hex.EncodeToString(sum[:])
}
