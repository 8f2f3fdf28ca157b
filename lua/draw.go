package lua

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/flashgate/flashgate"
)

// Keys and fields of a draw sale (the sale's Queue is "draw",
// flashgate.QueueDraw); every key carries the sale's hash tag. A proof of
// work's solution is marked with QueuePowKey, as the fair queue's.

// DrawKey is the hash of a draw sale's entries: user id → entry,
// "<state> <entry id> <quantity> <variant>" (ParseDrawEntry), variant ""
// on a sale of one stock. One entry per buyer across the variants.
func DrawKey(sale string) string { return "fg:{" + sale + "}:draw" }

// DrawJournalKey is the stream of a draw sale's entry changes (field "e":
// "<state> <entry id> <quantity> <variant> <user id>"), which a journal
// writes to the database in batches.
func DrawJournalKey(sale string) string { return "fg:{" + sale + "}:djournal" }

// Fields of the sale hash that a draw adds. The window is static (written
// by write_sale_static from Prepare's or Resync's queue argument,
// DrawQueueArg); the counts change as entries do.
const (
	FieldDrawOpen  = "draw_open"  // entries taken from this unix millisecond
	FieldDrawClose = "draw_close" // until (not at) this unix millisecond
	// FieldDrawEntries counts the entries ever made (a re-entry after a
	// withdrawal counts again); VariantField(id, FieldDrawEntries) those
	// of one variant.
	FieldDrawEntries = "draw_entries"
	// Written by the control plane's draw (controlplane/drawclose):
	// FieldDrawSeedSHA is the seed's commitment (SHA-256, hex), from the
	// opening of entries; FieldDrawSeed the seed (hex), revealed at the
	// close; FieldDrawWinners the draw's winners; FieldDrawPromoted the
	// entrants charged in place of a winner whose capture failed;
	// FieldDrawDone "1" once the close finished.
	FieldDrawSeedSHA  = "draw_seed_sha256"
	FieldDrawSeed     = "draw_seed"
	FieldDrawWinners  = "draw_winners"
	FieldDrawPromoted = "draw_promoted"
	FieldDrawDone     = "draw_done"
	// FieldDrawShut is "1" once the control plane's close began (written
	// before its final flush of the journal): the entry scripts then take
	// no entry, withdrawal or authorisation whatever their caller's clock
	// says, so that every change the draw does not see is refused, not
	// lost.
	FieldDrawShut = "draw_shut"
	// FieldDrawRestore is the id of the last restore of the sale's entries
	// that began (DrawRestoreMark, written by a rebuild before it reads
	// the rows): a journal's flush reads it with the journal and compares
	// it at its trim (DrawTrim).
	FieldDrawRestore = "draw_restore"
)

// DrawStateField is the sale hash field counting the entries now in state
// st: "draw_pending", "draw_entered", ….
func DrawStateField(st flashgate.DrawEntryState) string { return "draw_" + string(st) }

// DrawQueueArg is the queue argument of Prepare (ARGV[6]) and Resync
// (ARGV[11]) for sale s: "fair" for a fair queue, "draw:<open ms>:<close
// ms>" for a draw with its window, "" for a first-come sale.
func DrawQueueArg(s flashgate.Sale) string {
	switch {
	case s.Fair():
		return flashgate.QueueFair
	case s.Draw() && s.EntriesOpenAt != nil && s.EntriesCloseAt != nil:
		return DrawWindowArg(*s.EntriesOpenAt, *s.EntriesCloseAt)
	case s.Draw():
		return flashgate.QueueDraw // a draw that takes no entry, but no purchase either
	}
	return ""
}

// DrawWindowArg is the queue argument "draw:<open ms>:<close ms>".
func DrawWindowArg(open, close time.Time) string {
	return "draw:" + strconv.FormatInt(open.UnixMilli(), 10) + ":" + strconv.FormatInt(close.UnixMilli(), 10)
}

// DrawEnterKeys is DrawEnter's KEYS: sale hash, entries hash, the
// proof-of-work marker (any key of the sale when there is none), journal.
func DrawEnterKeys(sale, challenge string) []string {
	return []string{SaleKey(sale), DrawKey(sale), QueuePowKey(sale, challenge), DrawJournalKey(sale)}
}

