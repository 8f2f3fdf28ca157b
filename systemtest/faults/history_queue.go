package faults

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// The queue model checks a fair sale's queue as its buyers saw it, for
// linearizability (porcupine). Its state is a lower bound of the admitted
// frontier, the range [lo, hi] of units sold to admitted buyers, and the
// entries acknowledged. Operations:
//
//	enter u → 201              u is acknowledged (an entry's promise)
//	enter u → other / none     no change (an entry without an answer may be lost)
//	status u p → admitted      the frontier is at least p → frontier ≥ p
//	status u p → waiting       the frontier is below p (legal iff frontier < p):
//	                           the frontier never moves back, so buyers are
//	                           admitted in rank order
//	status u → gone            the queue answers u must enter again (queue_reset,
//	                           not in the queue): legal iff u was never acknowledged
//	frontier k                 a read of admitted_position: legal iff k ≥ frontier
//	buy u → 201                an admitted buyer within the window: lo+1 ≤ total
//	buy u → sold_out           legal iff hi ≥ total: refused only once no unit may
//	                           be left unpromised
//	buy u → none               hi+1 (it may have taken a unit)
//	entrants U (final)         every acknowledged entry is in U: none lost
//
// Gateways cache the frontier and refresh it each on its own clock, so
// frontier and status operations are partitioned by the gateway that
// answered (each must be monotonic on its own); purchases form one more
// partition, and entries, the answers that an entry is gone and the final
// read another.

// qKind is a queue operation's kind.
type qKind uint8

const (
	qEnter qKind = iota
	qStatus
	qFrontier
	qBuy
	qEntrants
)

// qRes is a queue operation's outcome.
type qRes uint8

const (
	qOK       qRes = iota // 201 (enter, buy), or a value read
	qNone                 // no answer that counts (may have taken effect)
	qRefused              // enter refused, or any answer that changes nothing
	qAdmitted             // status: admitted
	qWaiting              // status: waiting
	qGone                 // status: must enter again
	qSoldOut              // buy: 409 sold_out
)

var qResName = [...]string{"ok", "no answer", "refused", "admitted", "waiting", "gone", "sold_out"}

// qIn is a queue operation's input.
type qIn struct {
	kind  qKind
	user  string
	src   string // the gateway that answered (status, frontier)
	pos   int64  // status: the user's position; frontier: the value read
	users string // entrants: ",u1,u2,"
}

// qOut is a queue operation's output.
type qOut struct{ res qRes }

// qState is the queue model's state.
type qState struct {
	k       int64
	lo, hi  int
	entered string // ",u1,u2,"
}

