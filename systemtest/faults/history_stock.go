package faults

import (
	"fmt"
	"strings"

	"github.com/anishathalye/porcupine"
)

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
