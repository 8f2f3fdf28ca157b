package faults

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// hCheck is the outcome of checking a history.
type hCheck struct {
	ops, users    int
	foreign       int        // rows of users without a recorded purchase, not checked per user
	otherSales    int        // operations on other sales, left out
	kinds         [hRead]int // operations by kind, the final reads left out
	unknown       int        // operations without an answer that counts
	orders, stock porcupine.CheckResult
	badUsers      []string // users whose partition is not linearizable (at most 10)
	bad           int      // how many users' partitions are not linearizable
	// earlySoldOut counts sold_out answers given while units surely
	// remained (fewer purchases that may have taken a unit had been sent
	// than units on sale): allowed, the admission cap.
	earlySoldOut   int
	example        string // the first such user's operations, described
	took           time.Duration
	visualizations []string // files written
}

// ok reports whether both models accepted the history.
func (c hCheck) ok() bool { return c.orders == porcupine.Ok && c.stock == porcupine.Ok }

// String is the one-line summary for the report.
func (c hCheck) String() string {
	switch {
	case c.ok():
		return "linearizable: " + c.counts()
	case c.orders == porcupine.Illegal || c.stock == porcupine.Illegal:
		var what []string
		if c.orders == porcupine.Illegal {
			more := ""
			if c.bad > len(c.badUsers) {
				more = fmt.Sprintf(" and %d more", c.bad-len(c.badUsers))
			}
			what = append(what, fmt.Sprintf("orders of %s%s, e.g. %s", strings.Join(c.badUsers, ", "), more, c.example))
		}
		if c.stock == porcupine.Illegal {
			what = append(what, "stock")
		}
		return fmt.Sprintf("NOT linearizable: %s (%s)", strings.Join(what, "; "), c.counts())
	}
	return fmt.Sprintf("undecided: orders %s, stock %s after %v (%s)", c.orders, c.stock, c.took.Round(time.Second), c.counts())
}

// short is the report's cell: String, without the failure's details (the
// result column has them).
func (c hCheck) short() string {
	if c.ok() || (c.orders != porcupine.Illegal && c.stock != porcupine.Illegal) {
		return c.String()
	}
	var what []string
	if c.orders == porcupine.Illegal {
		what = append(what, fmt.Sprintf("orders of %d users", c.bad))
	}
	if c.stock == porcupine.Illegal {
		what = append(what, "stock")
	}
	return fmt.Sprintf("NOT linearizable: %s (%s)", strings.Join(what, "; "), c.counts())
}

// counts lists the operations by kind, e.g. "2625 purchase, 200 pay, 0
// unknown".
func (c hCheck) counts() string {
	var b strings.Builder
	for k, n := range c.kinds {
		if n > 0 || hKind(k) <= hRefund {
			fmt.Fprintf(&b, "%d %s, ", n, hKindName[k])
		}
	}
	fmt.Fprintf(&b, "%d unknown, %d users", c.unknown, c.users)
	if c.earlySoldOut > 0 {
		fmt.Fprintf(&b, ", %d sold_out while units surely remained (allowed: admission cap)", c.earlySoldOut)
	}
	if c.otherSales > 0 {
		fmt.Fprintf(&b, ", %d operations on other sales left out", c.otherSales)
	}
	if c.foreign > 0 {
		fmt.Fprintf(&b, ", %d rows of users without a recorded purchase left out", c.foreign)
	}
	return b.String()
}

