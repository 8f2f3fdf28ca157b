//go:build faults

package faults

import (
	"strings"
	"testing"
	"time"
)

// TestRecoveryFiguresNeverARow (review of issue 35): a sale whose sinks
// are stuck for good — no 201 answered after the fault ever becomes a row —
// must not report its "201 → row" figure as met. rowLag is the worst over
// the 201s seen as rows only, so with none seen it is 0s, and the cell read
// "0s (3 never a row)" without the over-target mark that a 2.1s lag gets.
func TestRecoveryFiguresNeverARow(t *testing.T) {
	end := time.Now()
	var outs []outcome
	for i, id := range []string{"o1", "o2", "o3"} {
		at := end.Add(time.Duration(i+1) * 100 * time.Millisecond)
		outs = append(outs, outcome{user: id, final: "201", orderID: id,
			attempts: []attempt{{start: at.Add(-10 * time.Millisecond), end: at, status: 201}}})
	}
	w := &rowWatch{seen: map[string]time.Time{}} // the rows never came
	f := recoveryAt(end, outs, w)
	if f.unseen != 3 {
		t.Fatalf("unseen: got %d, want 3", f.unseen)
	}
	sellAgain, rows := f.cells(true)
	if !strings.Contains(sellAgain, "100ms") {
		t.Errorf("sells again: got %q, want 100ms", sellAgain)
	}
	if !strings.Contains(rows, "over "+rowTarget.String()) {
		t.Errorf("201 → row with no 201 ever a row: got %q, want it marked over the %v target", rows, rowTarget)
	}
}
