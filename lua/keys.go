// Package lua holds flashgate's Redis scripts and the one file that builds
// every Redis key. Each script is a .lua file named after its Go variable,
// embedded and wrapped once with redis.NewScript; callers use Script.Run, which
// tries EVALSHA and falls back to EVAL on NOSCRIPT.
package lua

import (
	"strconv"
	"strings"
)

// Every key of one sale carries the sale id as a hash tag ({<sale>}), so one
// sale lives in one Redis Cluster slot. Every script touches the keys of one
// sale only; nothing that spans sales (fg:sales, fg:leader) is ever a key of
// a script.

// SaleKey is the sale's hash: total, booked, reserved, start, closed, count,
// access, per_user, price.
func SaleKey(sale string) string { return "fg:{" + sale + "}:sale" }

// BuyersKey is the hash of user id → order id, one entry per live order.
func BuyersKey(sale string) string { return "fg:{" + sale + "}:buyers" }

// OrdersKey is the stream of reserved orders that the order sink drains.
func OrdersKey(sale string) string { return "fg:{" + sale + "}:orders" }

// ReleasedKey is the set of order ids whose units were given back; it makes
// a release idempotent.
func ReleasedKey(sale string) string { return "fg:{" + sale + "}:released" }

// DeadKey is the stream of order entries the order sink could not store
// (malformed, or refused by the database): each holds the original entry's
// fields plus DeadSource, DeadReason and DeadTime, until an operator replays
// it onto OrdersKey.
func DeadKey(sale string) string { return "fg:{" + sale + "}:dead" }

// SalesKey is the set of all sale ids known to Redis, whose streams the
// order sinks drain. It is not hash-tagged and never a key of a script: the
// control plane adds a sale with SADD before it prepares or re-syncs the
// sale's keys, so a sale with orders is never missing from it.
func SalesKey() string { return "fg:sales" }

// GatewaysKey is the sorted set of live gateways: member = a gateway's id,
// score = its last heartbeat (unix milliseconds). Each gateway takes its
// share of --sale-rate from the number of live members. Not hash-tagged:
// it is only ever used by single-key commands, so any slot will do.
func GatewaysKey() string { return "fg:gateways" }

// LeaderKey is the lock that elects the one control plane that runs the
// scheduled loops (start/stop at times, expiry, re-sync).
func LeaderKey() string { return "fg:leader" }

// ClaimsKey is a bucket's sorted set of users whose claim marker in its
// buyers hash is pending (member = user id, score = the claim's time in
// unix milliseconds): the leader settles those older than a bound.
func ClaimsKey(sale string) string { return "fg:{" + sale + "}:claims" }

// SinkGroup is the consumer group the order sinks read order streams with.
const SinkGroup = "ordersink"

// Fields of the sale hash.
const (
	FieldTotal    = "total"    // units on sale
	FieldBooked   = "booked"   // units held by live orders; never > total
	FieldReserved = "reserved" // units ever reserved (monotonic; re-sync uses it)
	FieldStart    = "start"    // "1" while open
	FieldClosed   = "closed"   // "1" once stopped
	FieldCount    = "count"    // admission cap the gateways enforce
	FieldAccess   = "access"   // requests the gateways admitted
	FieldRejected = "rejected" // requests the gateways turned away (batched)
	FieldPerUser  = "per_user" // most units one user may hold
	FieldPrice    = "price"    // price in cents, copied into each order
	FieldResume   = "resume"   // "1": a rebuilt open sale reopens at the next re-sync
	// FieldDelivered counts the releases re-syncs delivered from the
	// database's pending releases; below the database's count, Redis lost some.
	FieldDelivered = "delivered"
	// FieldReleases counts the orders whose units Release and ReleaseBatch
	// gave back (each order once, by the released set): the re-sync reads
	// it before its database snapshot, and its script compares, to know
	// whether a release reached the hash meanwhile (lua/resync.lua).
	FieldReleases = "releases"
	// FieldRebuild marks a sale hash a re-sync rebuilt after Redis lost it
	// (the server's TIME when it was rebuilt; absent on a hash Prepare
	// made): a re-sync reads it before its database snapshot, and only a
	// pass that read the mark the hash has reopens a rebuilt sale
	// (lua/resync.lua's ARGV[13]).
	FieldRebuild = "rebuild"
	// FieldRestoring is the id of the restore of a sale's (or bucket's)
	// released set and buyers under way or last done (RestoreBegin, written
	// before its first page when the hash holds none): its pages (Restore)
	// and its Restored are refused once the hash holds another or none,
	// Redis having lost the sale during the restore.
	FieldRestoring = "restoring"
	// FieldLayout lists a bucketed sale's buckets' salts ("17,4,233"),
	// absent on an unbucketed sale (buckets.go).
	FieldLayout = "layout"
	// FieldVariants lists the ids of a sale sold in several variants, in
	// the sale's order, comma-separated ("S,M,L"); absent on a sale of one
	// stock. Each variant's figures are fields of the same hash, named by
	// VariantField; total, booked and reserved stay the sums over them.
	FieldVariants = "variants"
)