// queueModel is the queue model of a fair sale of total units.
func queueModel(total int) porcupine.Model {
	return porcupine.Model{
		Partition: partitionQueue,
		Init:      func() any { return qState{entered: ","} },
		Step: func(state, input, output any) (bool, any) {
			s, in, out := state.(qState), input.(qIn), output.(qOut)
			switch in.kind {
			case qEnter:
				if out.res == qOK && !strings.Contains(s.entered, ","+in.user+",") {
					// Kept sorted: states reached by entries in any order
					// are equal, so porcupine's cache folds them.
					us := append(strings.Split(strings.Trim(s.entered, ","), ","), in.user)
					slices.Sort(us)
					s.entered = "," + strings.Trim(strings.Join(us, ","), ",") + ","
				}
			case qStatus:
				switch out.res {
				case qAdmitted:
					s.k = max(s.k, in.pos)
				case qWaiting:
					if in.pos <= s.k {
						return false, s
					}
				case qGone:
					if strings.Contains(s.entered, ","+in.user+",") {
						return false, s
					}
				}
			case qFrontier:
				if in.pos < s.k {
					return false, s
				}
				s.k = in.pos
			case qBuy:
				switch out.res {
				case qOK:
					if s.lo+1 > total {
						return false, s
					}
					s.lo, s.hi = s.lo+1, min(s.hi+1, total)
				case qNone:
					s.hi = min(s.hi+1, total)
				case qSoldOut:
					if s.hi < total {
						return false, s
					}
				}
			case qEntrants:
				for _, u := range strings.Split(strings.Trim(s.entered, ","), ",") {
					if u != "" && !strings.Contains(in.users, ","+u+",") {
						return false, s
					}
				}
			}
			return true, s
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(qIn), output.(qOut)
			switch in.kind {
			case qEnter:
				return fmt.Sprintf("enter %s → %s", in.user, qResName[out.res])
			case qStatus:
				return fmt.Sprintf("status %s (position %d) at %s → %s", in.user, in.pos, in.src, qResName[out.res])
			case qFrontier:
				return fmt.Sprintf("frontier at %s → %d", in.src, in.pos)
			case qBuy:
				return fmt.Sprintf("buy %s (admitted) → %s", in.user, qResName[out.res])
			}
			return fmt.Sprintf("final entrants: %d", strings.Count(in.users, ",")-1)
		},
		DescribeState: func(state any) string {
			s := state.(qState)
			return fmt.Sprintf("frontier ≥ %d; units sold to admitted buyers in [%d, %d] of %d; %d entries acknowledged",
				s.k, s.lo, s.hi, total, strings.Count(s.entered, ",")-1)
		},
	}
}

// partitionQueue puts each gateway's frontier and status reads in a
// partition of its own, the rest in one.
func partitionQueue(ops []porcupine.Operation) [][]porcupine.Operation {
	by := map[string][]porcupine.Operation{}
	var srcs []string
	for _, o := range ops {
		in := o.Input.(qIn)
		key := ""
		if in.kind == qBuy {
			key = "buy" // the stock does not depend on the entries
		}
		if in.kind == qStatus || in.kind == qFrontier {
			key = "gw:" + in.src
			if in.kind == qStatus && o.Output.(qOut).res == qGone {
				key = "" // a lost entry is checked against the entries
			}
		}
		if _, ok := by[key]; !ok {
			srcs = append(srcs, key)
		}
		by[key] = append(by[key], o)
	}
	slices.Sort(srcs)
	out := make([][]porcupine.Operation, 0, len(srcs))
	for _, k := range srcs {
		out = append(out, by[k])
	}
	return out
}

// qHistory records a fair sale's queue operations; safe for concurrent use.
type qHistory struct {
	mu   sync.Mutex
	base time.Time
	ops  []porcupine.Operation
	// losses are the windows in which the contract lets an acknowledged
	// entry be lost (docs/api.md's failure table: a FLUSHALL loses the
	// entries of the leader's last step before it, not yet journaled).
	losses [][2]time.Time
}

// mayLose records that entries acknowledged from from to until may be
// lost.
func (h *qHistory) mayLose(from, until time.Time) {
	h.mu.Lock()
	h.losses = append(h.losses, [2]time.Time{from, until})
	h.mu.Unlock()
}

// excuse turns the acknowledged entries of a loss window into entries
// without an answer (they may be lost) and returns how many it turned: an
// entry answered from the window's start on and sent before its end (an
// entry sent before the loss returned may have taken effect before it,
// though its answer came after: the end is read when the loss returned).
func (h *qHistory) excuse(ops []porcupine.Operation) int {
	n := 0
	for i, o := range ops {
		if o.Input.(qIn).kind != qEnter || o.Output.(qOut).res != qOK {
			continue
		}
		for _, w := range h.losses {
			if c, r := h.base.Add(time.Duration(o.Call)), h.base.Add(time.Duration(o.Return)); !r.Before(w[0]) && !c.After(w[1]) {
				ops[i].Output = qOut{res: qNone}
				n++
				break
			}
		}
	}
	return n
}

func newQHistory() *qHistory { return &qHistory{base: time.Now()} }

