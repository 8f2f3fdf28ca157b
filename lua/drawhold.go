package lua

import (
	_ "embed" // drawhold.lua
	"strings"

	"github.com/redis/go-redis/v9"
)

// The card holds of a draw sale's entries (controlplane/drawhold): which
// intent holds for which entry, and which holds the read path still has
// to look at. Every key carries the sale's hash tag.

// DrawHoldKey is the hash of a draw sale's holds: entry id → "<intent id>
// <user id>" (ParseDrawHold), written once per entry by DrawHold.
func DrawHoldKey(sale string) string { return "fg:{" + sale + "}:dholds" }

// DrawCheckKey is the sorted set of the entries whose hold is neither
// authorised nor released yet, scored by when the read path looks at it
// next (unix milliseconds).
func DrawCheckKey(sale string) string { return "fg:{" + sale + "}:dcheck" }

// DrawHoldKeys is DrawHold's KEYS: sale hash, entries hash, journal,
// holds hash, checks.
func DrawHoldKeys(sale string) []string {
	return []string{SaleKey(sale), DrawKey(sale), DrawJournalKey(sale), DrawHoldKey(sale), DrawCheckKey(sale)}
}

// DrawJournalIntent is the field of a draw journal entry that names the
// entry's hold (written by DrawHold beside "e").
const DrawJournalIntent = "pi"

//go:embed drawhold.lua
var drawHoldSrc string

// DrawHold records the intent of a draw entry's card hold (drawhold.lua).
var DrawHold = redis.NewScript(drawHoldSrc)

// ParseDrawHold reads a hold as DrawHoldKey holds it; ok is false for a
// value not of that shape.
func ParseDrawHold(v string) (intent, user string, ok bool) {
	intent, user, ok = strings.Cut(v, " ")
	return intent, user, ok && intent != "" && user != ""
}

var (
	// drawRowsSrc defines put_draw_rows, how a database row moves a draw
	// entry in Redis; it is put in front of DrawRestore and DrawReapply.
	//go:embed fragments/drawrows.lua
	drawRowsSrc string
	//go:embed drawrestore.lua
	drawRestoreSrc string
	//go:embed drawrestoremark.lua
	drawRestoreMarkSrc string
	//go:embed drawtrim.lua
	drawTrimSrc string
	//go:embed drawreapply.lua
	drawReapplySrc string
)

// DrawRestore puts a page of a draw sale's database rows back into its
// entries and holds, for the rebuild of a sale Redis lost
// (drawrestore.lua).
var DrawRestore = redis.NewScript(drawRowsSrc + drawRestoreSrc)

// DrawRestoreMark records in a draw sale's hash (FieldDrawRestore) that a
// rebuild's restore of its entries begins, before it reads the rows
// (drawrestoremark.lua); KEYS: the sale hash.
var DrawRestoreMark = redis.NewScript(drawRestoreMarkSrc)

// DrawRestoreMarkFenced is DrawRestoreMark's answer to a token below the
// sale hash's fence.
const DrawRestoreMarkFenced = -1

// DrawTrim deletes the stream entries a journal's flush wrote, unless a
// restore began since the flush read them (drawtrim.lua).
var DrawTrim = redis.NewScript(drawTrimSrc)

// DrawTrimRestored is DrawTrim's answer when the sale hash's
// FieldDrawRestore is not the one the flush read: nothing deleted, and the
// flush puts its rows into Redis (DrawReapply).
const DrawTrimRestored = -1

// DrawTrimKeys is DrawTrim's KEYS: sale hash, journal.
func DrawTrimKeys(sale string) []string { return []string{SaleKey(sale), DrawJournalKey(sale)} }

// DrawReapply puts the rows a journal's flush wrote, read back, into a
// draw sale's entries and holds after a restore began during the flush
// (drawreapply.lua); its KEYS are DrawRestoreKeys.
var DrawReapply = redis.NewScript(drawRowsSrc + drawReapplySrc)

// DrawReapplyLost is DrawReapply's answer when the sale hash has no
// FieldDrawRestore (Redis lost the sale again): nothing changed.
const DrawReapplyLost = -1

// DrawRestoreFenced is DrawRestore's answer to a token below the sale
// hash's fence.
const DrawRestoreFenced = -1

// DrawRestoreLost is DrawRestore's answer when the sale hash's
// FieldDrawRestore is not the restore's id (Redis lost the sale since the
// restore's DrawRestoreMark, or another restore began): nothing changed.
const DrawRestoreLost = -2

// DrawRestoreKeys is DrawRestore's KEYS: sale hash, entries hash, holds
// hash, checks.
func DrawRestoreKeys(sale string) []string {
	return []string{SaleKey(sale), DrawKey(sale), DrawHoldKey(sale), DrawCheckKey(sale)}
}
