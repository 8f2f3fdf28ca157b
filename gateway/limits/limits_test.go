package limits

import (
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkUserLimitsNew is a new user's first attempt each time, on the
// default million-entry bound (past b.N of a million it evicts).
func BenchmarkUserLimitsNew(b *testing.B) {
	u := New(2, 5, 1_000_000)
	now := time.Now().UnixNano()
	r := rand.New(rand.NewPCG(1, 2))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if !u.Allow(r.Uint64(), now+int64(i)) {
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
		u := New(2, 5, 1000)
		for i := 0; i < 5; i++ {
			if !u.Allow(42, 0) {
				t.Fatalf("attempt %d of the burst: got refused, want allowed", i+1)
			}
		}
		if u.Allow(42, 0) {
			t.Fatal("sixth attempt at once: got allowed, want refused")
		}
		if !u.Allow(42, sec/2) {
			t.Fatal("after one interval: got refused, want allowed")
		}
		if u.Allow(42, sec/2) {
			t.Fatal("second attempt after one interval: got allowed, want refused")
		}
	})
	t.Run("growth keeps buckets", func(t *testing.T) {
		u := New(2, 2, 1_000_000)
		const users = 20_000 // far past the first tables
		for k := uint64(1); k <= users; k++ {
			u.Allow(k*0x9e3779b97f4a7c15, 0)
			u.Allow(k*0x9e3779b97f4a7c15, 0)
		}
		if n := u.Len(); n != users {
			t.Fatalf("got %d buckets, want %d", n, users)
		}
		for k := uint64(1); k <= users; k++ {
			if u.Allow(k*0x9e3779b97f4a7c15, 0) {
				t.Fatalf("user %d after its burst: got allowed, want refused", k)
			}
		}
	})
	t.Run("bound", func(t *testing.T) {
		for _, max := range []int{1, 10, 100, 5000} {
			u := New(2, 5, max)
			r := rand.New(rand.NewPCG(3, uint64(max)))
			for i := 0; i < 20*max+100; i++ {
				if !u.Allow(r.Uint64(), int64(i)) {
					t.Fatalf("max %d: a new user was refused", max)
				}
			}
			if n, bound := u.Len(), len(u.shards)*u.perShard; n > bound || bound-max >= len(u.shards) {
				t.Fatalf("max %d: got %d buckets (bound %d), want at most max rounded up to %d shards", max, n, bound, len(u.shards))
			}
		}
	})
	t.Run("flooder kept", func(t *testing.T) {
		u := New(2, 5, 16)
		const flooder = 7
		for u.Allow(flooder, 0) {
		}
		r := rand.New(rand.NewPCG(5, 6))
		for i := 0; i < 1000; i++ {
			u.Allow(r.Uint64(), sec/10) // each new user's bucket is nearer full than the flooder's
		}
		if u.Allow(flooder, sec/10) {
			t.Fatal("flooder after 1000 other users: got allowed, want refused (its bucket forgotten)")
		}
	})
}
