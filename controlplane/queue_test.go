package controlplane

import (
	"errors"
	"testing"

	"github.com/flashgate/flashgate"
)

func TestValidateQueue(t *testing.T) {
	start := t0
	off := false
	base := func(mod func(*flashgate.Sale)) flashgate.Sale {
		s := flashgate.Sale{ID: "q", Name: "Q", Total: 10, StartsAt: &start, Queue: flashgate.QueueFair}
		mod(&s)
		return s
	}
	cases := []struct {
		name  string
		sale  flashgate.Sale
		field string // "" = valid
	}{
		{"fair with defaults", base(func(*flashgate.Sale) {}), ""},
		{"every setting", base(func(s *flashgate.Sale) {
			s.PrequeueSeconds, s.ChallengeMaxNumber, s.ChallengeAuto, s.AdmitPerMinute, s.AdmitSeconds = 86400, 100000, &off, 600, 3600
		}), ""},
		{"first come", base(func(s *flashgate.Sale) { s.Queue = "" }), ""},
		{"unknown mode", base(func(s *flashgate.Sale) { s.Queue = "lottery" }), "queue"},
		{"settings without a queue", base(func(s *flashgate.Sale) { s.Queue, s.AdmitSeconds = "", 30 }), "queue"},
		{"prequeue too long", base(func(s *flashgate.Sale) { s.PrequeueSeconds = 86401 }), "prequeue_seconds"},
		{"negative difficulty", base(func(s *flashgate.Sale) { s.ChallengeMaxNumber = -1 }), "challenge_maxnumber"},
		{"negative rate", base(func(s *flashgate.Sale) { s.AdmitPerMinute = -1 }), "admit_per_minute"},
		{"window too long", base(func(s *flashgate.Sale) { s.AdmitSeconds = 3601 }), "admit_seconds"},
		{"no start", base(func(s *flashgate.Sale) { s.StartsAt = nil }), "starts_at"},
		{"bucketed", base(func(s *flashgate.Sale) { s.Buckets = 2 }), "buckets"},
	}
	for _, c := range cases {
		err := validateSale(c.sale)
		var fe *flashgate.FieldError
		switch {
		case c.field == "" && err != nil:
			t.Errorf("%s: got %v, want valid", c.name, err)
		case c.field != "" && (!errors.As(err, &fe) || fe.Field != c.field):
			t.Errorf("%s: got %v, want a bad %s", c.name, err, c.field)
		}
	}
}
