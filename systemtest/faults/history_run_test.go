//go:build faults

package faults

import (
	"context"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// checkHistory ends the scenario's history with a read of every order row
// of the sale and checks it (history.go). A history that is not
// linearizable is a problem; its visualization is written into the test's
// artifact directory (`make faults` keeps it under bin/faults). A check
// that runs out of time is noted.
func (x *run) checkHistory(ctx context.Context) hCheck {
	readCall := time.Now()
	live, err := x.c.db.LiveOrders(ctx, x.sale)
	if err != nil {
		x.problem("history: reading live orders: %v", err)
		return hCheck{}
	}
	released, err := x.c.db.ReleasedOrders(ctx, x.sale)
	if err != nil {
		x.problem("history: reading released orders: %v", err)
		return hCheck{}
	}
	readRet := time.Now()
	// An order that expired between the two reads is in both: it is
	// released.
	seen := map[string]int{}
	var rows []finalRow
	for _, o := range append(released, live...) {
		if _, dup := seen[o.ID]; dup {
			continue
		}
		seen[o.ID] = len(rows)
		rows = append(rows, finalRow{id: o.ID, user: o.UserID, status: string(o.Status), qty: int(o.Quantity), variant: o.Variant})
	}
	x.mu.Lock()
	flushedAt := x.flushedAt
	x.mu.Unlock()
	if x.c.hist.lossWindows() == 0 && !flushedAt.IsZero() {
		// The scenario set flushedAt (checkAll's allowance for orders a
		// fault destroyed) without a window of its own: any moment since.
		x.c.hist.flushed(flushedAt, readCall)
	}
	x.c.hist.finish(x.sale, rows, readCall, readRet)
	c := x.c.hist.check(x.sale, int(x.sc.total), readCall, 2*time.Minute, x.t.ArtifactDir())
	x.t.Logf("history: %s, checked in %v", c, c.took.Round(time.Millisecond))
	switch {
	case c.ok():
	case c.orders == porcupine.Illegal || c.stock == porcupine.Illegal:
		where := ""
		if len(c.visualizations) > 0 {
			where = " (drawn in " + strings.Join(c.visualizations, ", ") + ")"
		}
		x.problem("HISTORY: %s%s", c, where)
	default:
		x.notef("history %s", c)
	}
	return c
}