// VariantField is the sale hash field holding one figure of variant id:
// field is FieldTotal (static: its units), FieldBooked (units held by its
// live orders; never above its total) or FieldReserved (units it ever
// reserved). VariantField("42", FieldBooked) is "variant:42:booked"; the
// scripts build the same names ("variant:" .. id .. ":booked"). Variant ids
// hold no ':' or ',' (flashgate.ValidVariantID).
func VariantField(id, field string) string { return "variant:" + id + ":" + field }

// SaleStaticFields are the fields of a sale hash that only the scripts
// creating it write (Prepare, Resync, with write_sale_static in
// fragments/salestatic.lua): the rest change as the sale sells.
//
// With variants, each variant's VariantField(id, FieldTotal) is static too.
var SaleStaticFields = []string{FieldTotal, FieldPerUser, FieldPrice, FieldLayout, FieldDrawOpen, FieldDrawClose, FieldQueue, FieldVariants}

// Fields of an order stream entry. reserve.lua and reservemany.lua write one
// field, EntryCompact; entries older flashgate versions wrote, and tests
// that hand-craft entries, have one field each (EntryOrder …).
const (
	// EntryCompact is "<order> <qty> <price> <ts> <bucket> <user>": five
	// space-free values (bucket empty on an unbucketed sale), then the user
	// id, whatever bytes it holds. One field instead of seven makes XADD,
	// XREADGROUP and the sink's parsing several times cheaper.
	EntryCompact = "e"

	EntryOrder    = "order"
	EntrySale     = "sale"
	EntryUser     = "user"
	EntryQuantity = "qty"
	EntryPrice    = "price"
	EntryTime     = "ts" // unix milliseconds
	// EntryVariant is the variant id of an order of a sale sold in several
	// variants: a field of its own beside EntryCompact (so that the compact
	// value, whose last value is the user id, keeps its shape), absent for
	// a sale of one stock.
	EntryVariant = "variant"
)

// Entry is an order entry's values as written, not yet checked. Sale is ""
// in a compact entry: its stream names it.
type Entry struct {
	Order, Sale, User, Quantity, Price, Time, Bucket string
	// Variant is the order's variant id, "" for a sale of one stock.
	Variant string
	// Compact is whether the entry had the one field EntryCompact.
	Compact bool
}

// ReadEntry reads the fields of an order entry in either form; ok is false
// for a compact entry that does not hold six values.
func ReadEntry(v map[string]any) (e Entry, ok bool) {
	str := func(k string) string { s, _ := v[k].(string); return s }
	c, compact := v[EntryCompact].(string)
	if !compact {
		e = Entry{Order: str(EntryOrder), Sale: str(EntrySale), User: str(EntryUser),
			Quantity: str(EntryQuantity), Price: str(EntryPrice), Time: str(EntryTime), Bucket: str(EntryBucket), Variant: str(EntryVariant)}
		return e, true
	}
	var vals [5]string
	for i := range vals {
		var found bool
		if vals[i], c, found = strings.Cut(c, " "); !found {
			return Entry{}, false
		}
	}
	return Entry{Order: vals[0], Quantity: vals[1], Price: vals[2], Time: vals[3], Bucket: vals[4], User: c, Variant: str(EntryVariant), Compact: true}, true
}

