package faults

import (
	"fmt"
	"sort"
	"strings"

	"github.com/anishathalye/porcupine"
)

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
