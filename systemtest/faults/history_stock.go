package faults

import (
	"fmt"
	"slices"
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
	return variantStockModel(map[string]int{"": total})
}

// variantStockModel is the stock model of a sale sold in several variants,
// totals[v] units of variant v ("" for a sale without variants): one
// partition per variant, each variant's stock its own bound (its sold units
// never exceed its total, however many the others have left). The buyer's
// limit across variants is the order model's, which knows no variants. The
// operations are those of stockOps, each naming its variant; one of a
// variant not in totals has a stock of 0.
func variantStockModel(totals map[string]int) porcupine.Model {
	return porcupine.Model{
		Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
			idx := map[string]int{}
			var parts [][]porcupine.Operation
			for _, o := range history {
				v := o.Input.(hInput).variant
				i, ok := idx[v]
				if !ok {
					i = len(parts)
					idx[v] = i
					parts = append(parts, nil)
				}
				parts[i] = append(parts[i], o)
			}
			return parts
		},
		Init: func() any { return stockState{rel: ","} },
		Step: func(state, input, output any) (bool, any) {
			s := state.(stockState)
			in, out := input.(hInput), output.(hOutput)
			total := totals[in.variant]
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
			return fmt.Sprintf("live units in [%d, %d]; given back: %s", s.lo, s.hi, strings.Trim(s.rel, ","))
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
//
// On a sale with variants each operation names its variant: a release
// takes its order's from the purchase answered with that id when it names
// none itself, the unknown purchases are gathered per variant, and the
// final read becomes one read per variant.
func stockOps(ops []porcupine.Operation) []porcupine.Operation {
	variantOf := map[string]string{} // order id → its purchase's variant
	for _, o := range ops {
		in, out := o.Input.(hInput), o.Output.(hOutput)
		if in.kind == hPurchase && out.order != "" && (out.res == rCreated || out.res == rHolds) {
			variantOf[out.order] = in.variant
		}
	}
	var out []porcupine.Operation
	var unknowns []porcupine.Operation // one per variant, in order of first sight
	unknownIdx := map[string]int{}
	for _, o := range ops {
		in, res := o.Input.(hInput), o.Output.(hOutput).res
		switch {
		case in.kind == hPurchase && res == rCreated:
			o.Call = o.Return
		case in.kind == hPurchase && res == rUnknown:
			i, ok := unknownIdx[in.variant]
			if !ok {
				i = len(unknowns)
				unknownIdx[in.variant] = i
				unknowns = append(unknowns, porcupine.Operation{Input: hInput{kind: hPurchase, user: "(every unknown purchase)", variant: in.variant}, Output: hOutput{res: rUnknown, answer: "no answer"}})
			}
			u := &unknowns[i]
			ui := u.Input.(hInput)
			ui.qty += max(in.qty, 1)
			u.Input = ui
			u.Call, u.Return = max(u.Call, o.Return), max(u.Return, o.Return)
			continue
		case in.kind == hRead && in.sale && in.lives != nil:
			for _, v := range sortedKeys(in.lives) {
				r := o
				r.Input = hInput{kind: hRead, saleID: in.saleID, sale: true, live: in.lives[v], variant: v}
				out = append(out, r)
			}
			continue
		case in.kind == hRead && in.sale:
		case (in.kind == hCancel || in.kind == hRefund || in.kind == hExpire || in.kind == hLose) && (res == rDone || res == rUnknown):
			o.Return = o.Call
			if in.variant == "" {
				in.variant = variantOf[in.order]
				o.Input = in
			}
		default:
			continue
		}
		out = append(out, o)
	}
	if len(unknowns) > 0 {
		id := 0
		for _, o := range out {
			id = max(id, o.ClientId+1)
		}
		for _, u := range unknowns {
			u.ClientId = id
			id++
			out = append(out, u)
		}
	}
	return out
}

// sortedKeys returns m's keys in order.
func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