// PrimaryKey holds the replication id (master_replid) of the primary the
// control plane last rebuilt or checked the sale on. A replica promoted by a
// failover carries the old primary's value but has a replication id of its
// own, so the mismatch tells the control plane to rebuild the sale.
//
// sale may also be a bucket's tag (a bucketed sale keeps one marker per
// bucket, beside the one of its own hash); LedgerPrimaryKey is the ledger's.
func PrimaryKey(sale string) string { return "fg:{" + sale + "}:primary" }

// LedgerPrimaryKey is PrimaryKey for the slot of a bucketed sale's ledger
// (LedgerKey).
func LedgerPrimaryKey(sale string) string { return "fg:{" + sale + "~ledger}:primary" }

// Fields a dead-letter entry (DeadKey) adds to the original entry's fields.
const (
	DeadSource = "dead_src"    // the entry's id in the order stream
	DeadReason = "dead_reason" // why the sink could not store it
	DeadTime   = "dead_ts"     // when it was dead-lettered, unix milliseconds
)

// Key lists, one per script shape, in the order of the scripts' KEYS
// headers: callers never build a KEYS list by hand. tag is a sale id or a
// bucket's tag (see Layout).

// SaleKeys is KEYS of the scripts that touch the sale hash alone: Prepare,
// SetState, Resync, Pause, Tally, Shrink, Grant, Mark.
func SaleKeys(tag string) []string { return []string{SaleKey(tag)} }

// ReserveKeys is the KEYS of Reserve and ReserveMany: sale hash, buyers
// hash, orders stream, primary marker (the failover fence), released set
// (read by a spill only), queue hash (read in a fair queue only).
func ReserveKeys(tag string) []string {
	return []string{SaleKey(tag), BuyersKey(tag), OrdersKey(tag), PrimaryKey(tag), ReleasedKey(tag), QueueKey(tag)}
}

// ReleaseKeys is the KEYS of Release and ReleaseBatch: sale hash, buyers
// hash, released set.
func ReleaseKeys(tag string) []string {
	return []string{SaleKey(tag), BuyersKey(tag), ReleasedKey(tag)}
}

// RetakenKey is the set of orders whose units a late payment took again
// (lua.Retake).
func RetakenKey(sale string) string { return "fg:{" + sale + "}:retaken" }

// RetakeRefusedKey is the hash of orders whose late payment Retake
// refused, order id → the refusal's code, so that it answers each order
// the same however often and by whomever it is asked.
func RetakeRefusedKey(sale string) string { return "fg:{" + sale + "}:retakerefused" }

// RetakeKeys is Retake's KEYS: sale hash, buyers hash, released set,
// retaken set, refusals hash.
func RetakeKeys(tag string) []string {
	return []string{SaleKey(tag), BuyersKey(tag), ReleasedKey(tag), RetakenKey(tag), RetakeRefusedKey(tag)}
}

// UnretakeKeys is Unretake's KEYS: sale hash, buyers hash, retaken set,
// refusals hash.
func UnretakeKeys(tag string) []string {
	return []string{SaleKey(tag), BuyersKey(tag), RetakenKey(tag), RetakeRefusedKey(tag)}
}

// RestoreKeys is Restore's KEYS: buyers hash, released set, sale hash,
// retaken set, retake refusals hash.
func RestoreKeys(tag string) []string {
	return []string{BuyersKey(tag), ReleasedKey(tag), SaleKey(tag), RetakenKey(tag), RetakeRefusedKey(tag)}
}

// RebuiltKeys is the KEYS of Rebuilt: the sale (or bucket) hash and its
// primary marker.
func RebuiltKeys(tag string) []string { return []string{SaleKey(tag), PrimaryKey(tag)} }

