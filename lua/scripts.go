package lua

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

var (
	// saleStaticSrc defines write_sale_static, the one writer of a sale
	// hash's static fields; it is put in front of the scripts that create
	// a sale's hash (Prepare, Resync).
	//go:embed fragments/salestatic.lua
	saleStaticSrc string
	// giveBackSrc defines give_back, how a booked figure goes down; it is
	// put in front of the scripts that give units back (Release,
	// ReleaseBatch, Unretake).
	//go:embed fragments/giveback.lua
	giveBackSrc string
	// holdSrc defines hold_retake, what holding a pending retake's units
	// in a rebuilt sale writes; it is put in front of RetakeHold and
	// Resync.
	//go:embed fragments/hold.lua
	holdSrc string
	//go:embed reserve.lua
	reserveSrc string
	//go:embed release.lua
	releaseSrc string
	//go:embed prepare.lua
	prepareSrc string
	//go:embed setstate.lua
	setStateSrc string
	//go:embed resync.lua
	resyncSrc string
	//go:embed extend.lua
	extendSrc string
	//go:embed unlock.lua
	unlockSrc string
	//go:embed releasebatch.lua
	releaseBatchSrc string
	//go:embed restore.lua
	restoreSrc string
	//go:embed tally.lua
	tallySrc string
	//go:embed ledger.lua
	ledgerSrc string
	//go:embed shrink.lua
	shrinkSrc string
	//go:embed grant.lua
	grantSrc string
	//go:embed claim.lua
	claimSrc string
	//go:embed finalize.lua
	finalizeSrc string
	//go:embed unclaim.lua
	unclaimSrc string
	//go:embed unmark.lua
	unmarkSrc string
	//go:embed spillcheck.lua
	spillCheckSrc string
	//go:embed reservemany.lua
	reserveManySrc string
	//go:embed acktrim.lua
	ackTrimSrc string
	//go:embed replan.lua
	replanSrc string
	//go:embed mark.lua
	markSrc string
	//go:embed restored.lua
	restoredSrc string
	//go:embed restorebegin.lua
	restoreBeginSrc string
	//go:embed takefence.lua
	takeFenceSrc string
	//go:embed queueenter.lua
	queueEnterSrc string
	//go:embed queueopen.lua
	queueOpenSrc string
	//go:embed queuestart.lua
	queueStartSrc string
	//go:embed queuerank.lua
	queueRankSrc string
	//go:embed queueadvance.lua
	queueAdvanceSrc string
	//go:embed queuerestore.lua
	queueRestoreSrc string
	//go:embed retake.lua
	retakeSrc string
	//go:embed unretake.lua
	unretakeSrc string
	//go:embed retakehold.lua
	retakeHoldSrc string
	//go:embed drawenter.lua
	drawEnterSrc string
	//go:embed drawwithdraw.lua
	drawWithdrawSrc string
	//go:embed drawstate.lua
	drawStateSrc string
	//go:embed drawset.lua
	drawSetSrc string
)

// The scripts, each wrapped once; see the header of each .lua file for its
// KEYS, ARGV and return values.
var (
	Reserve  = redis.NewScript(reserveSrc)
	Release  = redis.NewScript(giveBackSrc + releaseSrc)
	Prepare  = redis.NewScript(saleStaticSrc + prepareSrc)
	SetState = redis.NewScript(setStateSrc)
	Resync   = redis.NewScript(saleStaticSrc + holdSrc + resyncSrc)
	Extend   = redis.NewScript(extendSrc)
	Unlock   = redis.NewScript(unlockSrc)

	ReleaseBatch = redis.NewScript(giveBackSrc + releaseBatchSrc)
	Restore      = redis.NewScript(restoreSrc)
	Tally        = redis.NewScript(tallySrc)

	// The moves of units between the buckets of a bucketed sale.
	Ledger = redis.NewScript(ledgerSrc)
	Shrink = redis.NewScript(shrinkSrc)
	Grant  = redis.NewScript(grantSrc)
	// Replan gives a bucket that sells nothing now its share of a re-sync
	// pass's plan again (the rebuilds of two passes at once).
	Replan = redis.NewScript(replanSrc)

	// The spill path of a bucketed sale (spill.go).
	Claim      = redis.NewScript(claimSrc)
	Finalize   = redis.NewScript(finalizeSrc)
	Unclaim    = redis.NewScript(unclaimSrc)
	Unmark     = redis.NewScript(unmarkSrc)
	SpillCheck = redis.NewScript(spillCheckSrc)

	// ReserveMany is Reserve for a batch of orders of one sale or bucket.
	ReserveMany = redis.NewScript(reserveManySrc)

	// AckTrim is the order sink's acknowledgement of committed entries,
	// which also removes them from the stream.
	AckTrim = redis.NewScript(ackTrimSrc)

	// Mark sets fields of a sale hash under the leader's fencing token;
	// TakeFence hands out fencing tokens (see docs/internals.md).
	Mark      = redis.NewScript(markSrc)
	TakeFence = redis.NewScript(takeFenceSrc)

	// Restored records a restore's id in a sale hash, for the final
	// Resync of its rebuild (ARGV[9] "1:<id>").
	Restored = redis.NewScript(restoredSrc)
	// RestoreBegin opens a rebuild's restore under the id its pages
	// (Restore) and its Restored carry (FieldRestoring).
	RestoreBegin = redis.NewScript(restoreBeginSrc)

	// The fair queue (its keys and fields in keys.go).
	QueueEnter   = redis.NewScript(queueEnterSrc)
	QueueOpen    = redis.NewScript(queueOpenSrc)
	QueueStart   = redis.NewScript(queueStartSrc)
	QueueRank    = redis.NewScript(queueRankSrc)
	QueueAdvance = redis.NewScript(queueAdvanceSrc)
	QueueRestore = redis.NewScript(queueRestoreSrc)

	// Retake takes an expired order's units again for a late payment.
	Retake = redis.NewScript(retakeSrc)
	// Unretake gives back the units a late payment took again when its
	// honoured order is refunded.
	Unretake = redis.NewScript(giveBackSrc + unretakeSrc)
	// RetakeHold holds, in a sale being rebuilt, the units of the retakes
	// the database records as pending, alone: the product holds them in
	// the rebuild's final Resync (ARGV[14 ..]), which counts them in the
	// same step; tests use it to place a hold at a chosen step.
	RetakeHold = redis.NewScript(holdSrc + retakeHoldSrc)

	// A draw sale's entries (their keys, fields and codes in draw.go).
	DrawEnter    = redis.NewScript(drawEnterSrc)
	DrawWithdraw = redis.NewScript(drawWithdrawSrc)
	DrawState    = redis.NewScript(drawStateSrc)
	DrawSet      = redis.NewScript(drawSetSrc)
)

