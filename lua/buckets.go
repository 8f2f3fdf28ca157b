package lua

import (
	"hash/fnv"
	"strconv"
	"strings"
)

// A bucketed sale (flashgate.Sale.Buckets > 1) splits its stock over N
// buckets. Bucket b of sale S has the hash tag BucketTag(S, b, salt), e.g.
// "S~2.17": "~" cannot occur in a sale id, so a tag never collides with a
// sale. Every key function of keys.go takes a tag in place of a sale id and
// gives that bucket's key (SaleKey(tag) is the bucket's hash, OrdersKey(tag)
// its stream, ...), and the existing scripts run on a bucket unchanged. The
// sale's own hash, SaleKey(S), keeps the sale-wide fields (total, state,
// admission counters) and the layout (FieldLayout); its booked stays 0.

// EntryBucket is the order stream entry field that carries the bucket index
// of an order of a bucketed sale.
const EntryBucket = "bucket"

// LedgerKey is the allocation ledger of a bucketed sale (lua.Ledger), in a
// slot of its own.
func LedgerKey(sale string) string { return "fg:{" + sale + "~ledger}:ledger" }

// FenceKey counts the fencing tokens handed out (lua.TakeFence): one to
// each leader lease, and one to each admin call that writes what the
// leader's loops write. A token is refused by every hash (fence field),
// ledger and database row (leader_fence) that saw a higher one.
func FenceKey() string { return "fg:fence" }

// Fields of a bucket's hash that the moves between buckets keep.
const (
	FieldFence       = "fence"  // the highest fencing token a write carried
	FieldGrantSeq    = "gseq"   // the last move credited to the bucket
	FieldShrinkSeq   = "sseq"   // the last move that shrank the bucket
	FieldShrinkFreed = "sfreed" // the units that shrink freed
	// FieldShrinkVariant is the variant the last shrink freed units of,
	// on a sale sold in variants (absent for one stock).
	FieldShrinkVariant = "svar"
	// FieldWant counts the buyers the bucket turned away sold out since
	// the leader last moved units to it: demand the rebalancing follows.
	FieldWant = "want"
)

// BucketTag is the hash tag of bucket b of sale, with its salt.
func BucketTag(sale string, b, salt int) string {
	return sale + "~" + strconv.Itoa(b) + "." + strconv.Itoa(salt)
}

// SaleOfTag returns the sale id of a bucket tag, and the bucket index; a
// plain sale id is returned as it is, with bucket -1.
func SaleOfTag(tag string) (sale string, bucket int) {
	i := strings.IndexByte(tag, '~')
	if i < 0 {
		return tag, -1
	}
	rest := tag[i+1:]
	j := strings.IndexByte(rest, '.')
	if j < 0 {
		return tag[:i], -1
	}
	b, err := strconv.Atoi(rest[:j])
	if err != nil {
		return tag[:i], -1
	}
	return tag[:i], b
}

// Layout is a bucketed sale's fixed placement: its id and the salt of each
// bucket. The zero Layout (no salts) is an unbucketed sale.
type Layout struct {
	Sale  string
	Salts []int
}

// N is the number of buckets; 1 for an unbucketed sale.
func (l Layout) N() int { return max(len(l.Salts), 1) }

// Bucketed reports whether the layout has more than one bucket.
func (l Layout) Bucketed() bool { return len(l.Salts) > 1 }

// Tag is the hash tag of bucket b; the sale id itself when unbucketed.
func (l Layout) Tag(b int) string {
	if !l.Bucketed() {
		return l.Sale
	}
	return BucketTag(l.Sale, b, l.Salts[b])
}

// Tags are the hash tags of every bucket, in bucket order.
func (l Layout) Tags() []string {
	out := make([]string, l.N())
	for b := range out {
		out[b] = l.Tag(b)
	}
	return out
}

// Home is the home bucket of user: FNV-1a (64 bits) of the user id's bytes,
// mod N. It depends on the user id and N alone, both fixed for the sale's
// life, so a user reserves in the same bucket every time.
func (l Layout) Home(user string) int {
	if !l.Bucketed() {
		return 0
	}
	return HomeBucket(user, len(l.Salts))
}

// HomeBucket is FNV-1a 64 of user mod n (n >= 1).
func HomeBucket(user string, n int) int {
	h := fnv.New64a()
	_, _ = h.Write([]byte(user))
	return int(h.Sum64() % uint64(n))
}

// String is the layout's FieldLayout value: the salts, comma-separated.
func (l Layout) String() string {
	var b strings.Builder
	for i, s := range l.Salts {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(s))
	}
	return b.String()
}

// ParseLayout reads a FieldLayout value; an empty value is an unbucketed
// layout. ok is false when v is malformed.
func ParseLayout(sale, v string) (l Layout, ok bool) {
	l.Sale = sale
	if v == "" {
		return l, true
	}
	parts := strings.Split(v, ",")
	l.Salts = make([]int, len(parts))
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return Layout{Sale: sale}, false
		}
		l.Salts[i] = n
	}
	return l, true
}

// Slot is the Redis Cluster slot of key (CRC16 of its hash tag mod 16384).
func Slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}
