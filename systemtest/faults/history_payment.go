//go:build faults

package faults

import (
	"fmt"

	"github.com/flashgate/flashgate"
)

// The payments' model: what must hold once every payment settled. A
// payment that succeeded at the provider ends in exactly one of two
// ways: its order paid and holding its units (in time, or honoured late),
// or refunded with the order released. A payment still processing at the
// provider (a debit under way, which the provider will not cancel) may
// yet take the money: its order must still be pending and hold its units. Checked on the final state: the
// order rows, the buyers hash in Redis, and the provider's own ledger of
// intents and refunds (the stand-in's).

// payIntent is a PaymentIntent as the provider holds it at the end.
type payIntent struct {
	ID, OrderID, Status string
	Refunds             int
}

// payFinal is the final state the payments' model reads.
type payFinal struct {
	Total   int64
	Booked  int64                      // Redis: the sale's booked units
	Orders  map[string]flashgate.Order // the sale's rows by id
	Buyers  map[string]string          // Redis: user → the order holding their unit
	Intents []payIntent
}

// payVerdict counts the broken promises of payments.
type payVerdict struct {
	PaidWithoutUnit      int // a paid order whose unit Redis does not hold for it
	UnitsHeldByUnpaid    int // an expired or cancelled order still holding a unit
	SucceededUnsettled   int // a succeeded payment neither honoured (paid) nor refunded
	RefundedButHonoured  int // a refund of an order that is paid
	ProcessingOrderGone  int // a payment still processing whose order no longer holds its unit
	BookedDiffersFromDB  int64
	Paid, Refunded, Late int
	problems             []string
}

func (v payVerdict) String() string {
	return fmt.Sprintf("%d paid (%d late-honoured), %d refunded; paid without a unit %d, units held by unpaid expired orders %d, "+
		"succeeded payments neither honoured nor refunded %d, refunds of honoured orders %d, processing payments of released orders %d, Redis booked - DB live units %d",
		v.Paid, v.Late, v.Refunded, v.PaidWithoutUnit, v.UnitsHeldByUnpaid, v.SucceededUnsettled, v.RefundedButHonoured, v.ProcessingOrderGone, v.BookedDiffersFromDB)
}

// ok reports whether every promise held.
func (v payVerdict) ok() bool {
	return v.PaidWithoutUnit == 0 && v.UnitsHeldByUnpaid == 0 && v.SucceededUnsettled == 0 && v.RefundedButHonoured == 0 && v.ProcessingOrderGone == 0 &&
		v.BookedDiffersFromDB == 0
}

// checkPayments judges the final state f.
func checkPayments(f payFinal, lateHonoured map[string]bool) payVerdict {
	var v payVerdict
	var live int64
	for id, o := range f.Orders {
		switch o.Status {
		case flashgate.StatusPaid:
			v.Paid++
			live += o.Quantity
			if f.Buyers[o.UserID] != id {
				v.PaidWithoutUnit++
				v.problems = append(v.problems, fmt.Sprintf("order %s paid, but Redis holds %q for %s", id, f.Buyers[o.UserID], o.UserID))
			}
		case flashgate.StatusPendingPayment:
			live += o.Quantity
		case flashgate.StatusExpired, flashgate.StatusCancelled, flashgate.StatusRefunded:
			if f.Buyers[o.UserID] == id {
				v.UnitsHeldByUnpaid++
				v.problems = append(v.problems, fmt.Sprintf("order %s is %s, yet still holds %s's unit", id, o.Status, o.UserID))
			}
		}
		if lateHonoured[id] && o.Status == flashgate.StatusPaid {
			v.Late++
		}
	}
	v.BookedDiffersFromDB = f.Booked - live
	if live > f.Total {
		v.PaidWithoutUnit += int(live - f.Total)
		v.problems = append(v.problems, fmt.Sprintf("%d live units of %d", live, f.Total))
	}
	for _, in := range f.Intents {
		o, known := f.Orders[in.OrderID]
		paid := known && o.Status == flashgate.StatusPaid
		if in.Refunds > 0 {
			v.Refunded++
		}
		switch {
		case in.Status == "succeeded" && !paid && in.Refunds == 0:
			v.SucceededUnsettled++
			v.problems = append(v.problems, fmt.Sprintf("intent %s of order %s (%s) succeeded: neither honoured nor refunded", in.ID, in.OrderID, o.Status))
		case in.Status == flashgate.IntentProcessing && (!known || o.Status != flashgate.StatusPendingPayment):
			v.ProcessingOrderGone++
			v.problems = append(v.problems, fmt.Sprintf("intent %s is processing, yet order %s is %s: the money may still come", in.ID, in.OrderID, o.Status))
		case in.Refunds > 0 && paid:
			v.RefundedButHonoured++
			v.problems = append(v.problems, fmt.Sprintf("intent %s refunded, yet order %s is paid", in.ID, in.OrderID))
		case in.Refunds > 1:
			v.RefundedButHonoured++
			v.problems = append(v.problems, fmt.Sprintf("intent %s refunded %d times", in.ID, in.Refunds))
		}
	}
	return v
}