// FenceKeys is TakeFence's KEYS: the fencing token counter.
func FenceKeys() []string { return []string{FenceKey()} }

// LeaderKeys is the KEYS of Extend and Unlock: the leader lock.
func LeaderKeys() []string { return []string{LeaderKey()} }

// LedgerKeys is Ledger's KEYS: a bucketed sale's allocation ledger.
func LedgerKeys(sale string) []string { return []string{LedgerKey(sale)} }

// SpillReserveKeys is the KEYS of a spill reserve (Reserve with ARGV[7]):
// sale hash, buyers hash, orders stream, primary marker, released set of the
// spill bucket, queue hash: the same as ReserveKeys.
func SpillReserveKeys(tag string) []string { return ReserveKeys(tag) }

// ClaimKeys is Claim's KEYS: sale hash, buyers hash, claims of the home
// bucket.
func ClaimKeys(tag string) []string { return []string{SaleKey(tag), BuyersKey(tag), ClaimsKey(tag)} }

// MarkerKeys is the KEYS of Finalize and Unmark: buyers hash, claims,
// released set of the home bucket.
func MarkerKeys(tag string) []string {
	return []string{BuyersKey(tag), ClaimsKey(tag), ReleasedKey(tag)}
}

// UnclaimKeys is Unclaim's KEYS: buyers hash and claims of the home bucket.
func UnclaimKeys(tag string) []string { return []string{BuyersKey(tag), ClaimsKey(tag)} }

// AckTrimKeys is AckTrim's KEYS: the orders stream.
func AckTrimKeys(tag string) []string { return []string{OrdersKey(tag)} }

// WaitMarkKey is a tag's WAIT mark: the inventory tier sets it, with a short
// TTL, on the connection of a reserve that answered an order it did not
// write (already purchased), so that the WAIT after it covers that order
// too (WAIT counts the writes of its own connection).
func WaitMarkKey(tag string) string { return "fg:{" + tag + "}:waitmark" }

// Keys and fields of a fair queue (the sale's Queue is "fair"); every key
// carries the sale's hash tag.

// QueueKey is the hash of a fair queue's entrants: user id → entry. An
// entry is "p" (entered before the start, not ranked yet), "r<rank>" (a
// pre-start entrant's place in the seed's order, 1-based, written by the
// leader at the start) or "l<n>" (the n-th entrant after the start).
func QueueKey(sale string) string { return "fg:{" + sale + "}:queue" }

// QueueLateKey is the list of the users who entered after the start, in
// arrival order (index n-1 holds arrival n).
func QueueLateKey(sale string) string { return "fg:{" + sale + "}:qlate" }

// QueueWindowsKey is the list of a fair queue's admission windows, oldest
// first: each entry "<k> <ms> <theta>" says positions up to k were admitted
// at unix millisecond ms (theta: queue_threshold then). QueueAdvance appends one
// when it admits and drops those whose window ended; it lives in Redis with
// the frontier, so a new leader keeps every window.
func QueueWindowsKey(sale string) string { return "fg:{" + sale + "}:qwin" }

// QueueJournalKey is the stream of a fair queue's new entries (field "e":
// "<entry> <user id>"), which the leader journals to the database in
// batches and then deletes (controlplane/queueleader).
func QueueJournalKey(sale string) string { return "fg:{" + sale + "}:qjournal" }

// QueuePowKey marks one proof-of-work challenge as used until its salt
// expires.
func QueuePowKey(sale, challenge string) string { return "fg:{" + sale + "}:pow:" + challenge }

