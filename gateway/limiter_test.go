package gateway

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
)

// BenchmarkUserLimitsNew is a new user's first attempt each time, on the
// default million-entry bound (past b.N of a million it evicts).
func BenchmarkUserLimitsNew(b *testing.B) {
	u := newUserLimits(2, 5, 1_000_000)
	now := time.Now().UnixNano()
	r := rand.New(rand.NewPCG(1, 2))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if !u.allow(r.Uint64(), now+int64(i)) {
			b.Fatal("a new user was refused")
		}
	}
}

// TestUserLimits checks the buckets: a burst then one token per interval,
// buckets kept through the table's growth, the bound, and that the bucket
// closest to full again is the one forgotten.
func TestUserLimits(t *testing.T) {
	const sec = int64(time.Second)
	t.Run("burst and refill", func(t *testing.T) {
		u := newUserLimits(2, 5, 1000)
		for i := 0; i < 5; i++ {
			if !u.allow(42, 0) {
				t.Fatalf("attempt %d of the burst: got refused, want allowed", i+1)
			}
		}
		if u.allow(42, 0) {
			t.Fatal("sixth attempt at once: got allowed, want refused")
		}
		if !u.allow(42, sec/2) {
			t.Fatal("after one interval: got refused, want allowed")
		}
		if u.allow(42, sec/2) {
			t.Fatal("second attempt after one interval: got allowed, want refused")
		}
	})
	t.Run("growth keeps buckets", func(t *testing.T) {
		u := newUserLimits(2, 2, 1_000_000)
		const users = 20_000 // far past the first tables
		for k := uint64(1); k <= users; k++ {
			u.allow(k*0x9e3779b97f4a7c15, 0)
			u.allow(k*0x9e3779b97f4a7c15, 0)
		}
		if n := u.len(); n != users {
			t.Fatalf("got %d buckets, want %d", n, users)
		}
		for k := uint64(1); k <= users; k++ {
			if u.allow(k*0x9e3779b97f4a7c15, 0) {
				t.Fatalf("user %d after its burst: got allowed, want refused", k)
			}
		}
	})
	t.Run("bound", func(t *testing.T) {
		for _, max := range []int{1, 10, 100, 5000} {
			u := newUserLimits(2, 5, max)
			r := rand.New(rand.NewPCG(3, uint64(max)))
			for i := 0; i < 20*max+100; i++ {
				if !u.allow(r.Uint64(), int64(i)) {
					t.Fatalf("max %d: a new user was refused", max)
				}
			}
			if n, bound := u.len(), len(u.shards)*u.perShard; n > bound || bound-max >= len(u.shards) {
				t.Fatalf("max %d: got %d buckets (bound %d), want at most max rounded up to %d shards", max, n, bound, len(u.shards))
			}
		}
	})
	t.Run("flooder kept", func(t *testing.T) {
		u := newUserLimits(2, 5, 16)
		const flooder = 7
		for u.allow(flooder, 0) {
		}
		r := rand.New(rand.NewPCG(5, 6))
		for i := 0; i < 1000; i++ {
			u.allow(r.Uint64(), sec/10) // each new user's bucket is nearer full than the flooder's
		}
		if u.allow(flooder, sec/10) {
			t.Fatal("flooder after 1000 other users: got allowed, want refused (its bucket forgotten)")
		}
	})
}

