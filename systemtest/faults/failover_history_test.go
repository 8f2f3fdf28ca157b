//go:build faults

package faults

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/flashgate/flashgate"
)

// finalRows turns a final read of the database (its live and released
// orders) into the history's rows; an order that was released between the
// two reads is in both and counts as released.
func finalRows(released, live []flashgate.Order) []finalRow {
	seen := map[string]bool{}
	var rows []finalRow
	for _, o := range append(append([]flashgate.Order(nil), released...), live...) {
		if seen[o.ID] {
			continue
		}
		seen[o.ID] = true
		rows = append(rows, finalRow{id: o.ID, user: o.UserID, status: string(o.Status), qty: int(o.Quantity), variant: o.Variant})
	}
	return rows
}

// lagCheck ends one round's history (its own sale of lagUnits) with the
// final read that ran from readCall to readRet and checks it. A history
// that is not linearizable is drawn into the round's own directory under
// the test's artifact directory.
func lagCheck(t *testing.T, h *history, round int, sale string, rows []finalRow, readCall, readRet time.Time) hCheck {
	h.finish(sale, rows, readCall, readRet)
	c := h.check(sale, lagUnits, readCall, time.Minute, filepath.Join(t.ArtifactDir(), "round"+strconv.Itoa(round)))
	t.Logf("round %d history: %s, checked in %v", round, c, c.took.Round(time.Millisecond))
	return c
}

// lagHistories sums the rounds' checks (checks[i] is round rounds[i]) into
// the report's cell, and returns a problem for each round whose history
// was rejected and a note for each round the checker could not decide.
func lagHistories(checks []hCheck, rounds []int) (cell string, problems, notes []string) {
	var sum hCheck
	var bad, undecided []string
	for i, c := range checks {
		sum.ops += c.ops
		sum.users += c.users
		sum.foreign += c.foreign
		sum.otherSales += c.otherSales
		sum.unknown += c.unknown
		sum.earlySoldOut += c.earlySoldOut
		for k, n := range c.kinds {
			sum.kinds[k] += n
		}
		switch {
		case c.ok():
		case c.orders == porcupine.Illegal || c.stock == porcupine.Illegal:
			bad = append(bad, strconv.Itoa(rounds[i]))
			where := ""
			if len(c.visualizations) > 0 {
				where = " (drawn in " + strings.Join(c.visualizations, ", ") + ")"
			}
			problems = append(problems, fmt.Sprintf("HISTORY: round %d: %s%s", rounds[i], c, where))
		default:
			undecided = append(undecided, strconv.Itoa(rounds[i]))
			notes = append(notes, fmt.Sprintf("round %d: history %s", rounds[i], c))
		}
	}
	switch {
	case len(checks) == 0:
		return "–", nil, nil
	case len(bad) > 0:
		cell = fmt.Sprintf("NOT linearizable in round(s) %s of %d", strings.Join(bad, ", "), len(checks))
	case len(undecided) > 0:
		cell = fmt.Sprintf("undecided in round(s) %s of %d, linearizable in the rest", strings.Join(undecided, ", "), len(checks))
	default:
		cell = fmt.Sprintf("linearizable in each of %d rounds (each its own sale)", len(checks))
	}
	return cell + ": " + sum.counts() + " in all", problems, notes
}
