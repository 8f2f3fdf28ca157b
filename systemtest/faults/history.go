package faults

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// The history checker. Every operation a client of the system performs
// during a scenario (each purchase attempt, retries included; pay; cancel;
// an admin refund) is recorded with its invocation and answer times, read
// from one monotonic clock, and its answer. What no client does is added at
// the end from the database: expiries (done by the control plane; each
// may have happened at any moment from its owner's first purchase until
// the final read: the rows' updated_at is on another clock, so it is not
// used), orders a FLUSHALL destroyed before they were rows (confirmed, no
// row, a FLUSHALL ran: lost during it), and one final read of every user's
// rows and of the sale's live units. Rows of users no recorded purchase
// names (a scenario's own requests) are left out and counted, and so are
// operations on another sale than the scenario's; the suite's invariants
// still check them. The whole history is then checked for
// linearizability (porcupine) against two models of a sale:
//
// The order model, partitioned per user (sound: a user's orders are only
// touched by that user's operations, admin refunds and expiries of those
// orders, which are put in the owner's partition). Its state is the user's
// orders, each reserved (live, unpaid; in the database pending_payment),
// paid, cancelled, expired, refunded or lost. At most one order is live
// (reserved or paid). Transitions:
//
//	purchase → 201 id           the user holds no live order; id is new → id reserved
//	purchase → 409 already_purchased id
//	                            the user holds live order id
//	purchase → any other 4xx    no change (sold_out, not_started, closed,
//	                            rate_limited, … are always allowed: see below)
//	pay id → 200                id reserved or paid → paid
//	pay id → 409 not_payable    id reserved (not yet in the database), cancelled, expired or refunded
//	cancel id → 200             id reserved → cancelled; cancelled stays cancelled
//	cancel id → 409 not_payable id reserved (not yet in the database), paid, expired or refunded
//	refund id → 200             id reserved or paid → refunded; refunded stays refunded
//	refund id → 409 not_payable id cancelled or expired
//	refund id → 404             id reserved (not yet in the database) or lost
//	pay/cancel id → 404         id lost (or not the user's)
//	expire id (internal)        id reserved → expired
//	lose id (internal)          id reserved → lost (only during a FLUSHALL)
//	read rows (final)           the user's rows are exactly the orders that are
//	                            not lost, each in its state
//
// An operation without an answer (no answer after the request was sent, a
// timeout, a 5xx: it may have reached the server) is unknown: it may have
// taken effect or not, at any moment from its invocation until the final
// read (porcupine: its return time is the end of the history, and the model
// is nondeterministic). An unknown purchase that took effect holds an order
// whose id nobody was told; the first operation naming an id the user does
// not hold binds it. A request refused before it was sent (connection
// refused) has no effect.
//
// The stock model, one partition for the sale (the stock bound is a global
// property across users, so it is not checked per user). It keeps the
// range [lo, hi] of units live (sold and not given back) that the
// operations so far allow, and the orders given back: a 201 needs
// lo+q ≤ total; an unknown purchase raises hi (up to total); a cancel,
// refund, expiry or loss gives q back once per order, at its linearization
// point, the earliest moment the unit could be sold again (in the system it
// is back on sale with the next re-sync, later), and an unknown one lowers
// lo only; the final read of the database's live units must lie in the
// range. The range is exact for purchases of one unit (the suite's) and
// allows more, never less, than the system may do otherwise. Each of its
// operations is placed at the moment of its interval that allows the most
// (stockOps), which keeps what it accepts and makes the check one pass.
//
// Answers that are always allowed: sold_out, because the contract also
// answers it once the admission cap is reached (while units remain, until
// a re-sync raises the cap) and from the gateway's cached sale state; and
// not_started, closed and rate_limited, which do not depend on the orders.
// That every free unit does sell is the suite's RESALE invariant; the
// summary counts the sold_out answers given while units surely remained.

// hKind is the kind of a recorded operation.
type hKind uint8

const (
	hPurchase hKind = iota
	hPay
	hCancel
	hRefund
	hExpire // internal: the control plane expired the order
	hLose   // internal: a FLUSHALL destroyed the order before it was a row
	hRead   // the final read of the database
)

var hKindName = [...]string{"purchase", "pay", "cancel", "refund", "expire", "lose", "read"}

