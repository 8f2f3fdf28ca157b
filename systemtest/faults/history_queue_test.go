package faults

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// qb builds a hand-made queue history; times are milliseconds after its
// start, and an end of -1 is no answer.
type qb struct{ h *qHistory }

func newQB() *qb { return &qb{h: newQHistory()} }

func (b *qb) at(ms int) time.Time {
	if ms < 0 {
		return time.Time{}
	}
	return b.h.base.Add(time.Duration(ms) * time.Millisecond)
}

func (b *qb) op(in qIn, res qRes, call, ret int) *qb {
	b.h.add(in, res, b.at(call), b.at(ret))
	return b
}

func (b *qb) enter(u string, res qRes, call, ret int) *qb {
	return b.op(qIn{kind: qEnter, user: u}, res, call, ret)
}

func (b *qb) status(src, u string, pos int64, res qRes, call, ret int) *qb {
	return b.op(qIn{kind: qStatus, src: src, user: u, pos: pos}, res, call, ret)
}

func (b *qb) frontier(src string, k int64, call, ret int) *qb {
	return b.op(qIn{kind: qFrontier, src: src, pos: k}, qOK, call, ret)
}

func (b *qb) buy(u string, res qRes, call, ret int) *qb {
	return b.op(qIn{kind: qBuy, user: u}, res, call, ret)
}

// TestQueueModel feeds the queue model good and bad histories: it must
// accept the first and reject each promise broken (the frontier moving
// back, admission out of rank order, an admitted buyer refused while units
// were unpromised, an acknowledged entry lost).
func TestQueueModel(t *testing.T) {
	const ok, bad = porcupine.Ok, porcupine.Illegal
	// A fair drop of 2 units: a, b, c enter; a and b admitted and buy; c
	// waits, then is refused sold_out once both units sold.
	good := func() *qb {
		return newQB().enter("a", qOK, 0, 10).enter("b", qOK, 5, 15).enter("c", qOK, 6, 20).
			frontier("g1", 0, 30, 31).status("g1", "a", 1, qWaiting, 30, 32).
			frontier("g1", 2, 40, 41).status("g1", "a", 1, qAdmitted, 42, 43).status("g2", "b", 2, qAdmitted, 42, 44).
			status("g2", "c", 3, qWaiting, 45, 46).
			buy("a", qOK, 50, 60).buy("b", qOK, 55, 58).
			frontier("g1", 3, 70, 71).status("g1", "c", 3, qAdmitted, 72, 73).buy("c", qSoldOut, 74, 80)
	}
	tests := []struct {
		name     string
		b        *qb
		entrants []string
		total    int
		want     porcupine.CheckResult
	}{
		{"a fair drop", good(), []string{"a", "b", "c"}, 2, ok},
		{"a fair drop, one purchase without an answer", newQB().enter("a", qOK, 0, 10).enter("b", qOK, 0, 10).
			status("g1", "a", 1, qAdmitted, 20, 21).status("g1", "b", 2, qAdmitted, 20, 21).
			buy("a", qNone, 30, -1).buy("b", qSoldOut, 40, 50), []string{"a", "b"}, 1, ok},
		{"two gateways, one behind the other", newQB().enter("a", qOK, 0, 10).enter("b", qOK, 0, 10).
			frontier("g1", 2, 20, 21).frontier("g2", 1, 22, 23).frontier("g2", 2, 30, 31), []string{"a", "b"}, 2, ok},
		{"concurrent reads may order either way", newQB().enter("a", qOK, 0, 10).
			frontier("g1", 2, 20, 40).frontier("g1", 1, 21, 30), []string{"a"}, 2, ok},
		{"an entry without an answer lost", newQB().enter("a", qOK, 0, 10).enter("b", qNone, 0, -1).
			status("g1", "b", 0, qGone, 20, 21), []string{"a"}, 2, ok},

		{"the frontier moves back", newQB().enter("a", qOK, 0, 10).
			frontier("g1", 2, 20, 21).frontier("g1", 1, 30, 31), []string{"a"}, 2, bad},
		{"admitted, then waiting again", newQB().enter("a", qOK, 0, 10).
			status("g1", "a", 1, qAdmitted, 20, 21).status("g1", "a", 1, qWaiting, 30, 31), []string{"a"}, 2, bad},
		{"admitted out of rank order", newQB().enter("a", qOK, 0, 10).enter("b", qOK, 0, 10).
			status("g1", "b", 2, qAdmitted, 20, 21).status("g1", "a", 1, qWaiting, 30, 31), []string{"a", "b"}, 2, bad},
		{"an admitted buyer refused while units were unpromised", newQB().enter("a", qOK, 0, 10).enter("b", qOK, 0, 10).
			status("g1", "a", 1, qAdmitted, 20, 21).buy("a", qOK, 30, 40).
			status("g1", "b", 2, qAdmitted, 41, 42).buy("b", qSoldOut, 50, 60), []string{"a", "b"}, 2, bad},
		{"more units sold than exist", newQB().enter("a", qOK, 0, 10).enter("b", qOK, 0, 10).
			buy("a", qOK, 30, 40).buy("b", qOK, 30, 40), []string{"a", "b"}, 1, bad},
		{"an acknowledged entry lost (the final read)", good(), []string{"a", "c"}, 2, bad},
		{"an acknowledged entry told to enter again", newQB().enter("a", qOK, 0, 10).
			status("g1", "a", 0, qGone, 20, 21), []string{"a"}, 2, bad},
	}
	// An entry acknowledged in a loss window the contract allows may be lost.
	excused := newQB().enter("a", qOK, 0, 10).enter("b", qOK, 100, 110)
	excused.h.mayLose(excused.at(50), excused.at(120))
	tests = append(tests, struct {
		name     string
		b        *qb
		entrants []string
		total    int
		want     porcupine.CheckResult
	}{"an entry lost inside an allowed loss window", excused, []string{"a"}, 2, ok})
	outside := newQB().enter("a", qOK, 0, 10).enter("b", qOK, 100, 110)
	outside.h.mayLose(outside.at(50), outside.at(120))
	tests = append(tests, struct {
		name     string
		b        *qb
		entrants []string
		total    int
		want     porcupine.CheckResult
	}{"an entry lost before an allowed loss window", outside, []string{"b"}, 2, bad})
	// One sent inside the window and answered after its end (the loss
	// returned first; the entry may have taken effect before it).
	straddle := newQB().enter("a", qOK, 0, 10).enter("b", qOK, 115, 130)
	straddle.h.mayLose(straddle.at(50), straddle.at(120))
	tests = append(tests, struct {
		name     string
		b        *qb
		entrants []string
		total    int
		want     porcupine.CheckResult
	}{"an entry sent in an allowed loss window and answered after it, lost", straddle, []string{"a"}, 2, ok})
	// One sent after the window's end is never excused.
	after := newQB().enter("a", qOK, 0, 10).enter("b", qOK, 125, 130)
	after.h.mayLose(after.at(50), after.at(120))
	tests = append(tests, struct {
		name     string
		b        *qb
		entrants []string
		total    int
		want     porcupine.CheckResult
	}{"an entry sent after an allowed loss window, lost", after, []string{"a"}, 2, bad})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _ := tt.b.h.check(tt.total, tt.entrants, tt.b.at(1000), 10*time.Second)
			if got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}
