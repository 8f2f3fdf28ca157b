package fairqueue_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/fairqueue"
	"github.com/flashgate/flashgate/lua"
)

// TestRank checks the rank key against its definition in docs/api.md,
// HMAC-SHA256(seed, "<sale>/<user>"), and that a Ranker reused for many
// users gives each the same key as a fresh one.
func TestRank(t *testing.T) {
	seed := []byte("0123456789abcdef0123456789abcdef")
	r := fairqueue.NewRanker(seed)
	for _, c := range []struct{ sale, user string }{{"fq", "bob"}, {"fq", "alice"}, {"s-1", strings.Repeat("u", 200)}, {"fq", ""}} {
		m := hmac.New(sha256.New, seed)
		m.Write([]byte(c.sale + "/" + c.user))
		want := hex.EncodeToString(m.Sum(nil))
		if got := fairqueue.Rank(seed, c.sale, c.user); got != want {
			t.Errorf("Rank(%q, %q): got %s, want %s", c.sale, c.user, got, want)
		}
		var k [fairqueue.RankKeySize]byte
		r.Key(c.sale, c.user, &k)
		if got := hex.EncodeToString(k[:]); got != want {
			t.Errorf("Ranker.Key(%q, %q): got %s, want %s", c.sale, c.user, got, want)
		}
	}
	// The key goes to the caller's own array, which must not escape.
	var first byte
	if n := testing.AllocsPerRun(100, func() {
		var k [fairqueue.RankKeySize]byte
		r.Key("fq", "bob", &k)
		first = k[0]
	}); n != 0 {
		t.Errorf("Ranker.Key: got %v allocations, want 0", n)
	}
	_ = first
}

// TestValidateLimits checks that each limit is the boundary the
// validation enforces, and that the message names it.
func TestValidateLimits(t *testing.T) {
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	fair := func(mod func(*flashgate.Sale)) flashgate.Sale {
		s := flashgate.Sale{ID: "q", Total: 1, StartsAt: &start, Queue: flashgate.QueueFair}
		mod(&s)
		return s
	}
	cases := []struct {
		field     string
		at, above func(*flashgate.Sale)
		reason    string
	}{
		{"prequeue_seconds", func(s *flashgate.Sale) { s.PrequeueSeconds = fairqueue.MaxPrequeueSeconds },
			func(s *flashgate.Sale) { s.PrequeueSeconds = fairqueue.MaxPrequeueSeconds + 1 }, "outside 1..86400"},
		{"admit_seconds", func(s *flashgate.Sale) { s.AdmitSeconds = fairqueue.MaxAdmitSeconds },
			func(s *flashgate.Sale) { s.AdmitSeconds = fairqueue.MaxAdmitSeconds + 1 }, "outside 1..3600"},
		{"challenge_maxnumber", func(s *flashgate.Sale) { s.ChallengeMaxNumber = fairqueue.MaxChallengeNumber },
			func(s *flashgate.Sale) { s.ChallengeMaxNumber = fairqueue.MaxChallengeNumber + 1 }, "outside 0..100000000"},
	}
	for _, c := range cases {
		if err := fairqueue.Validate(fair(c.at)); err != nil {
			t.Errorf("%s at its limit: got %v, want valid", c.field, err)
		}
		err := fairqueue.Validate(fair(c.above))
		var fe *flashgate.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field || fe.Reason != c.reason {
			t.Errorf("%s above its limit: got %v, want %s: %s", c.field, err, c.field, c.reason)
		}
	}
}

// TestOpensAt checks the default pre-queue and the opening time.
func TestOpensAt(t *testing.T) {
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		prequeue int
		want     time.Time
	}{
		{0, start.Add(-fairqueue.DefaultPrequeueSeconds * time.Second)},
		{30, start.Add(-30 * time.Second)},
	}
	for _, c := range cases {
		s := flashgate.Sale{StartsAt: &start, PrequeueSeconds: c.prequeue}
		if got := fairqueue.OpensAt(s); !got.Equal(c.want) {
			t.Errorf("prequeue %d: got %v, want %v", c.prequeue, got, c.want)
		}
	}
	if got := fairqueue.OpensAt(flashgate.Sale{}); !got.IsZero() {
		t.Errorf("no start: got %v, want the zero time", got)
	}
}

