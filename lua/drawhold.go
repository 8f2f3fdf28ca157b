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

//go:embed drawrestore.lua
var drawRestoreSrc string

// DrawRestore puts a page of a draw sale's database rows back into its
// entries and holds, for the rebuild of a sale Redis lost
// (drawrestore.lua).
var DrawRestore = redis.NewScript(drawRestoreSrc)

// DrawRestoreFenced is DrawRestore's answer to a token below the sale
// hash's fence.
const DrawRestoreFenced = -1

// DrawRestoreKeys is DrawRestore's KEYS: sale hash, entries hash, holds
// hash, checks.
func DrawRestoreKeys(sale string) []string {
	return []string{SaleKey(sale), DrawKey(sale), DrawHoldKey(sale), DrawCheckKey(sale)}
}
