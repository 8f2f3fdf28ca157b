package buckets

import (
	"context"
	"errors"
	"sort"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/internal/salehash"
	"github.com/flashgate/flashgate/lua"
)

// maxSalt bounds the search for a salt that puts a bucket on the primary
// it should go to (16384 slots over a few primaries: a few tries each).
const maxSalt = 100_000

// ChooseSalts picks the salt of each of n buckets of sale: bucket b goes to
// the (b mod P)-th primary of the cluster (primaries ordered by their first
// slot), on a slot no other bucket uses. Without a cluster (or when the
// slot map cannot be read) the buckets only get distinct slots. A cluster
// client over a Sentinel's master (one primary, which refuses CLUSTER SLOTS:
// clusterDisabled) is no cluster.
func (k *Keeper) ChooseSalts(ctx context.Context, sale string, n int) []int {
	if cc, ok := k.rdb.(*redis.ClusterClient); ok {
		slots, err := cc.ClusterSlots(ctx).Result()
		if err != nil {
			if clusterDisabled(err) {
				return pickSalts(sale, n, func(int) int { return 0 }, 1)
			}
			k.log.Warn("reading the cluster's slot map for bucket placement; buckets get distinct slots only", "sale", sale, "err", err)
		} else {
			sort.Slice(slots, func(i, j int) bool { return slots[i].Start < slots[j].Start })
			byAddr := map[string]int{}
			var ranges [][3]int // start, end, primary
			for _, sl := range slots {
				if len(sl.Nodes) == 0 {
					continue
				}
				p, ok := byAddr[sl.Nodes[0].Addr]
				if !ok {
					p = len(byAddr)
					byAddr[sl.Nodes[0].Addr] = p
				}
				ranges = append(ranges, [3]int{int(sl.Start), int(sl.End), p})
			}
			return pickSalts(sale, n, func(slot int) int {
				for _, r := range ranges {
					if slot >= r[0] && slot <= r[1] {
						return r[2]
					}
				}
				return -1
			}, len(byAddr))
		}
	}
	return pickSalts(sale, n, func(int) int { return 0 }, 1)
}

// clusterDisabled says whether err is a server's refusal of a cluster
// command because it runs without cluster support, as a Sentinel's master
// does.
func clusterDisabled(err error) bool {
	var reply redis.Error
	return errors.As(err, &reply) && strings.Contains(reply.Error(), "cluster support disabled")
}

// pickSalts gives bucket b the smallest salt whose tag's slot is owned by
// primary b mod primaries (ownerOf) and used by no other bucket; a bucket
// that finds none within maxSalt tries settles for a distinct slot.
func pickSalts(sale string, n int, ownerOf func(slot int) int, primaries int) []int {
	salts := make([]int, n)
	used := map[int]bool{}
	for b := range n {
		want := b % max(primaries, 1)
		found := -1
		for salt := 0; salt < maxSalt && found < 0; salt++ {
			slot := lua.Slot(lua.BucketTag(sale, b, salt))
			if !used[slot] && ownerOf(slot) == want {
				found = salt
			}
		}
		for salt := 0; found < 0; salt++ {
			if !used[lua.Slot(lua.BucketTag(sale, b, salt))] {
				found = salt
			}
		}
		salts[b] = found
		used[lua.Slot(lua.BucketTag(sale, b, found))] = true
	}
	return salts
}

// saleLayout is the bucket layout of a sale row.
func Layout(sale flashgate.Sale) lua.Layout {
	if !sale.Bucketed() {
		return lua.Layout{Sale: sale.ID}
	}
	return lua.Layout{Sale: sale.ID, Salts: sale.BucketSalts}
}

// Share is bucket b's share of total over n buckets: an even split,
// the first total mod n buckets one unit more.
func Share(total int64, n, b int) int64 {
	share := total / int64(n)
	if int64(b) < total%int64(n) {
		share++
	}
	return share
}

// PrepareArgs are lua.Prepare's ARGV for bucket b of the bucketed sale:
// its share of the stock (Share), and of a sale sold in variants its share
// of each variant (VariantShares), the bucket's total then their sum.
func PrepareArgs(sale flashgate.Sale, b int) []any {
	n := Layout(sale).N()
	if !sale.HasVariants() {
		return []any{Share(sale.Total, n, b), 0, salehash.PerUser(sale), sale.PriceCents}
	}
	shares := VariantShares(sale.Variants, n, b)
	var total int64
	for _, v := range shares {
		total += v
	}
	return []any{total, 0, salehash.PerUser(sale), sale.PriceCents, "", "", salehash.VariantSpec(sale.Variants, shares, nil)}
}

// VariantShares are bucket b's shares of each variant of vs over n
// buckets, in vs's order: each variant splits as Share splits a total,
// the spare units of variant i starting at bucket i mod n, so that a sale
// of many small variants does not pile its spare units on bucket 0.
func VariantShares(vs []flashgate.Variant, n, b int) []int64 {
	out := make([]int64, len(vs))
	for i, v := range vs {
		out[i] = Share(v.Total, n, (b-i%n+n)%n)
	}
	return out
}
