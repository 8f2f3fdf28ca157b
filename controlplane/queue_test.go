package controlplane

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/lua"
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

// TestQueueAdmission steps a fair queue by hand: the frontier grows only
// while units remain that no admitted buyer has been promised, no faster
// than admit_per_minute, holds while the order stream is behind; a window
// that ends unused passes its slot on; and a new leader neither moves the
// frontier back nor lets the old one write.
func TestQueueAdmission(t *testing.T) {
	e := newEnv(t, sqliteDSN(t), func(c *Config) { c.QueueBacklog = 2 })
	ctx := e.ctx
	starts := t0.Add(10 * time.Minute)
	sale, err := e.svc.CreateSale(ctx, flashgate.Sale{ID: "fq", Name: "Fair", PriceCents: 1, Total: 5, StartsAt: &starts,
		Queue: flashgate.QueueFair, AdmitPerMinute: 120, AdmitSeconds: 30})
	if err != nil {
		t.Fatal(err)
	}
	fence, err := e.rdb.Incr(ctx, lua.FenceKey()).Result()
	if err != nil {
		t.Fatal(err)
	}
	figs := func() (k, exp int64) {
		t.Helper()
		v, err := e.rdb.HMGet(ctx, lua.SaleKey("fq"), lua.FieldQueueAdmitted, lua.FieldQueueExpired).Result()
		if err != nil {
			t.Fatal(err)
		}
		return lua.Int(v[0]), lua.Int(v[1])
	}
	step := func(svc *Service, fence int64, wantK, wantE int64) {
		t.Helper()
		if err := svc.QueueStep(ctx, sale, fence); err != nil {
			t.Fatalf("QueueStep: %v", err)
		}
		if k, exp := figs(); k != wantK || exp != wantE {
			t.Fatalf("at %s: got admitted %d, expired %d; want %d, %d", e.clock.Now().Sub(starts), k, exp, wantK, wantE)
		}
	}
	e.clock.Set(t0) // the queue opens
	step(e.svc, fence, 0, 0)
	var users []string
	for i := range 10 {
		u := fmt.Sprintf("u%02d", i)
		if err := lua.QueueEnter.Run(ctx, e.rdb, lua.QueueEnterKeys("fq", "none"), u, 0).Err(); err != nil {
			t.Fatal(err)
		}
		users = append(users, u)
	}
	e.clock.Set(starts)
	if err := e.svc.Start(ctx, "fq"); err != nil {
		t.Fatal(err)
	}
	step(e.svc, fence, 2, 0) // a burst of 2 (120 a minute)
	step(e.svc, fence, 2, 0) // no time, no tokens
	e.clock.Add(time.Second)
	step(e.svc, fence, 4, 0)
	e.clock.Add(time.Second)
	step(e.svc, fence, 5, 0) // every unit promised
	e.clock.Add(10 * time.Second)
	step(e.svc, fence, 5, 0)
	// The buyer at position 1 buys: their unit is booked, no longer only
	// promised, so nothing is free.
	rank := func(pos int) string {
		t.Helper()
		for _, u := range users {
			if v, _ := e.rdb.HGet(ctx, lua.QueueKey("fq"), u).Result(); v == fmt.Sprintf("r%d", pos) {
				return u
			}
		}
		t.Fatalf("no user at position %d", pos)
		return ""
	}
	if v, err := lua.Reserve.Run(ctx, e.rdb, lua.ReserveKeys("fq"), "o1", rank(1), 1, 1, "fq").Slice(); err != nil || v[0] != int64(lua.ReserveOK) {
		t.Fatalf("position 1 reserves: %v %v", v, err)
	}
	step(e.svc, fence, 5, 0)
	// Every window ends: 4 units are free again, admitted 2 at a time.
	e.clock.Add(20 * time.Second)
	step(e.svc, fence, 7, 5)
	// The order stream is behind (3 entries > 2): admission holds.
	for _, p := range []int{6, 7} {
		if v, err := lua.Reserve.Run(ctx, e.rdb, lua.ReserveKeys("fq"), fmt.Sprintf("o%d", p), rank(p), 1, 1, "fq").Slice(); err != nil || v[0] != int64(lua.ReserveOK) {
			t.Fatalf("position %d reserves: %v %v", p, v, err)
		}
	}
	e.clock.Add(time.Minute)
	step(e.svc, fence, 7, 7)

	// A new leader: the frontier stays where Redis has it; the old
	// leader's token is refused.
	svc2, err := New(Config{Redis: e.rdb, Store: e.db, Releaser: e.rel, AdminToken: testToken, Clock: e.clock, Logger: quietLogger(), QueueBacklog: 100})
	if err != nil {
		t.Fatal(err)
	}
	fence2, err := e.rdb.Incr(ctx, lua.FenceKey()).Result()
	if err != nil {
		t.Fatal(err)
	}
	step(svc2, fence2, 9, 7) // 2 units free, 2 tokens
	// A unit comes back and the stream drains, so the old leader has
	// something to admit.
	if err := lua.Release.Run(ctx, e.rdb, lua.ReleaseKeys("fq"), "o1", rank(1), 1).Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.Del(ctx, lua.OrdersKey("fq")).Err(); err != nil {
		t.Fatal(err)
	}
	e.clock.Add(time.Second)
	if err := e.svc.QueueStep(ctx, sale, fence); err == nil {
		t.Errorf("the old leader's step: got no error, want its token refused")
	}
	if k, exp := figs(); k != 9 || exp != 7 {
		t.Errorf("after the old leader's step: admitted %d, expired %d, want 9, 7", k, exp)
	}
}
