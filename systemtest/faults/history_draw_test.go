//go:build faults

package faults

import (
	"testing"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/draw"
)

// TestCheckDraw: the draw's model finds each broken promise in a final
// state made to break it, and none in a sound one.
func TestCheckDraw(t *testing.T) {
	// sound: variant S has 2 units and 4 entries; e2's capture is
	// declined, so e3 is promoted in its place; e4 lost and is released;
	// e5 was withdrawn and released. Variant M: 1 unit, m1 wins.
	sound := func() drawFinal {
		entries := []draw.Entry{{ID: "e1", Variant: "S", Quantity: 1}, {ID: "e2", Variant: "S", Quantity: 1},
			{ID: "e3", Variant: "S", Quantity: 1}, {ID: "e4", Variant: "S", Quantity: 1}, {ID: "m1", Variant: "M", Quantity: 1}}
		stock := map[string]int{"S": 2, "M": 1}
		file, err := draw.New("s", []byte("0123456789abcdef0123456789abcdef"), stock, entries)
		if err != nil {
			t.Fatal(err)
		}
		// Which of S's entries the seed put first is the seed's; the
		// ledger follows the file's order.
		var order []string
		for _, e := range file.Entries {
			if e.Variant == "S" {
				order = append(order, e.ID)
			}
		}
		f := drawFinal{Stock: map[string]int{"S": 2, "M": 1}, File: file, Orders: map[string]flashgate.Order{}}
		declines := order[1]
		for _, id := range []string{"e1", "e2", "e3", "e4", "e5", "m1"} {
			variant := "S"
			if id == "m1" {
				variant = "M"
			}
			f.Entrants = append(f.Entrants, drawEntrant{ID: id, Variant: variant, Intent: "pi_" + id, Withdrawn: id == "e5", Declines: id == declines})
		}
		for _, id := range []string{order[0], order[2], "m1"} {
			f.Intents = append(f.Intents, drawIntent{ID: "pi_" + id, EntryID: id, Status: flashgate.IntentSucceeded})
			variant := "S"
			if id == "m1" {
				variant = "M"
			}
			f.Orders["o"+id] = flashgate.Order{ID: "o" + id, Quantity: 1, Variant: variant, Status: flashgate.StatusPaid}
		}
		for _, id := range []string{order[1], order[3], "e5"} {
			f.Intents = append(f.Intents, drawIntent{ID: "pi_" + id, EntryID: id, Status: flashgate.IntentCanceled})
		}
		return f
	}
	idx := func(f *drawFinal, entry string) int {
		for i, in := range f.Intents {
			if in.EntryID == entry {
				return i
			}
		}
		t.Fatalf("no intent of %s", entry)
		return -1
	}
	sOrder := func(f *drawFinal) []string {
		var ids []string
		for _, e := range f.File.Entries {
			if e.Variant == "S" {
				ids = append(ids, e.ID)
			}
		}
		return ids
	}
	cases := []struct {
		name   string
		break_ func(f *drawFinal)
		check  func(v drawVerdict) int
	}{
		{"sound", func(*drawFinal) {}, func(v drawVerdict) int { return btoi(!v.ok()) }},
		{"charged twice", func(f *drawFinal) {
			f.Intents = append(f.Intents, drawIntent{ID: "pi_again", EntryID: "m1", Status: flashgate.IntentSucceeded})
		}, func(v drawVerdict) int { return v.ChargedTwice }},
		{"loser charged", func(f *drawFinal) {
			last := sOrder(f)[3]
			f.Intents[idx(f, last)].Status = flashgate.IntentSucceeded
		}, func(v drawVerdict) int { return v.LosersCharged }},
		{"winner left uncaptured", func(f *drawFinal) {
			first := sOrder(f)[0]
			f.Intents[idx(f, first)].Status = flashgate.IntentCanceled
			delete(f.Orders, "o"+first)
		}, func(v drawVerdict) int { return v.WinnersUncaptured }},
		{"hold left", func(f *drawFinal) { f.Intents[idx(f, "e5")].Status = flashgate.IntentRequiresCapture }, func(v drawVerdict) int { return v.HoldsLeft }},
		{"captured without its row", func(f *drawFinal) { delete(f.Orders, "om1") }, func(v drawVerdict) int { return v.UnitsNotRows }},
		{"over stock", func(f *drawFinal) {
			f.Stock["M"], f.File.Stock["M"] = 0, 0
		}, func(v drawVerdict) int { return v.OverStock }},
		{"a result changed in the file", func(f *drawFinal) {
			for i := range f.File.Entries {
				if f.File.Entries[i].ID == "m1" {
					f.File.Entries[i].Won = false
				}
			}
		}, func(v drawVerdict) int { return v.FileBad }},
		{"a withdrawn entry drawn", func(f *drawFinal) {
			for i := range f.Entrants {
				if f.Entrants[i].ID == sOrder(f)[3] {
					f.Entrants[i].Withdrawn = true
				}
			}
		}, func(v drawVerdict) int { return v.WithdrawnDrawn }},
	}
	for _, tc := range cases {
		f := sound()
		tc.break_(&f)
		v := checkDraw(f)
		got, want := tc.check(v), 1
		if tc.name == "sound" {
			want = 0
		}
		if got < want || (want == 0 && got != 0) {
			t.Errorf("%s: got %d, want %d (%s; %v)", tc.name, got, want, v, v.problems)
		}
	}
}
