package gateway

import (
	lru "github.com/hashicorp/golang-lru/v2"
)

// shardedLRU is an LRU cut into shards by key hash, each with its own lock:
// every look-up in an LRU takes a write lock (it moves the entry to the
// front), so one lock shared by all requests becomes the queue that the
// crowd waits in. Its bound is the sum of the shards' bounds (size, rounded
// up to a multiple of the shard count).
type shardedLRU[K comparable, V any] struct {
	shards []*lru.Cache[K, V]
	hash   func(K) uint64
}

// lruShards is the shard count of caches large enough to split.
const lruShards = 32

func newShardedLRU[K comparable, V any](size int, hash func(K) uint64) (*shardedLRU[K, V], error) {
	n := lruShards
	if size < 64*lruShards {
		n = 1 // small caches keep their exact bound
	}
	c := &shardedLRU[K, V]{shards: make([]*lru.Cache[K, V], n), hash: hash}
	for i := range c.shards {
		var err error
		if c.shards[i], err = lru.New[K, V]((size + n - 1) / n); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func (c *shardedLRU[K, V]) shard(k K) *lru.Cache[K, V] {
	return c.shards[c.hash(k)%uint64(len(c.shards))]
}

// Get looks k up and marks it recently used.
func (c *shardedLRU[K, V]) Get(k K) (V, bool) { return c.shard(k).Get(k) }

// Add adds or replaces k.
func (c *shardedLRU[K, V]) Add(k K, v V) { c.shard(k).Add(k, v) }

// PeekOrAdd returns the value under k if there is one, else adds v.
func (c *shardedLRU[K, V]) PeekOrAdd(k K, v V) (prev V, found, evicted bool) {
	return c.shard(k).PeekOrAdd(k, v)
}

// Len is the number of entries in all shards.
func (c *shardedLRU[K, V]) Len() int {
	n := 0
	for _, s := range c.shards {
		n += s.Len()
	}
	return n
}
