package lua

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
	FieldQueue                 = "queue"                   // "fair" for a fair queue
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
