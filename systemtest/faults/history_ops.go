package faults

import (
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

// ofSale returns the operations on sale: those recorded for it, and
// those on an order (refunds) that no purchase of another sale made. It
// also returns how many it left out. h.mu must be held.
func (h *history) ofSale(sale string) ([]hOp, int) {
	orderSale := map[string]string{}
	for _, o := range h.ops {
		if o.in.kind == hPurchase && o.out.order != "" {
			orderSale[o.out.order] = o.in.saleID
		}
	}
	var ops []hOp
	other := 0
	for _, o := range h.ops {
		s := o.in.saleID
		if s == "" && o.in.order != "" {
			s = orderSale[o.in.order]
		}
		if s != "" && s != sale {
			other++
			continue
		}
		ops = append(ops, o)
	}
	return ops, other
}

// finish adds what no client did, as of a final read of the database that
// ran from readCall to readRet: rows are every order row of the sale
// (order id → user, status, quantity). Expired rows become expiries that may
// have happened any time before the read; confirmed orders without a row
// become losses during a FLUSHALL, if one ran; every user gets a read of
// their rows, and the sale a read of its live units.
func (h *history) finish(sale string, rows []finalRow, readCall, readRet time.Time) {
	h.mu.Lock()
	flushes := append([][2]time.Time(nil), h.flushes...)
	mine, _ := h.ofSale(sale)
	known := map[string]string{} // order id told to a user → user
	for _, o := range mine {
		if o.in.kind == hPurchase && (o.out.res == rCreated || o.out.res == rHolds) && o.out.order != "" {
			known[o.out.order] = o.in.user
		}
	}
	users := map[string]bool{} // users with a recorded purchase
	for _, o := range mine {
		if o.in.kind == hPurchase {
			users[o.in.user] = true
		}
	}
	h.mu.Unlock()

	perUser := map[string][]hRow{}
	haveRow := map[string]bool{}
	live := 0
	var lives map[string]int // with variants: live units per variant
	h.mu.Lock()
	if h.variants != nil {
		lives = make(map[string]int, len(h.variants))
		for v := range h.variants {
			lives[v] = 0
		}
	}
	h.mu.Unlock()
	for _, r := range rows {
		st, ok := stateOfStatus(r.status)
		if !ok {
			st = oState('?')
		}
		haveRow[r.id] = true
		if st.live() {
			live += max(r.qty, 1)
			if lives != nil {
				lives[r.variant] += max(r.qty, 1)
			}
		}
		if !users[r.user] {
			// Bought by something that does not record its purchases
			// (a scenario's own requests): only its units count, in the
			// sale's live units. The suite's invariants still check it.
			h.mu.Lock()
			h.foreign++
			h.mu.Unlock()
			continue
		}
		perUser[r.user] = append(perUser[r.user], hRow{id: r.id, st: st})
		if st == sExpired {
			h.add(hInput{kind: hExpire, saleID: sale, user: r.user, order: r.id, qty: r.qty, variant: r.variant}, hOutput{res: rDone, answer: "expired"}, h.base, readCall)
		}
	}
	for id, user := range known {
		if haveRow[id] || len(flushes) == 0 {
			continue
		}
		// Lost in one of the flushes: from the first one's start to the
		// last one's end.
		h.add(hInput{kind: hLose, saleID: sale, user: user, order: id}, hOutput{res: rDone, answer: "lost"}, flushes[0][0], flushes[len(flushes)-1][1])
	}
	names := make([]string, 0, len(users))
	for u := range users {
		names = append(names, u)
	}
	sort.Strings(names)
	for _, u := range names {
		rs := perUser[u]
		sort.Slice(rs, func(i, j int) bool { return rs[i].id < rs[j].id })
		h.add(hInput{kind: hRead, saleID: sale, user: u, rows: rs}, hOutput{res: rDone, answer: "rows"}, readCall, readRet)
	}
	h.add(hInput{kind: hRead, saleID: sale, sale: true, live: live, lives: lives}, hOutput{res: rDone, answer: "live units"}, readCall, readRet)
}

// finalRow is one order row of the final read.
type finalRow struct {
	id, user, status string
	variant          string // the order's variant, "" without variants
	qty              int
}

// operations turns the history into porcupine's operations: times in
// nanoseconds since the history began; an unknown operation returns just
// before end, the final read's invocation (by then the servers have ended
// every request: the read follows the drain and a re-sync). Refunds, expiries and losses of an order carry its
// owner (from the answers and rows) so that they land in the owner's
// partition.
func (h *history) operations(sale string, end time.Time) ([]porcupine.Operation, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	mine, other := h.ofSale(sale)
	owner := map[string]string{}
	qty := map[string]int{}
	for _, o := range mine {
		switch {
		case o.in.kind == hPurchase && o.out.order != "":
			owner[o.out.order] = o.in.user
			qty[o.out.order] = o.in.qty
		case o.in.kind == hRead && !o.in.sale:
			for _, r := range o.in.rows {
				owner[r.id] = o.in.user
			}
		case o.in.kind == hExpire && o.in.user != "":
			owner[o.in.order] = o.in.user
			qty[o.in.order] = o.in.qty
		}
	}
	// An order cannot expire before its owner's first purchase.
	first := map[string]time.Time{}
	for _, o := range mine {
		if t, ok := first[o.in.user]; o.in.kind == hPurchase && (!ok || o.call.Before(t)) {
			first[o.in.user] = o.call
		}
	}
	buyers := map[string]bool{}
	for _, o := range mine {
		if o.in.kind == hPurchase {
			buyers[o.in.user] = true
		}
	}
	clients := map[string]int{}
	ops := make([]porcupine.Operation, 0, len(mine))
	for _, o := range mine {
		in := o.in
		if in.user == "" && in.order != "" {
			in.user = owner[in.order]
		}
		if !in.sale && !buyers[in.user] {
			// An admin refund of an order no recorded purchase made
			// (see finish): neither model knows it.
			continue
		}
		if q, ok := qty[in.order]; ok && in.kind != hPurchase {
			in.qty = q
		}
		if t, ok := first[in.user]; ok && in.kind == hExpire && o.call.Before(t) {
			o.call = t
		}
		call := o.call.Sub(h.base).Nanoseconds()
		ret := o.ret.Sub(h.base).Nanoseconds()
		if o.out.res == rUnknown {
			ret = end.Sub(h.base).Nanoseconds() - 1 // before the final read
		}
		ret = max(ret, call)
		c, ok := clients[in.user]
		if !ok {
			c = len(clients)
			clients[in.user] = c
		}
		ops = append(ops, porcupine.Operation{ClientId: c, Input: in, Call: call, Output: o.out, Return: ret})
	}
	return ops, other
}