// hResult is an answer as the models see it.
type hResult uint8

const (
	rUnknown    hResult = iota // may or may not have taken effect
	rRefused                   // an answer that changes nothing (sold_out, 429, not sent, …)
	rCreated                   // purchase: 201 with an order id
	rHolds                     // purchase: 409 already_purchased (with the order id, if any)
	rDone                      // pay, cancel, refund: 200; expire, lose, read: happened
	rNotPayable                // pay, cancel, refund: 409 not_payable
	rNotFound                  // pay, cancel, refund: 404 not_found
)

// oState is an order's state in the order model.
type oState byte

const (
	sReserved  oState = 'r' // live, unpaid: reserved in Redis or pending_payment
	sPaid      oState = 'p'
	sCancelled oState = 'c'
	sExpired   oState = 'e'
	sRefunded  oState = 'f'
	sLost      oState = 'l'
)

func (s oState) live() bool { return s == sReserved || s == sPaid }

var oStateName = map[oState]string{sReserved: "reserved", sPaid: "paid", sCancelled: "cancelled", sExpired: "expired", sRefunded: "refunded", sLost: "lost"}

// stateOfStatus maps a database status to the model's state.
func stateOfStatus(status string) (oState, bool) {
	switch status {
	case "reserved", "pending_payment":
		return sReserved, true
	case "paid":
		return sPaid, true
	case "cancelled":
		return sCancelled, true
	case "expired":
		return sExpired, true
	case "refunded":
		return sRefunded, true
	}
	return 0, false
}

// hRow is one order row of the final read.
type hRow struct {
	id string
	st oState
}

// hInput is what an operation asked.
type hInput struct {
	kind   hKind
	saleID string // the sale bought from ("" for a refund: its order's)
	user   string
	order  string
	qty    int
	rows   []hRow // hRead of a user: the user's rows
	live   int    // hRead of the sale: live units in the database
	sale   bool   // hRead of the sale (the stock model's read)
}

// hOutput is the answer.
type hOutput struct {
	res    hResult
	order  string // rCreated, rHolds: the order id answered
	answer string // the answer as seen, for descriptions ("201", "409 sold_out", "no answer", …)
}

// hOp is one recorded operation; ret is zero while it has no answer that
// counts (rUnknown operations keep their answer time only for reports).
type hOp struct {
	in        hInput
	out       hOutput
	call, ret time.Time
}

// history records a scenario's operations; it is safe for concurrent use.
type history struct {
	mu   sync.Mutex
	base time.Time
	ops  []hOp
	// flushes are the intervals in which confirmed orders not yet rows
	// may have been destroyed (a FLUSHALL ran).
	flushes [][2]time.Time
	// foreign counts order rows of users without a recorded purchase.
	foreign int
}

func newHistory() *history { return &history{base: time.Now()} }

// add records one operation.
func (h *history) add(in hInput, out hOutput, call, ret time.Time) {
	if h == nil {
		return
	}
	if in.qty == 0 {
		in.qty = 1
	}
	h.mu.Lock()
	h.ops = append(h.ops, hOp{in: in, out: out, call: call, ret: ret})
	h.mu.Unlock()
}

// flushed records that orders not yet rows may have been destroyed from
// call to ret: a FLUSHALL sent at call and answered at ret. A scenario
// whose fault destroys confirmed orders in another way (a failover to a
// replica that lacked them) records its window here too.
func (h *history) flushed(call, ret time.Time) {
	if h == nil {
		return
	}
	h.mu.Lock()
	h.flushes = append(h.flushes, [2]time.Time{call, ret})
	h.mu.Unlock()
}

// lossWindows is how many windows flushed recorded.
func (h *history) lossWindows() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.flushes)
}

// httpResult classifies an HTTP answer of kind: status 0 is no answer
// (sent says whether the request may have reached the server), code the
// answer's error code.
func httpResult(kind hKind, status int, code string, sent bool) hResult {
	switch {
	case status == 0 && !sent:
		return rRefused
	case status == 0 || status >= 500:
		return rUnknown
	case kind == hPurchase && status == http.StatusCreated:
		return rCreated
	case kind == hPurchase && status == http.StatusConflict && code == "already_purchased":
		return rHolds
	case kind != hPurchase && status == http.StatusOK:
		return rDone
	case kind != hPurchase && status == http.StatusConflict && code == "not_payable":
		return rNotPayable
	case kind != hPurchase && status == http.StatusNotFound:
		return rNotFound
	}
	return rRefused
}

