package gateway

import (
	"sync"
)

// userLimits holds every user's token bucket in 16 bytes: the bucket is
// kept as its "theoretical arrival time" (the generic cell rate
// algorithm), keyed by a 64-bit hash of the user id. A bucket whose time
// has passed is full again and means the same as no entry, so such entries
// are what a full shard drops first; only when every entry of a shard is
// still draining does it drop some at random, and those users get a fresh
// burst, as with an LRU.
//
// Its bound is max entries in all (rounded up to whole shards): about
// 20–30 bytes an entry, 30 MB for the default million.
type userLimits struct {
	interval int64 // nanoseconds per token
	span     int64 // interval × burst
	shards   []limitShard
	perShard int
}

type limitShard struct {
	mu  sync.Mutex
	tat map[uint64]int64 // user hash → unix nanoseconds
	_   [40]byte         // keeps shards on their own cache lines
}

// limitShards is the shard count of tables large enough to split.
const limitShards = 64

func newUserLimits(rate float64, burst, max int) *userLimits {
	n := limitShards
	if max < 64*limitShards {
		n = 1
	}
	u := &userLimits{
		interval: int64(1e9 / rate),
		shards:   make([]limitShard, n),
		perShard: (max + n - 1) / n,
	}
	u.span = u.interval * int64(burst)
	for i := range u.shards {
		u.shards[i].tat = make(map[uint64]int64)
	}
	return u
}

// allow spends one of user key's tokens at now (unix nanoseconds).
func (u *userLimits) allow(key uint64, now int64) bool {
	sh := &u.shards[key%uint64(len(u.shards))]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	tat, ok := sh.tat[key]
	if !ok || tat < now {
		tat = now
	}
	next := tat + u.interval
	if next-now > u.span {
		return false
	}
	if !ok && len(sh.tat) >= u.perShard {
		sh.evict(now, u.perShard)
	}
	sh.tat[key] = next
	return true
}

// evict makes room in a full shard: every bucket that is full again goes,
// and if that frees less than an eighth of the shard, arbitrary others go
// too. Each call frees at least an eighth, so its cost (a pass over the
// shard) is paid once per that many new users.
func (sh *limitShard) evict(now int64, max int) {
	for k, t := range sh.tat {
		if t <= now {
			delete(sh.tat, k)
		}
	}
	want := max - max/8
	if want >= max {
		want = max - 1
	}
	for k := range sh.tat {
		if len(sh.tat) <= want {
			break
		}
		delete(sh.tat, k)
	}
}

// len is the number of buckets held.
func (u *userLimits) len() int {
	n := 0
	for i := range u.shards {
		sh := &u.shards[i]
		sh.mu.Lock()
		n += len(sh.tat)
		sh.mu.Unlock()
	}
	return n
}