// check checks the history, whose final read ended at end, against both
// models for a sale of total units, each within timeout. On a failure it
// writes porcupine's visualizations into dir (if not "").
func (h *history) check(sale string, total int, end time.Time, timeout time.Duration, dir string) hCheck {
	start := time.Now()
	ops, other := h.operations(sale, end)
	c := hCheck{ops: len(ops), otherSales: other}
	h.mu.Lock()
	c.foreign = h.foreign
	h.mu.Unlock()
	users := map[string]bool{}
	for _, o := range ops {
		if u := o.Input.(hInput).user; u != "" {
			users[u] = true
		}
		if o.Output.(hOutput).res == rUnknown {
			c.unknown++
		}
		if k := o.Input.(hInput).kind; k < hRead {
			c.kinds[k]++
		}
	}
	c.users = len(users)
	c.earlySoldOut = earlySoldOut(ops, total)
	om := orderModel()
	c.orders = porcupine.CheckOperationsTimeout(om, ops, timeout)
	if c.orders == porcupine.Illegal {
		// Name the users whose partition fails, and draw only theirs.
		var bad []porcupine.Operation
		lane := 0
		for _, part := range om.Partition(ops) {
			if porcupine.CheckOperationsTimeout(om, part, timeout) != porcupine.Illegal {
				continue
			}
			c.bad++
			if len(c.badUsers) < 10 {
				// Each user's operations get lanes of their own.
				c.badUsers = append(c.badUsers, part[0].Input.(hInput).user)
				part = lanes(part)
				n := 0
				for i := range part {
					n = max(n, part[i].ClientId+1)
					part[i].ClientId += lane
				}
				lane += n
				bad = append(bad, part...)
			}
			if c.example == "" {
				c.example = describePartition(part)
			}
		}
		if dir != "" && len(bad) > 0 {
			_, info := porcupine.CheckOperationsVerbose(om, bad, timeout)
			c.visualize(om, info, filepath.Join(dir, "history-orders.html"))
		}
	}
	h.mu.Lock()
	variants := h.variants
	h.mu.Unlock()
	sm := stockModel(total)
	sops := stockOps(ops)
	if variants != nil {
		sm = variantStockModel(variants)
	} else {
		// Without setVariants the sale is one stock, whatever its
		// purchases named.
		for i := range sops {
			in := sops[i].Input.(hInput)
			in.variant = ""
			sops[i].Input = in
		}
	}
	if dir == "" {
		c.stock = porcupine.CheckOperationsTimeout(sm, sops, timeout)
	} else {
		var info porcupine.LinearizationInfo
		c.stock, info = porcupine.CheckOperationsVerbose(sm, lanes(sops), timeout)
		if c.stock == porcupine.Illegal {
			c.visualize(sm, info, filepath.Join(dir, "history-stock.html"))
		}
	}
	c.took = time.Since(start)
	return c
}

// earlySoldOut counts the purchases answered sold_out although, when the
// answer came, fewer purchases that may have taken units (answered 201, or
// not answered) had been sent than there are units.
func earlySoldOut(ops []porcupine.Operation, total int) int {
	var sent []int64 // invocation times of purchases that may have taken a unit
	for _, o := range ops {
		if in := o.Input.(hInput); in.kind == hPurchase {
			if r := o.Output.(hOutput).res; r == rCreated || r == rUnknown {
				sent = append(sent, o.Call)
			}
		}
	}
	sort.Slice(sent, func(i, j int) bool { return sent[i] < sent[j] })
	n := 0
	for _, o := range ops {
		in, out := o.Input.(hInput), o.Output.(hOutput)
		if in.kind != hPurchase || out.answer != "409 sold_out" {
			continue
		}
		taken := sort.Search(len(sent), func(i int) bool { return sent[i] > o.Return })
		if total-taken >= max(in.qty, 1) {
			n++
		}
	}
	return n
}

// describePartition lists one user's operations by invocation, with
// their times in ms since the history began ("…" for no answer).
func describePartition(ops []porcupine.Operation) string {
	ops = append([]porcupine.Operation(nil), ops...)
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
	parts := make([]string, 0, len(ops))
	for i, o := range ops {
		if i == 12 {
			parts = append(parts, fmt.Sprintf("%d more", len(ops)-i))
			break
		}
		ret := fmt.Sprintf("%.0f", float64(o.Return)/1e6)
		if o.Output.(hOutput).res == rUnknown {
			ret = "…"
		}
		parts = append(parts, fmt.Sprintf("[%.0f–%s ms] %s", float64(o.Call)/1e6, ret, describeOp(o.Input, o.Output)))
	}
	return strings.Join(parts, "; ")
}

// lanes gives ops the fewest client ids (the drawing's lanes) such that
// the operations of one lane do not overlap.
func lanes(ops []porcupine.Operation) []porcupine.Operation {
	out := append([]porcupine.Operation(nil), ops...)
	idx := make([]int, len(out))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return out[idx[a]].Call < out[idx[b]].Call })
	var free []int64 // per lane: when its last operation returned
	for _, i := range idx {
		lane := -1
		for l, t := range free {
			if t < out[i].Call {
				lane = l
				break
			}
		}
		if lane < 0 {
			lane = len(free)
			free = append(free, 0)
		}
		free[lane] = out[i].Return
		out[i].ClientId = lane
	}
	return out
}

func (c *hCheck) visualize(m porcupine.Model, info porcupine.LinearizationInfo, path string) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return
	}
	if err := porcupine.VisualizePath(m, info, path); err == nil {
		c.visualizations = append(c.visualizations, path)
	}
}