// record adds an HTTP operation of user on order (the order id answered, for
// a purchase).
func (h *history) record(kind hKind, sale, user, order string, status int, code string, sent bool, call, ret time.Time) {
	res := httpResult(kind, status, code, sent)
	answer := "no answer"
	if status != 0 {
		answer = strings.TrimSpace(fmt.Sprintf("%d %s", status, code))
	} else if !sent {
		answer = "not sent"
	}
	in := hInput{kind: kind, saleID: sale, user: user}
	out := hOutput{res: res, answer: answer}
	if kind == hPurchase {
		out.order = order
	} else {
		in.order = order
	}
	h.add(in, out, call, ret)
}

// sentErr reports whether a request that failed with err may have reached
// the server: only a failed dial proves that it did not.
func sentErr(err error) bool {
	var op *net.OpError
	return !errors.As(err, &op) || op.Op != "dial"
}

// adminCall records an admin API call if it is one the models know (a
// refund); status 0 is no answer, sent whether the request may then have
// reached the server.
func (h *history) adminCall(method, path string, status int, code string, sent bool, call, ret time.Time) {
	id, ok := strings.CutPrefix(path, "/admin/orders/")
	if method != http.MethodPost || !ok {
		return
	}
	id, ok = strings.CutSuffix(id, "/refund")
	if !ok || id == "" || strings.Contains(id, "/") {
		return
	}
	h.record(hRefund, "", "", id, status, code, sent, call, ret)
}

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
	for _, r := range rows {
		st, ok := stateOfStatus(r.status)
		if !ok {
			st = oState('?')
		}
		haveRow[r.id] = true
		if st.live() {
			live += max(r.qty, 1)
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
			h.add(hInput{kind: hExpire, saleID: sale, user: r.user, order: r.id, qty: r.qty}, hOutput{res: rDone, answer: "expired"}, h.base, readCall)
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
	h.add(hInput{kind: hRead, saleID: sale, sale: true, live: live}, hOutput{res: rDone, answer: "live units"}, readCall, readRet)
}

// finalRow is one order row of the final read.
type finalRow struct {
	id, user, status string
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

// uState is a user's orders in the order model, oldest first; an order
// with id "" was made by an unknown purchase and not yet named.
type uState []hRow

func (s uState) with(i int, st oState) uState {
	n := append(uState(nil), s...)
	n[i].st = st
	return n
}

func (s uState) holdsLive() bool {
	for _, o := range s {
		if o.st.live() {
			return true
		}
	}
	return false
}

// find returns the index of order id, binding the unnamed order to it if
// the user holds one and no order named id; -1 if there is none.
func (s uState) find(id string) (uState, int) {
	for i, o := range s {
		if o.id == id {
			return s, i
		}
	}
	for i, o := range s {
		if o.id == "" {
			n := append(uState(nil), s...)
			n[i].id = id
			return n, i
		}
	}
	return s, -1
}

// userStep is the order model's (nondeterministic) step.
func userStep(state, input, output any) []any {
	s := state.(uState)
	in, out := input.(hInput), output.(hOutput)
	one := func(n uState) []any { return []any{n} }
	switch in.kind {
	case hPurchase:
		switch out.res {
		case rRefused:
			return one(s)
		case rUnknown:
			if s.holdsLive() {
				return one(s)
			}
			return []any{s, append(append(uState(nil), s...), hRow{st: sReserved})}
		case rCreated:
			if s.holdsLive() || out.order == "" {
				return nil
			}
			for _, o := range s {
				if o.id == out.order {
					return nil
				}
			}
			return one(append(append(uState(nil), s...), hRow{id: out.order, st: sReserved}))
		case rHolds:
			for i, o := range s {
				if !o.st.live() {
					continue
				}
				if out.order == "" || o.id == out.order {
					return one(s)
				}
				if o.id == "" {
					return one(s.with(i, o.st).named(i, out.order))
				}
			}
			return nil
		}
		return nil
	case hRead:
		return readStep(s, in.rows)
	}
	n, i := s.find(in.order)
	st := oState(0)
	if i >= 0 {
		st = n[i].st
	}
	var to oState      // rDone: the state it moves to from from
	var from string    // rDone: states it moves from
	var stays string   // rDone: states that answer 200 unchanged
	var refuses string // rNotPayable
	var notFound string
	switch in.kind {
	case hPay:
		to, from, stays, refuses, notFound = sPaid, "r", "p", "rcef", "l"
	case hCancel:
		to, from, stays, refuses, notFound = sCancelled, "r", "c", "rpef", "l"
	case hRefund:
		to, from, stays, refuses, notFound = sRefunded, "rp", "f", "ce", "rl"
	case hExpire:
		to, from = sExpired, "r"
	case hLose:
		to, from = sLost, "r"
	default:
		return nil
	}
	has := func(set string) bool { return i >= 0 && strings.IndexByte(set, byte(st)) >= 0 }
	switch out.res {
	case rDone:
		switch {
		case has(from):
			return one(n.with(i, to))
		case has(stays):
			return one(n)
		}
		return nil
	case rUnknown:
		if has(from) {
			return []any{s, n.with(i, to)}
		}
		return one(s)
	case rNotPayable:
		if has(refuses) {
			return one(n)
		}
		return nil
	case rNotFound:
		if i < 0 || has(notFound) {
			return one(s)
		}
		return nil
	case rRefused:
		return one(s)
	}
	return nil
}

func (s uState) named(i int, id string) uState {
	s[i].id = id
	return s
}

// readStep: the rows must be exactly the orders not lost, each in its
// state; an unnamed order takes the one row no other order claims.
func readStep(s uState, rows []hRow) []any {
	byID := map[string]oState{}
	for _, r := range rows {
		byID[r.id] = r.st
	}
	claimed := map[string]bool{}
	unnamed := -1
	for i, o := range s {
		if o.st == sLost {
			continue
		}
		if o.id == "" {
			unnamed = i
			continue
		}
		st, ok := byID[o.id]
		if !ok || st != o.st {
			return nil
		}
		claimed[o.id] = true
	}
	var rest []hRow
	for _, r := range rows {
		if !claimed[r.id] {
			rest = append(rest, r)
		}
	}
	switch {
	case unnamed < 0 && len(rest) == 0:
		return []any{s}
	case unnamed >= 0 && len(rest) == 1 && rest[0].st == s[unnamed].st:
		return []any{s.with(unnamed, s[unnamed].st).named(unnamed, rest[0].id)}
	}
	return nil
}

func describeUser(state any) string {
	s := state.(uState)
	if len(s) == 0 {
		return "no orders"
	}
	parts := make([]string, len(s))
	for i, o := range s {
		id := o.id
		if id == "" {
			id = "(unnamed)"
		}
		parts[i] = id + ":" + oStateName[o.st]
	}
	return strings.Join(parts, ", ")
}

func describeOp(input, output any) string {
	in, out := input.(hInput), output.(hOutput)
	switch {
	case in.kind == hRead && in.sale:
		return fmt.Sprintf("read sale → %d live units", in.live)
	case in.kind == hRead:
		parts := make([]string, len(in.rows))
		for i, r := range in.rows {
			parts[i] = r.id + ":" + oStateName[r.st]
		}
		return fmt.Sprintf("read %s → [%s]", in.user, strings.Join(parts, ", "))
	case in.kind == hPurchase:
		a := out.answer
		if out.order != "" {
			a += " " + out.order
		}
		return fmt.Sprintf("purchase(%s, %d) → %s", in.user, in.qty, a)
	}
	return fmt.Sprintf("%s(%s) → %s", hKindName[in.kind], in.order, out.answer)
}

// orderModel is the order model, one partition per user.
func orderModel() porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: func(ops []porcupine.Operation) [][]porcupine.Operation {
			byUser := map[string][]porcupine.Operation{}
			var keys []string
			for _, o := range ops {
				u := o.Input.(hInput).user
				if o.Input.(hInput).sale {
					continue
				}
				if _, ok := byUser[u]; !ok {
					keys = append(keys, u)
				}
				byUser[u] = append(byUser[u], o)
			}
			sort.Strings(keys)
			out := make([][]porcupine.Operation, len(keys))
			for i, k := range keys {
				out[i] = byUser[k]
			}
			return out
		},
		Init: func() []any { return []any{uState(nil)} },
		Step: userStep,
		Equal: func(a, b any) bool {
			x, y := a.(uState), b.(uState)
			if len(x) != len(y) {
				return false
			}
			for i := range x {
				if x[i] != y[i] {
					return false
				}
			}
			return true
		},
		DescribeOperation: describeOp,
		DescribeState:     describeUser,
	}
	return nm.ToModel()
}