func TestRateLimits(t *testing.T) {
	t.Run("user", func(t *testing.T) {
		fr := &fakeReserver{}
		e := newEnv(t, func(c *Config) { c.Reserver = fr; c.UserRate = 0.001; c.UserBurst = 2 })
		e.sale(t, "s1", 100, 150, true)
		tok := token(t, "u1")
		var got []int
		for i := 0; i < 4; i++ {
			r := do(e.s.Handler(), req{method: "POST", path: "/api/sales/s1/orders", token: tok})
			got = append(got, r.StatusCode())
			if r.StatusCode() == 429 {
				if errCode(r) != "rate_limited" {
					t.Fatalf("got body %s, want rate_limited", r.Body())
				}
				if ra, err := strconv.Atoi(string(r.Header.Peek("Retry-After"))); err != nil || ra < 1 {
					t.Fatalf("got Retry-After %q, want whole seconds ≥ 1", r.Header.Peek("Retry-After"))
				}
			}
		}
		if want := []int{201, 201, 429, 429}; !equalInts(got, want) {
			t.Fatalf("got %v, want %v", got, want)
		}
		// Another user is not affected.
		if r := do(e.s.Handler(), req{method: "POST", path: "/api/sales/s1/orders", token: token(t, "u2")}); r.StatusCode() != 201 {
			t.Fatalf("other user: got %d, want 201", r.StatusCode())
		}
	})
	t.Run("one user's flood spends no sale tokens", func(t *testing.T) {
		fr := &fakeReserver{}
		e := newEnv(t, func(c *Config) {
			c.Reserver = fr
			c.UserRate = 0.001
			c.UserBurst = 1
			c.SaleRate = 0.001
			c.SaleBurst = 3
		})
		e.sale(t, "s1", 100, 150, true)
		tok := token(t, "flooder")
		for i := 0; i < 10; i++ {
			do(e.s.Handler(), req{method: "POST", path: "/api/sales/s1/orders", token: tok})
		}
		for _, u := range []string{"u1", "u2"} {
			if r := do(e.s.Handler(), req{method: "POST", path: "/api/sales/s1/orders", token: token(t, u)}); r.StatusCode() != 201 {
				t.Fatalf("%s after another user's flood: got %d %s, want 201", u, r.StatusCode(), r.Body())
			}
		}
		if n := fr.n.Load(); n != 3 {
			t.Fatalf("got %d reserves, want 3 (one flooder, two others)", n)
		}
	})
	t.Run("sale", func(t *testing.T) {
		fr := &fakeReserver{}
		e := newEnv(t, func(c *Config) { c.Reserver = fr; c.UserRate = -1; c.SaleRate = 0.001; c.SaleBurst = 3 })
		e.sale(t, "s1", 100, 150, true)
		limited := 0
		for i := 0; i < 10; i++ {
			r := do(e.s.Handler(), req{method: "POST", path: "/api/sales/s1/orders", token: token(t, "u"+strconv.Itoa(i))})
			if r.StatusCode() == 429 {
				limited++
			}
		}
		if fr.n.Load() != 3 || limited != 7 {
			t.Fatalf("got %d admitted and %d limited, want 3 and 7", fr.n.Load(), limited)
		}
	})
	t.Run("bounded users", func(t *testing.T) {
		e := newEnv(t, func(c *Config) { c.Reserver = &fakeReserver{}; c.MaxUsers = 10 })
		e.sale(t, "s1", 100, 150, true)
		for i := 0; i < 50; i++ {
			do(e.s.Handler(), req{method: "POST", path: "/api/sales/s1/orders", token: token(t, "u"+strconv.Itoa(i))})
		}
		if n := e.s.users.len(); n > 10 || n < 8 {
			t.Fatalf("got %d user limiters, want 8 to 10", n)
		}
	})
	t.Run("rejections spend no token", func(t *testing.T) {
		e := newEnv(t, func(c *Config) { c.Reserver = &fakeReserver{}; c.UserRate = 0.001; c.UserBurst = 1 })
		e.sale(t, "s1", 100, 150, false)
		tok := token(t, "u1")
		for i := 0; i < 5; i++ {
			if r := do(e.s.Handler(), req{method: "POST", path: "/api/sales/s1/orders", token: tok}); errCode(r) != "not_started" {
				t.Fatalf("got %s, want not_started", r.Body())
			}
		}
		e.setState(t, "s1", "open")
		e.s.refreshState(context.Background())
		if r := do(e.s.Handler(), req{method: "POST", path: "/api/sales/s1/orders", token: tok}); r.StatusCode() != 201 {
			t.Fatalf("first admitted try: got %d %s, want 201", r.StatusCode(), r.Body())
		}
	})
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