// DrawWithdrawKeys is DrawWithdraw's KEYS: sale hash, entries hash,
// journal, holds hash, checks.
func DrawWithdrawKeys(sale string) []string {
	return []string{SaleKey(sale), DrawKey(sale), DrawJournalKey(sale), DrawHoldKey(sale), DrawCheckKey(sale)}
}

// DrawChangeKeys is the KEYS of DrawSet: sale hash,
// entries hash, journal.
func DrawChangeKeys(sale string) []string {
	return []string{SaleKey(sale), DrawKey(sale), DrawJournalKey(sale)}
}

// DrawStateKeys is DrawState's KEYS: sale hash, entries hash, checks
// zset.
func DrawStateKeys(sale string) []string {
	return []string{SaleKey(sale), DrawKey(sale), DrawCheckKey(sale)}
}

// Return codes of the draw scripts (the first value of each answer). The
// values of reserve's codes with the same meaning are the same.
const (
	DrawOK           = 0
	DrawNoSale       = 1
	DrawNotOpen      = 2
	DrawClosed       = 3
	DrawNotDraw      = 4
	DrawSolveUsed    = 5
	DrawBadQuantity  = 6
	DrawBadVariant   = 10
	DrawNoEntry      = 11
	DrawWrongState   = 12
	DrawReserveFlag  = "draw" // Reserve's ARGV[9] and ReserveMany's last ARGV on the draw's close path
	drawEntryMinimum = 4      // values of an entry: state, id, quantity, variant
)

// Errors of the draw scripts' refusals, each wrapping its sentinel.
var (
	errDrawNoSale      = fmt.Errorf("draw: no such sale: %w", flashgate.ErrNotFound)
	errDrawNotOpen     = fmt.Errorf("draw: entries not open yet: %w", flashgate.ErrNotStarted)
	errDrawClosed      = fmt.Errorf("draw: entries closed: %w", flashgate.ErrClosed)
	errDrawNotDraw     = fmt.Errorf("draw: the sale is not a draw: %w", flashgate.ErrNotFound)
	errDrawSolveUsed   = &flashgate.FieldError{Field: "payload", Reason: "the solution was used already"}
	errDrawBadQuantity = &flashgate.FieldError{Field: "quantity", Reason: "not a whole number in 1..per_user"}
	errDrawBadVariant  = &flashgate.FieldError{Field: "variant", Reason: "not a variant the sale sells"}
	errDrawNoEntry     = fmt.Errorf("draw: no entry: %w", flashgate.ErrNotFound)
	errDrawWrongState  = fmt.Errorf("draw: the entry is in another state: %w", flashgate.ErrNotPayable)
)

// DrawError is the one switch from a draw script's code to its error: nil
// for DrawOK, a wrapped sentinel for the others (ErrNotFound, ErrNotStarted,
// ErrClosed, ErrBadRequest as a *flashgate.FieldError, ErrNotPayable for an
// entry in a state the step does not move).
func DrawError(code int64) error {
	switch code {
	case DrawOK:
		return nil
	case DrawNoSale:
		return errDrawNoSale
	case DrawNotOpen:
		return errDrawNotOpen
	case DrawClosed:
		return errDrawClosed
	case DrawNotDraw:
		return errDrawNotDraw
	case DrawSolveUsed:
		return errDrawSolveUsed
	case DrawBadQuantity:
		return errDrawBadQuantity
	case DrawBadVariant:
		return errDrawBadVariant
	case DrawNoEntry:
		return errDrawNoEntry
	case DrawWrongState:
		return errDrawWrongState
	}
	return fmt.Errorf("draw: unknown script code %d", code)
}

// ParseDrawEntry reads an entry as DrawKey holds it; ok is false for a
// value not of that shape.
func ParseDrawEntry(v string) (st flashgate.DrawEntryState, id string, qty int64, variant string, ok bool) {
	parts := strings.SplitN(v, " ", drawEntryMinimum)
	if len(parts) != drawEntryMinimum {
		return "", "", 0, "", false
	}
	q, err := strconv.ParseInt(parts[2], 10, 64)
	st = flashgate.DrawEntryState(parts[0])
	if err != nil || !st.Valid() || parts[1] == "" {
		return "", "", 0, "", false
	}
	return st, parts[1], q, parts[3], true
}