// Return codes of Retake.
const (
	RetakeOK      = 0
	RetakeNoSale  = 1
	RetakeHolds   = 2
	RetakeSoldOut = 3
	// RetakeRetry: the sale is paused or being rebuilt (or a fair sale's
	// promises are unknown); nothing taken or recorded, ask again later.
	RetakeRetry = 4
	// RetakeClosed: the sale has closed; the late payment is refunded.
	RetakeClosed = 5
	// RetakeHeld: a rebuild held the units of the order's pending retake
	// (lua.RetakeHold); the late payment is refunded (the settler that
	// got the first answer may still honour it first).
	RetakeHeld = 6
)

// Refusals of a write whose fencing token is below the highest its sale's
// hash has seen (its fence field): SetState's answer, Resync's one-value
// answer, ReleaseBatch's first value, and the answer of Restore, Pause and
// Mark.
const (
	SetStateFenced     = -2
	ResyncFenced       = -2
	ReleaseBatchFenced = -3
	RestoreFenced      = -1
	PauseFenced        = -1
	MarkFenced         = -1
	RestoredFenced     = -1
	ReplanFenced       = -1
)

// Return codes of Reserve.
const (
	ReserveOK          = 0
	ReserveNoSale      = 1
	ReserveNotStarted  = 2
	ReserveClosed      = 3
	ReserveSoldOut     = 4
	ReservePurchased   = 5
	ReserveBadQuantity = 6
	ReservePaused      = 7
	// ReserveFenced answers a spill reserve (ARGV[7]) of an order the
	// leader fenced while settling its stale claim.
	ReserveFenced = 8
	// ReserveBadVariant answers an order whose variant (ARGV[8] of
	// Reserve) the sale does not sell: missing or unknown on a sale with
	// variants, or given for a sale of one stock. Nothing changed.
	ReserveBadVariant = 10
)

// Codes of Finalize (the first value of its answer).
const (
	FinalizeDone     = 1
	FinalizeAlready  = 0
	FinalizeReleased = -1
	FinalizeConflict = -2
)

// Return codes of Release.
const (
	ReleaseDone    = 1
	ReleaseAlready = 0
	ReleaseNoSale  = -1
)

// Codes of ReleaseBatch (the first value of its answer).
const (
	ReleaseBatchDone   = 0
	ReleaseBatchNoSale = -1
	// ReleaseBatchBehind: the sale hash's delivered count is below the
	// database's, so Redis lost releases it had; a re-sync restores them.
	ReleaseBatchBehind = -2
)

// RestoreLost is the answer of Restore and Restored when the hash's
// FieldRestoring is not the id of the caller's restore (RestoreBegin):
// Redis lost the sale since the restore began; nothing changed.
const (
	RestoreLost  = -2
	RestoredLost = -2
)

// RestoreBeginFenced is RestoreBegin's one-value answer {-1} to a token
// below the hash's fence.
const RestoreBeginFenced = -1

// ResyncRestore is Resync's one-value answer {-1}: Redis needs the sale's
// released set and buyers restored from the database first.
const ResyncRestore = -1