// stockState is the stock model's state: the units live lie in [lo, hi];
// rel lists the orders given back, ",id1,id2,".
type stockState struct {
	lo, hi int
	rel    string
}

// stockModel is the stock model of a sale of total units, one partition.
func stockModel(total int) porcupine.Model {
	return porcupine.Model{
		Init: func() any { return stockState{rel: ","} },
		Step: func(state, input, output any) (bool, any) {
			s := state.(stockState)
			in, out := input.(hInput), output.(hOutput)
			q := max(in.qty, 1)
			switch in.kind {
			case hPurchase:
				switch out.res {
				case rCreated:
					if s.lo+q > total {
						return false, s
					}
					s.lo, s.hi = s.lo+q, min(s.hi+q, total)
				case rUnknown:
					s.hi = min(s.hi+q, total)
				}
				return true, s
			case hRead:
				if in.sale {
					if in.live < s.lo || in.live > s.hi {
						return false, s
					}
					s.lo, s.hi = in.live, in.live
				}
				return true, s
			case hCancel, hRefund, hExpire, hLose:
				if strings.Contains(s.rel, ","+in.order+",") {
					return true, s
				}
				switch out.res {
				case rDone:
					// A 200 for an order the model holds as given back
					// already is answered above.
					s.lo, s.hi = s.lo-q, s.hi-q
					s.rel += in.order + ","
				case rUnknown:
					s.lo -= q
				}
				return true, s
			}
			return true, s
		},
		DescribeOperation: describeOp,
		DescribeState: func(state any) string {
			s := state.(stockState)
			return fmt.Sprintf("live units in [%d, %d] of %d; given back: %s", s.lo, s.hi, total, strings.Trim(s.rel, ","))
		},
	}
}

