// Package fairqueue holds the rules of a fair queue (docs/api.md, "Fair
// queue") that the gateway and the control plane share: the settings'
// defaults and limits and their validation, the rank key, the queue's
// fields in a sale's Redis hash and how they read, and the proof-of-work
// challenge's format. The gateway's edge (tickets, the status poll) and
// the control plane's leader (controlplane/queueleader) both build on it;
// the Redis scripts that act on a queue are lua/queue*.lua.
//
// It imports the root package, lua and the standard library only.
package fairqueue

import (
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/flashgate/flashgate"
)

// Defaults and limits of a fair queue's settings (flashgate.Sale).
const (
	// DefaultPrequeueSeconds is PrequeueSeconds when 0; MaxPrequeueSeconds
	// its largest value.
	DefaultPrequeueSeconds = 600
	MaxPrequeueSeconds     = 86400
	// DefaultAdmitSeconds is AdmitSeconds when 0; MaxAdmitSeconds its
	// largest value.
	DefaultAdmitSeconds = 60
	MaxAdmitSeconds     = 3600
	// MaxChallengeNumber is ChallengeMaxNumber's largest value.
	MaxChallengeNumber = 100_000_000
	// MaxAutoFactor bounds how far challenge_auto raises the difficulty,
	// and AutoRatePerStep is the entries per second each step of its
	// factor stands for.
	MaxAutoFactor   = 64
	AutoRatePerStep = 100
)

// Prequeue is how long before StartsAt the sale's fair queue opens.
func Prequeue(s flashgate.Sale) time.Duration {
	if s.PrequeueSeconds <= 0 {
		return DefaultPrequeueSeconds * time.Second
	}
	return time.Duration(s.PrequeueSeconds) * time.Second
}

// OpensAt is when the sale's fair queue opens; the zero time for a sale
// with no start time.
func OpensAt(s flashgate.Sale) time.Time {
	if s.StartsAt == nil {
		return time.Time{}
	}
	return s.StartsAt.Add(-Prequeue(s))
}

// AdmitWindow is how many seconds an admitted buyer has to buy.
func AdmitWindow(s flashgate.Sale) int {
	if s.AdmitSeconds <= 0 {
		return DefaultAdmitSeconds
	}
	return s.AdmitSeconds
}

// outside is a FieldError's reason for a value outside lo..hi.
func outside(lo, hi int) string {
	return "outside " + strconv.Itoa(lo) + ".." + strconv.Itoa(hi)
}

// Validate checks a sale's queue settings: a fair queue needs a start time
// and one bucket, and its settings stay within the limits above; a
// first-come sale has none of them.
func Validate(s flashgate.Sale) error {
	switch {
	case s.Queue != "" && s.Queue != flashgate.QueueFair:
		return &flashgate.FieldError{Field: "queue", Reason: `"` + flashgate.QueueFair + `" or absent`}
	case s.Queue == "" && (s.PrequeueSeconds != 0 || s.ChallengeMaxNumber != 0 || s.AdmitPerMinute != 0 || s.AdmitSeconds != 0 || s.ChallengeAuto != nil):
		return &flashgate.FieldError{Field: "queue", Reason: `queue settings need "queue": "` + flashgate.QueueFair + `"`}
	case s.Queue == "":
		return nil
	case s.PrequeueSeconds < 0 || s.PrequeueSeconds > MaxPrequeueSeconds:
		return &flashgate.FieldError{Field: "prequeue_seconds", Reason: outside(1, MaxPrequeueSeconds)}
	case s.ChallengeMaxNumber < 0 || s.ChallengeMaxNumber > MaxChallengeNumber:
		return &flashgate.FieldError{Field: "challenge_maxnumber", Reason: outside(0, MaxChallengeNumber)}
	case s.AdmitPerMinute < 0:
		return &flashgate.FieldError{Field: "admit_per_minute", Reason: "negative"}
	case s.AdmitSeconds < 0 || s.AdmitSeconds > MaxAdmitSeconds:
		return &flashgate.FieldError{Field: "admit_seconds", Reason: outside(1, MaxAdmitSeconds)}
	case s.StartsAt == nil:
		return &flashgate.FieldError{Field: "starts_at", Reason: "a fair queue needs a start time"}
	case s.Bucketed():
		return &flashgate.FieldError{Field: "buckets", Reason: "a fair queue sells from one bucket"}
	}
	return nil
}

// ChallengeTTL is how long a proof-of-work challenge may be solved and
// used: minutes, not a whole pre-queue, so that work done early cannot be
// hoarded for the opening's rush or outlive a raised difficulty for long.
const ChallengeTTL = 5 * time.Minute

// SolutionMinLife is the least life a proof-of-work solution's challenge
// must have left at entry: a solution with less is refused as expired.
// MarkMargin is how long a used solution's mark outlives its challenge
// (MarkLife). Together they keep a solution single-use on gateways whose
// clocks disagree by up to their sum.
const (
	SolutionMinLife = time.Second
	MarkMargin      = time.Second
)

// MarkLife is the life in milliseconds of the mark that makes a
// proof-of-work solution single-use (lua.QueueEnter's ARGV[2]), for a
// solution whose challenge has remaining left: remaining rounded up to a
// whole millisecond, plus MarkMargin, so the mark outlives the challenge.
// It is 0 (no solution to mark) only when remaining is not positive; a
// remaining life under a millisecond, which truncation would make 0 and
// so leave the solution unmarked, still gets a mark.
func MarkLife(remaining time.Duration) int64 {
	if remaining <= 0 {
		return 0
	}
	return int64((remaining + MarkMargin + time.Millisecond - 1) / time.Millisecond)
}

// ChallengeSalt is the salt of a proof-of-work challenge (ALTCHA), which
// carries its terms: "<nonce hex>?sale=<id>&max=<maxnumber>&expires=<unix
// seconds>&". The challenge is SHA-256 of the salt and the secret number,
// and the gateway signs the challenge, so the terms are covered; the last
// "&" ends the salt, so no digit can move between salt and number.
func ChallengeSalt(nonceHex, sale string, maxnumber int64, expires time.Time) string {
	return nonceHex + "?sale=" + sale + "&max=" + strconv.FormatInt(maxnumber, 10) +
		"&expires=" + strconv.FormatInt(expires.Unix(), 10) + "&"
}

// ChallengeTerms reads the terms of a salt made by ChallengeSalt; ok is
// false for any other shape.
func ChallengeTerms(salt string) (sale string, maxnumber int64, expires time.Time, ok bool) {
	_, query, _ := strings.Cut(salt, "?")
	if !strings.HasSuffix(query, "&") {
		return "", 0, time.Time{}, false
	}
	params, err := url.ParseQuery(query)
	if err != nil {
		return "", 0, time.Time{}, false
	}
	exp, err := strconv.ParseInt(params.Get("expires"), 10, 64)
	if err != nil {
		return "", 0, time.Time{}, false
	}
	maxnumber, err = strconv.ParseInt(params.Get("max"), 10, 64)
	if err != nil {
		return "", 0, time.Time{}, false
	}
	return params.Get("sale"), maxnumber, time.Unix(exp, 0), true
}
