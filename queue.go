package flashgate

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
)

// QueueFair is Sale.Queue of a sale sold through a fair queue.
const QueueFair = "fair"

// Defaults and limits of a fair queue's settings.
const (
	DefaultPrequeueSeconds = 600
	MaxPrequeueSeconds     = 86400
	DefaultAdmitSeconds    = 60
)

// Fair reports whether the sale is sold through a fair queue.
func (s Sale) Fair() bool { return s.Queue == QueueFair }

// Prequeue is how long before StartsAt the sale's fair queue opens.
func (s Sale) Prequeue() int {
	if s.PrequeueSeconds <= 0 {
		return DefaultPrequeueSeconds
	}
	return s.PrequeueSeconds
}

// AdmitWindow is how many seconds an admitted buyer has to buy.
func (s Sale) AdmitWindow() int {
	if s.AdmitSeconds <= 0 {
		return DefaultAdmitSeconds
	}
	return s.AdmitSeconds
}

// ChallengeAutoOn reports whether the proof-of-work's difficulty rises with
// the queue (the default).
func (s Sale) ChallengeAutoOn() bool { return s.ChallengeAuto == nil || *s.ChallengeAuto }

// QueueRank is the rank key of user among a fair queue's pre-start
// entrants: the lowercase hex of HMAC-SHA256(key = seed, message =
// "<sale>/<user>"). Entrants are admitted smallest first.
func QueueRank(seed []byte, sale, user string) string {
	m := hmac.New(sha256.New, seed)
	m.Write([]byte(sale))
	m.Write([]byte{'/'})
	m.Write([]byte(user))
	return hex.EncodeToString(m.Sum(nil))
}

// QueueMark is what a fair queue's journal keeps of the queue itself: the
// epoch its seed derives from (with the sale id and the control plane's
// seed secret), the seed's SHA-256 published at the opening, the
// frontiers (positions admitted, positions whose window ended; both only
// grow) and the admission windows still open, one "<k> <ms> <theta>" a
// line, as Redis keeps them.
type QueueMark struct {
	Epoch, SeedSHA string
	K, E           int64
	Windows        string
}

// QueueEntrant is one journaled entrant of a fair queue: Entry is "p" for
// one who entered before the start, "l<n>" for the n-th after it.
type QueueEntrant struct {
	User, Entry string
}
