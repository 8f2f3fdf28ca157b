//go:build faults

package faults

import (
	"fmt"
	"sort"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/draw"
)

// The draw's model: what must hold once a draw's close finished, whatever
// failed on the way (the leader killed mid-draw, the provider answering
// 429, 500 or slowly, webhooks duplicated and reordered). Checked on the
// final state: the published entries file, the provider's own ledger of
// intents (the stand-in's), the order rows, and what the entrants did
// (withdrew, held a card whose capture the provider declines).
//
// The charged entries are fixed by the file and the declines alone: in
// each variant, walking the file's entries in the seed's order, an entry
// whose capture is not declined is charged while the variant has units
// left (each entry here asks for one unit, so every later one fits), as
// the close promotes the next entrant in place of a winner whose capture
// failed. Every other entry's hold is released.

// drawEntrant is one entry as its entrant made it.
type drawEntrant struct {
	ID, User, Variant, Intent string
	// Withdrawn: the entrant withdrew it before the close (answered 200).
	Withdrawn bool
	// Declines: its card authorises the hold but the provider declines
	// its capture.
	Declines bool
}

// drawIntent is a PaymentIntent as the provider holds it at the end.
type drawIntent struct {
	ID, EntryID, Status string
}

// drawFinal is the final state the draw's model reads.
type drawFinal struct {
	Stock    map[string]int // the units of each variant, as the sale was created
	File     *draw.File     // the published entries file
	Entrants []drawEntrant
	Intents  []drawIntent
	Orders   map[string]flashgate.Order // the sale's rows by id
}

// drawVerdict counts the broken promises of a draw.
type drawVerdict struct {
	ChargedTwice      int // an entry with more than one captured intent
	LosersCharged     int // a captured entry that is not among those to charge
	WinnersUncaptured int // an entry to charge (a unit and it remained) not captured
	HoldsLeft         int // an intent neither captured nor released
	UnitsNotRows      int // a variant whose captured units differ from its paid rows, or a paid row of no captured entry
	OverStock         int // a variant with more paid rows than units
	FileBad           int // the file does not verify, or disagrees with the sale
	WithdrawnDrawn    int // a withdrawn entry in the draw
	Entries, Drawn    int
	Captured          int
	Released          int
	Promoted          int // charged entries the file says lost
	problems          []string
}

func (v drawVerdict) String() string {
	return fmt.Sprintf("%d entries, %d drawn, %d captured (%d promoted), %d released; charged twice %d, losers charged %d, "+
		"winners left uncaptured %d, holds neither captured nor released %d, units captured ≠ paid rows %d, over stock %d, file not verifying %d, withdrawn entries drawn %d",
		v.Entries, v.Drawn, v.Captured, v.Promoted, v.Released, v.ChargedTwice, v.LosersCharged, v.WinnersUncaptured, v.HoldsLeft,
		v.UnitsNotRows, v.OverStock, v.FileBad, v.WithdrawnDrawn)
}

// ok reports whether every promise held.
func (v drawVerdict) ok() bool {
	return v.ChargedTwice == 0 && v.LosersCharged == 0 && v.WinnersUncaptured == 0 && v.HoldsLeft == 0 &&
		v.UnitsNotRows == 0 && v.OverStock == 0 && v.FileBad == 0 && v.WithdrawnDrawn == 0
}

func (v *drawVerdict) problem(counter *int, format string, args ...any) {
	*counter++
	if len(v.problems) < 20 {
		v.problems = append(v.problems, fmt.Sprintf(format, args...))
	}
}

// checkDraw judges the final state f.
func checkDraw(f drawFinal) drawVerdict {
	v := drawVerdict{Entries: len(f.Entrants)}
	if f.File == nil {
		v.problem(&v.FileBad, "no entries file")
		return v
	}
	if _, err := draw.Verify(f.File); err != nil {
		v.problem(&v.FileBad, "the entries file does not verify: %v", err)
	}
	for id, n := range f.Stock {
		if f.File.Stock[id] != n {
			v.problem(&v.FileBad, "the file's stock of %s is %d, the sale's %d", id, f.File.Stock[id], n)
		}
	}
	byID := map[string]drawEntrant{}
	for _, e := range f.Entrants {
		byID[e.ID] = e
	}
	// The entries to charge: per variant, in the file's (the seed's)
	// order, the first ones whose capture is not declined.
	charge := map[string]bool{}
	left := map[string]int{}
	for id, n := range f.File.Stock {
		left[id] = n
	}
	won := map[string]bool{}
	for _, e := range f.File.Entries {
		v.Drawn++
		won[e.ID] = e.Won
		if byID[e.ID].Withdrawn {
			v.problem(&v.WithdrawnDrawn, "entry %s was withdrawn, yet drawn", e.ID)
		}
		if byID[e.ID].Declines || left[e.Variant] < e.Quantity {
			continue
		}
		left[e.Variant] -= e.Quantity
		charge[e.ID] = true
	}
	// The provider's ledger.
	captured := map[string]int{}
	perVariant := map[string]int{}
	for _, in := range f.Intents {
		switch in.Status {
		case flashgate.IntentSucceeded:
			captured[in.EntryID]++
			v.Captured++
			perVariant[byID[in.EntryID].Variant]++
		case flashgate.IntentCanceled:
			v.Released++
		default:
			v.problem(&v.HoldsLeft, "intent %s of entry %s is %s: neither captured nor released", in.ID, in.EntryID, in.Status)
		}
	}
	ids := make([]string, 0, len(captured))
	for id := range captured {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if captured[id] > 1 {
			v.problem(&v.ChargedTwice, "entry %s charged %d times", id, captured[id])
		}
		if !charge[id] {
			v.problem(&v.LosersCharged, "entry %s charged, but not among the entries to charge (won in the file: %v)", id, won[id])
		} else if !won[id] {
			v.Promoted++
		}
	}
	for _, e := range f.File.Entries {
		if charge[e.ID] && captured[e.ID] == 0 {
			v.problem(&v.WinnersUncaptured, "entry %s (%s) should be charged: units of its variant and it remained, but it was not captured", e.ID, e.Variant)
		}
	}
	// The order rows: one paid row per captured entry ("o" and the entry
	// id), and no more than the variant's units.
	paid := map[string]int{}
	for id, o := range f.Orders {
		if o.Status != flashgate.StatusPaid {
			continue
		}
		paid[o.Variant] += int(o.Quantity)
		if len(id) < 2 || captured[id[1:]] == 0 {
			v.problem(&v.UnitsNotRows, "order %s is paid, but no captured entry %s", id, id[min(1, len(id)):])
		}
	}
	for id, n := range f.Stock {
		if paid[id] != perVariant[id] {
			v.problem(&v.UnitsNotRows, "variant %s: %d units captured, %d paid order rows", id, perVariant[id], paid[id])
		}
		if paid[id] > n {
			v.problem(&v.OverStock, "variant %s: %d paid order rows for %d units", id, paid[id], n)
		}
	}
	return v
}
