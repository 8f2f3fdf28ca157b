package faults

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
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
// (stockOps), which keeps what it accepts and makes the check one pass. On
// a sale sold in variants the stock model is partitioned per variant
// (variantStockModel): each variant's range is bound by its own total, a
// release gives back to its order's variant, and the final read is one per
// variant; the buyer's limit across variants is the order model's.
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
	// variant is the variant a purchase named ("" for a sale without
	// variants); on a release, its order's variant when the recorder knows
	// it (stockOps otherwise takes it from the purchase answered with the
	// order's id).
	variant string
	// lives is an hRead of a sale with variants: the live units of each
	// variant in the database (live is then their sum).
	lives map[string]int
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
	// variants, when set (setVariants), are the totals of the sale's
	// variants: the stock model is then checked per variant.
	variants map[string]int
}

// setVariants makes the check's stock model one per variant of totals.
func (h *history) setVariants(totals map[string]int) {
	h.mu.Lock()
	h.variants = totals
	h.mu.Unlock()
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
	in := hInput{kind: kind, saleID: sale, user: user}
	out := hOutput{res: httpResult(kind, status, code, sent), answer: answerText(status, code, sent)}
	if kind == hPurchase {
		out.order = order
	} else {
		in.order = order
	}
	h.add(in, out, call, ret)
}

// recordPurchase adds a purchase of variant ("" for a sale without
// variants) as record does.
func (h *history) recordPurchase(sale, variant, user, order string, status int, code string, sent bool, call, ret time.Time) {
	if h == nil {
		return
	}
	h.add(hInput{kind: hPurchase, saleID: sale, user: user, variant: variant}, hOutput{res: httpResult(hPurchase, status, code, sent), order: order, answer: answerText(status, code, sent)}, call, ret)
}

// answerText is an HTTP answer as the history's descriptions show it.
func answerText(status int, code string, sent bool) string {
	switch {
	case status != 0:
		return strings.TrimSpace(fmt.Sprintf("%d %s", status, code))
	case !sent:
		return "not sent"
	}
	return "no answer"
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