// stockOps keeps the operations that can change or read the stock, each
// placed at the one moment of its interval that allows the most: a release
// (cancel, refund, expiry, loss; answered or not) at its invocation, a 201
// at its answer, and every unknown purchase together, as one operation of
// their units, just before the final read. This does not change what the
// stock model accepts: moving a release earlier, or a 201 or an unknown
// purchase later, never turns a legal sequence illegal (a release lowers
// lo and hi, a 201 needs lo+q ≤ total, an unknown purchase only raises hi
// up to total, and only the final read looks at hi), so a history has a
// linearization if and only if it has one with every operation at that
// moment. It turns the search into one pass over the operations in order.
func stockOps(ops []porcupine.Operation) []porcupine.Operation {
	var out []porcupine.Operation
	unknown := porcupine.Operation{ClientId: -1, Input: hInput{kind: hPurchase, user: "(every unknown purchase)"}, Output: hOutput{res: rUnknown, answer: "no answer"}}
	for _, o := range ops {
		in, res := o.Input.(hInput), o.Output.(hOutput).res
		switch {
		case in.kind == hPurchase && res == rCreated:
			o.Call = o.Return
		case in.kind == hPurchase && res == rUnknown:
			unknown.Input = hInput{kind: hPurchase, user: unknown.Input.(hInput).user, qty: unknown.Input.(hInput).qty + max(in.qty, 1)}
			unknown.Call, unknown.Return = max(unknown.Call, o.Return), max(unknown.Return, o.Return)
			continue
		case in.kind == hRead && in.sale:
		case (in.kind == hCancel || in.kind == hRefund || in.kind == hExpire || in.kind == hLose) && (res == rDone || res == rUnknown):
			o.Return = o.Call
		default:
			continue
		}
		out = append(out, o)
	}
	if unknown.Input.(hInput).qty > 0 {
		unknown.ClientId = 0
		for _, o := range out {
			unknown.ClientId = max(unknown.ClientId, o.ClientId+1)
		}
		out = append(out, unknown)
	}
	return out
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
	sm := stockModel(total)
	sops := stockOps(ops)
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