// Fields of the sale hash that a fair queue adds. Positions count from 1:
// the pre-start entrants in the seed's order, then the later ones in
// arrival order (position queue_prequeued + n for arrival n).
const (
	FieldQueue                 = "queue"                   // "fair" for a fair queue, "draw" for a draw (draw.go)
	FieldQueueOpen             = "queue_open"              // "1" once the queue takes entries
	FieldQueueEpoch            = "queue_epoch"             // what the control plane derives the seed from, with the sale id
	FieldQueueSeedSHA          = "queue_seed_sha256"       // hex SHA-256 of the seed bytes
	FieldQueueStarted          = "queue_started"           // "1" from the start: entries are late ones
	FieldQueueSeed             = "queue_seed"              // the seed, hex, revealed at the start
	FieldQueuePrequeued        = "queue_prequeued"         // entrants before the start
	FieldQueueLate             = "queue_late"              // entrants after the start
	FieldQueueRanked           = "queue_ranked"            // "1" once the leader wrote every rank
	FieldQueueAdmitted         = "queue_admitted"          // positions admitted (1..queue_admitted)
	FieldQueueThreshold        = "queue_threshold"         // rank key of pre-start position min(queue_admitted, queue_prequeued), or ""
	FieldQueueExpired          = "queue_expired"           // positions whose window ended (1..queue_expired)
	FieldQueueExpiredThreshold = "queue_expired_threshold" // rank key of pre-start position min(queue_expired, queue_prequeued), or ""
	FieldQueueRate             = "queue_rate"              // positions admitted per minute, recently
	FieldQueueMaxNumber        = "queue_maxnumber"         // the proof-of-work's maxnumber now
	FieldQueueWindow           = "queue_window"            // admit_seconds
	FieldQueueFence            = "queue_fence"             // the fencing token of the last frontier write
	FieldQueuePromised         = "queue_promised"          // admitted buyers still promised a unit at the last advance
)

// QueueEnterKeys is QueueEnter's KEYS: sale hash, queue hash, late list,
// the proof-of-work marker (any key of the sale when there is none), the
// journal stream.
func QueueEnterKeys(sale, challenge string) []string {
	return []string{SaleKey(sale), QueueKey(sale), QueueLateKey(sale), QueuePowKey(sale, challenge), QueueJournalKey(sale)}
}

// QueueAdvanceKeys is QueueAdvance's KEYS: sale hash, buyers hash, windows
// list.
func QueueAdvanceKeys(sale string) []string {
	return []string{SaleKey(sale), BuyersKey(sale), QueueWindowsKey(sale)}
}

// QueueRestoreKeys is QueueRestore's KEYS: sale hash, queue hash, late
// list, windows list.
func QueueRestoreKeys(sale string) []string {
	return []string{SaleKey(sale), QueueKey(sale), QueueLateKey(sale), QueueWindowsKey(sale)}
}

// QueueRankKeys is QueueRank's KEYS: sale hash, queue hash.
func QueueRankKeys(sale string) []string { return []string{SaleKey(sale), QueueKey(sale)} }

// Return codes of QueueEnter (the first value of its answer).
const (
	EnterOK        = 0
	EnterNoSale    = 1
	EnterNotOpen   = 2
	EnterClosed    = 3
	EnterNotFair   = 4
	EnterSolveUsed = 5
)

// ReserveNotAdmitted answers Reserve (and each order of ReserveMany) in a
// fair queue for a buyer whose position is not admitted, or whose window
// has ended.
const ReserveNotAdmitted = 9

// RetakeHoldKeys is RetakeHold's KEYS: buyers hash, sale hash, retaken
// set, refusals hash, released set.
func RetakeHoldKeys(sale string) []string {
	return []string{BuyersKey(sale), SaleKey(sale), RetakenKey(sale), RetakeRefusedKey(sale), ReleasedKey(sale)}
}

// PauseOf reads a hash's start and resume fields, as an HMGET of
// FieldStart and FieldResume returns them (strings, or nil when absent): the
// hash's resume when it is paused for a rebuild (start is not "1" and
// resume is 1 or more), else 0. It is the one reading of a pause, for the
// failover watch and the order sinks alike.
func PauseOf(start, resume any) int {
	st, _ := start.(string)
	r, _ := resume.(string)
	n, _ := strconv.Atoi(r)
	if st == "1" || n < 1 {
		return 0
	}
	return n
}