// TestRead parses an HMGET of the queue's fields by name: a revealed seed
// only once started, thresholds only when well-formed.
func TestRead(t *testing.T) {
	seed := strings.Repeat("ab", 32)
	theta := strings.Repeat("0f", 32)
	vals := func(set map[string]any) []any {
		v := make([]any, len(fairqueue.Fields))
		for i, f := range fairqueue.Fields {
			v[i] = set[f]
		}
		return v
	}
	v, ok := fairqueue.Read(vals(map[string]any{
		lua.FieldQueueOpen: "1", lua.FieldQueueStarted: "1", lua.FieldQueueSeed: seed, lua.FieldQueuePrequeued: "7",
		lua.FieldQueueLate: "3", lua.FieldQueueAdmitted: "4", lua.FieldQueueExpired: "2", lua.FieldQueueThreshold: theta,
		lua.FieldQueueExpiredThreshold: "zz", lua.FieldQueueMaxNumber: "5000", lua.FieldQueueSeedSHA: "c0ffee", lua.FieldQueueEpoch: "17",
	}))
	switch {
	case !ok:
		t.Fatal("got not ok, want a reading")
	case !v.Open || !v.Started || v.Ranked:
		t.Errorf("open, started, ranked: got %v %v %v, want true true false", v.Open, v.Started, v.Ranked)
	case v.Entrants() != 10 || v.Admitted != 4 || v.Expired != 2 || v.MaxNumber != 5000:
		t.Errorf("entrants, admitted, expired, maxnumber: got %d %d %d %d, want 10 4 2 5000", v.Entrants(), v.Admitted, v.Expired, v.MaxNumber)
	case v.SeedHex != seed || len(v.Seed) != 32 || v.SeedSHA != "c0ffee" || v.Epoch != "17":
		t.Errorf("seed, sha, epoch: got %q %x %q %q", v.SeedHex, v.Seed, v.SeedSHA, v.Epoch)
	case !v.HasThreshold || hex.EncodeToString(v.Threshold[:]) != theta || v.HasExpiredThreshold:
		t.Errorf("thresholds: got %v %x %v, want true %s false", v.HasThreshold, v.Threshold, v.HasExpiredThreshold, theta)
	}
	v, _ = fairqueue.Read(vals(map[string]any{lua.FieldQueueOpen: "1", lua.FieldQueueSeed: seed}))
	if v.Seed != nil || v.SeedHex != "" {
		t.Errorf("a seed before the start: got %q, want none", v.SeedHex)
	}
	if _, ok := fairqueue.Read(nil); ok {
		t.Error("an empty reply: got ok, want not ok")
	}
}

// TestChallengeTerms reads back the terms a salt was made with, and
// refuses a salt whose terms are cut short or not numbers.
func TestChallengeTerms(t *testing.T) {
	exp := time.Unix(1_900_000_000, 0)
	salt := fairqueue.ChallengeSalt("00ff", "s-1", 5000, exp)
	if want := "00ff?sale=s-1&max=5000&expires=1900000000&"; salt != want {
		t.Errorf("salt: got %q, want %q", salt, want)
	}
	sale, maxnum, expires, ok := fairqueue.ChallengeTerms(salt)
	if !ok || sale != "s-1" || maxnum != 5000 || !expires.Equal(exp) {
		t.Errorf("terms: got %q %d %v %v, want s-1 5000 %v true", sale, maxnum, expires, ok, exp)
	}
	for _, bad := range []string{
		"00ff?sale=s-1&max=5000&expires=1900000000", // no final "&": a digit could move
		"00ff?sale=s-1&max=x&expires=1900000000&",
		"00ff?sale=s-1&max=5000&",
		"00ff",
	} {
		if _, _, _, ok := fairqueue.ChallengeTerms(bad); ok {
			t.Errorf("ChallengeTerms(%q): got ok, want refused", bad)
		}
	}
}

// TestMarkLife checks that a used solution's mark outlives its challenge
// in whole milliseconds, even with under a millisecond left, and that no
// solution gets no mark.
func TestMarkLife(t *testing.T) {
	margin := fairqueue.MarkMargin.Milliseconds()
	cases := []struct {
		remaining time.Duration
		want      int64
	}{
		{0, 0},
		{-time.Second, 0},
		{time.Nanosecond, margin + 1},
		{500 * time.Microsecond, margin + 1},
		{time.Millisecond, margin + 1},
		{time.Millisecond + time.Nanosecond, margin + 2},
		{fairqueue.ChallengeTTL, fairqueue.ChallengeTTL.Milliseconds() + margin},
	}
	for _, c := range cases {
		if got := fairqueue.MarkLife(c.remaining); got != c.want {
			t.Errorf("MarkLife(%v): got %d, want %d", c.remaining, got, c.want)
		}
	}
}

// TestCommitmentAndOrder: the commitment is the lowercase hex of the
// seed's SHA-256 (the queue's seed_sha256), and CompareKeys orders rank
// keys as their published hex sorts.
func TestCommitmentAndOrder(t *testing.T) {
	seed := []byte("0123456789abcdef0123456789abcdef")
	sum := sha256.Sum256(seed)
	if got, want := fairqueue.Commitment(seed), hex.EncodeToString(sum[:]); got != want {
		t.Errorf("Commitment: got %s, want %s", got, want)
	}
	r := fairqueue.NewRanker(seed)
	var a, b [fairqueue.RankKeySize]byte
	for _, users := range [][2]string{{"u1", "u2"}, {"alice", "bob"}, {"x", "x"}} {
		r.Key("s1", users[0], &a)
		r.Key("s1", users[1], &b)
		want := strings.Compare(fairqueue.Rank(seed, "s1", users[0]), fairqueue.Rank(seed, "s1", users[1]))
		if got := fairqueue.CompareKeys(&a, &b); got != want {
			t.Errorf("CompareKeys(%s, %s): got %d, want %d", users[0], users[1], got, want)
		}
	}
}
