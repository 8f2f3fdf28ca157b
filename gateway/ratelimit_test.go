package gateway

import (
	"context"
	"strconv"
	"testing"
)

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
		if n := e.s.users.Len(); n > 10 || n < 8 {
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
