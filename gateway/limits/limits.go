// Package limits owns the per-user token buckets of the gateway's rate
// limits (purchases, order reads): a bounded, sharded, set-associative
// table keyed by a hash of the user id, read and written with no
// allocation. It knows no request, user id or clock of its own (the caller
// hashes the id and passes the time), and may not import the gateway's root
// or any other package of the module.
package limits

import (
	"sync"
)

// Users holds every user's token bucket in 16 bytes: the bucket is
// kept as its "theoretical arrival time" (the generic cell rate
// algorithm), keyed by a 64-bit hash of the user id. A bucket whose time
// has passed is full again and means the same as no entry.
//
// Each shard is a set-associative table: a key lives in one set of
// limitWays slots (two cache lines), so a lookup, hit or miss, reads one
// set, and there are no tombstones or probe chains (a Go map's miss on a
// large table probed several groups, and was most of a new buyer's cost
// here). A new key takes an empty slot of its set or one whose bucket is
// full again; when every slot of its set is still draining, or the shard
// holds its bound, it takes the slot of the bucket closest to full again,
// and that user gets a fresh burst, as with an LRU.
//
// Its bound is max entries in all (rounded up to whole shards), 16 bytes
// each: 16 MB for the default million. A shard's table starts small and
// doubles (at three quarters full, or when a new key's set is crowded) up
// to the sets its bound needs.
type Users struct {
	interval int64 // nanoseconds per token
	span     int64 // interval × burst
	shards   []limitShard
	perShard int // entries a shard holds at most
	maxSets  int // sets a shard's table grows to
}

// limitWays is the number of slots in a set.
const limitWays = 8

// limitSlot is one user's bucket; key 0 marks an empty slot (a hash of 0
// is taken as 1).
type limitSlot struct {
	key uint64
	tat int64 // unix nanoseconds
}

type limitShard struct {
	mu   sync.Mutex
	sets [][limitWays]limitSlot
	n    int      // occupied slots
	_    [32]byte // keeps shards on their own cache lines
}

// limitShards is the shard count of tables large enough to split.
const limitShards = 64

// limitFirstSets is the sets a shard's table starts with.
const limitFirstSets = 4

// New returns the buckets of rate tokens a second, burst deep, for at
// most max users.
func New(rate float64, burst, max int) *Users {
	n := limitShards
	if max < 64*limitShards {
		n = 1
	}
	u := &Users{
		interval: int64(1e9 / rate),
		shards:   make([]limitShard, n),
		perShard: (max + n - 1) / n,
	}
	u.span = u.interval * int64(burst)
	u.maxSets = (u.perShard + limitWays - 1) / limitWays
	for i := range u.shards {
		u.shards[i].sets = make([][limitWays]limitSlot, min(limitFirstSets, u.maxSets))
	}
	return u
}

// setOf returns the set key lives in among n sets: the hash's high half
// scaled to n (the low bits pick the shard).
func setOf(key uint64, n int) int {
	return int((key >> 32) * uint64(n) >> 32)
}

// Allow spends one of user key's tokens at now (unix nanoseconds).
func (u *Users) Allow(key uint64, now int64) bool {
	if key == 0 {
		key = 1
	}
	sh := &u.shards[key%uint64(len(u.shards))]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	set := &sh.sets[setOf(key, len(sh.sets))]
	for i := range set {
		if s := &set[i]; s.key == key {
			tat := max(s.tat, now)
			next := tat + u.interval
			if next-now > u.span {
				return false
			}
			s.tat = next
			return true
		}
	}
	if u.interval > u.span {
		return false // a burst below one token: nobody ever passes
	}
	crowded := true // every slot of the set holds a draining bucket
	for i := range set {
		if set[i].key == 0 || set[i].tat <= now {
			crowded = false
			break
		}
	}
	if (crowded || sh.n >= len(sh.sets)*limitWays*3/4) && len(sh.sets) < u.maxSets {
		sh.grow(now, u.maxSets)
		set = &sh.sets[setOf(key, len(sh.sets))]
	}
	sh.put(set, key, now+u.interval, now, sh.n >= u.perShard)
	return true
}

// put stores key's bucket in set, in this order of preference: the slot
// of a bucket full again, an empty slot unless full (the shard holds its
// bound), the slot of the bucket closest to full again.
func (sh *limitShard) put(set *[limitWays]limitSlot, key uint64, tat, now int64, full bool) {
	victim, empty := -1, -1
	for i := range set {
		switch s := &set[i]; {
		case s.key == 0:
			if empty < 0 {
				empty = i
			}
		case victim < 0 || s.tat < set[victim].tat:
			victim = i
		}
	}
	switch {
	case victim >= 0 && set[victim].tat <= now:
		set[victim] = limitSlot{key, tat}
	case empty >= 0 && !full:
		set[empty] = limitSlot{key, tat}
		sh.n++
	case victim >= 0:
		set[victim] = limitSlot{key, tat}
	default:
		// The shard is full and this set empty: drop a bucket of another
		// set (the shard keeps its bound), and take a slot here.
		for i := range sh.sets {
			for j := range sh.sets[i] {
				if sh.sets[i][j].key != 0 {
					sh.sets[i][j] = limitSlot{}
					set[empty] = limitSlot{key, tat}
					return
				}
			}
		}
	}
}

// grow doubles the shard's table (at most to maxSets), leaving out the
// buckets full again.
func (sh *limitShard) grow(now int64, maxSets int) {
	old := sh.sets
	sh.sets = make([][limitWays]limitSlot, min(2*len(old), maxSets))
	sh.n = 0
	for i := range old {
		for _, s := range old[i] {
			if s.key != 0 && s.tat > now {
				sh.put(&sh.sets[setOf(s.key, len(sh.sets))], s.key, s.tat, now, false)
			}
		}
	}
}

// Len is the number of buckets held.
func (u *Users) Len() int {
	n := 0
	for i := range u.shards {
		sh := &u.shards[i]
		sh.mu.Lock()
		n += sh.n
		sh.mu.Unlock()
	}
	return n
}