// add records one operation invoked at call and answered at ret (a zero
// ret: no answer, it may take effect until the end).
func (h *qHistory) add(in qIn, res qRes, call, ret time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := int64(-1)
	if !ret.IsZero() {
		r = ret.Sub(h.base).Nanoseconds()
	}
	h.ops = append(h.ops, porcupine.Operation{ClientId: len(h.ops), Input: in, Output: qOut{res: res},
		Call: call.Sub(h.base).Nanoseconds(), Return: r})
}

// check ends the history with the final read of the entrants at end and
// checks it against the queue model of total units within timeout.
func (h *qHistory) check(total int, entrants []string, end time.Time, timeout time.Duration) (porcupine.CheckResult, porcupine.LinearizationInfo) {
	h.mu.Lock()
	ops := slices.Clone(h.ops)
	h.excuse(ops)
	h.mu.Unlock()
	e := end.Sub(h.base).Nanoseconds()
	for i := range ops {
		if ops[i].Return < 0 {
			ops[i].Return = e // unknown: in effect at any moment until the end
		}
		ops[i].Call = min(ops[i].Call, e)
	}
	ops = append(ops, porcupine.Operation{ClientId: len(ops), Input: qIn{kind: qEntrants, users: "," + strings.Join(entrants, ",") + ","},
		Output: qOut{}, Call: e, Return: e + 1})
	return porcupine.CheckOperationsVerbose(queueModel(total), ops, timeout)
}

// lost counts the entries acknowledged (201) whose user is not in entrants.
func (h *qHistory) lost(entrants []string) int { return len(h.lostEntries(entrants)) }

// lostEntries describes the entries acknowledged (201) whose user is not
// in entrants: user and when the 201 came.
func (h *qHistory) lostEntries(entrants []string) []string {
	in := map[string]bool{}
	for _, u := range entrants {
		in[u] = true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, o := range h.ops {
		if i := o.Input.(qIn); i.kind == qEnter && o.Output.(qOut).res == qOK && !in[i.user] {
			out = append(out, fmt.Sprintf("%s at %s", i.user, h.base.Add(time.Duration(o.Return)).Format("15:04:05.000")))
			in[i.user] = true
		}
	}
	return out
}

// diagnose checks each partition of the history (ended at end with the
// final read of entrants) on its own and names the ones the queue model
// rejects, each with its first operations of a kind that can be refused.
func (h *qHistory) diagnose(total int, entrants []string, end time.Time) []string {
	h.mu.Lock()
	ops := slices.Clone(h.ops)
	h.excuse(ops)
	h.mu.Unlock()
	e := end.Sub(h.base).Nanoseconds()
	for i := range ops {
		if ops[i].Return < 0 {
			ops[i].Return = e
		}
	}
	ops = append(ops, porcupine.Operation{ClientId: len(ops), Input: qIn{kind: qEntrants, users: "," + strings.Join(entrants, ",") + ","},
		Output: qOut{}, Call: e, Return: e + 1})
	m := queueModel(total)
	m.Partition = nil
	var out []string
	for _, p := range partitionQueue(ops) {
		if porcupine.CheckOperations(m, p) {
			continue
		}
		in := p[0].Input.(qIn)
		name := "entries and purchases"
		switch {
		case in.kind == qBuy:
			name = "purchases"
		case in.kind == qStatus || in.kind == qFrontier:
			name = "gateway " + in.src + "'s answers"
		}
		var sold, soldOut, gone int
		for _, o := range p {
			switch r := o.Output.(qOut).res; {
			case r == qSoldOut:
				soldOut++
			case r == qGone:
				gone++
			case o.Input.(qIn).kind == qBuy && r == qOK:
				sold++
			}
		}
		out = append(out, fmt.Sprintf("%s (%d operations: %d bought, %d admitted buyers refused sold_out, %d told to enter again)", name, len(p), sold, soldOut, gone))
	}
	return out
}
