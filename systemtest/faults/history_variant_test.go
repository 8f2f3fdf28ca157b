package faults

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// vop is a hand-made operation of the stock model on a sale with variants:
// call and ret in milliseconds.
func vop(client int, in hInput, res hResult, order string, call, ret int64) porcupine.Operation {
	if in.qty == 0 {
		in.qty = 1
	}
	return porcupine.Operation{ClientId: client, Input: in, Output: hOutput{res: res, order: order}, Call: call, Return: ret}
}

// stripVariants returns ops as a sale without variants sees them: every
// operation of the one stock, the final read summed.
func stripVariants(ops []porcupine.Operation) []porcupine.Operation {
	out := make([]porcupine.Operation, len(ops))
	for i, o := range ops {
		in := o.Input.(hInput)
		in.variant = ""
		if in.lives != nil {
			in.live = 0
			for _, n := range in.lives {
				in.live += n
			}
			in.lives = nil
		}
		o.Input = in
		out[i] = o
	}
	return out
}

func TestModelVariantStock(t *testing.T) {
	const ok, bad = porcupine.Ok, porcupine.Illegal
	buy := func(client int, user, variant string, res hResult, order string, call, ret int64) porcupine.Operation {
		return vop(client, hInput{kind: hPurchase, saleID: "s", user: user, variant: variant}, res, order, call, ret)
	}
	read := func(lives map[string]int) porcupine.Operation {
		return vop(99, hInput{kind: hRead, saleID: "s", sale: true, lives: lives}, rDone, "", 10000, 10010)
	}
	totals := map[string]int{"S": 2, "M": 5}
	tests := []struct {
		name            string
		ops             []porcupine.Operation
		variants, whole porcupine.CheckResult // per variant; one stock of the summed total
	}{
		{"each size within its total", []porcupine.Operation{
			buy(0, "u1", "S", rCreated, "A", 0, 10), buy(1, "u2", "S", rCreated, "B", 5, 15),
			buy(2, "u3", "S", rRefused, "", 20, 30), buy(3, "u4", "M", rCreated, "D", 20, 30),
			read(map[string]int{"S": 2, "M": 1}),
		}, ok, ok},
		{"one size oversold while the other has units left", []porcupine.Operation{
			buy(0, "u1", "S", rCreated, "A", 0, 10), buy(1, "u2", "S", rCreated, "B", 5, 15),
			buy(2, "u3", "S", rCreated, "C", 20, 30), buy(3, "u4", "M", rCreated, "D", 20, 30),
			read(map[string]int{"S": 3, "M": 1}),
		}, bad, ok},
		{"a concurrent oversell of one size", []porcupine.Operation{
			buy(0, "u1", "S", rCreated, "A", 0, 40), buy(1, "u2", "S", rCreated, "B", 5, 45),
			buy(2, "u3", "S", rCreated, "C", 10, 50),
			read(map[string]int{"S": 3}),
		}, bad, ok},
		{"a cancelled small sells again", []porcupine.Operation{
			buy(0, "u1", "S", rCreated, "A", 0, 10), buy(1, "u2", "S", rCreated, "B", 5, 15),
			vop(0, hInput{kind: hCancel, saleID: "s", user: "u1", order: "A"}, rDone, "", 20, 30),
			buy(2, "u3", "S", rCreated, "C", 40, 50),
			read(map[string]int{"S": 2}),
		}, ok, ok},
		{"a cancel of a medium does not free a small", []porcupine.Operation{
			buy(0, "u1", "S", rCreated, "A", 0, 10), buy(1, "u2", "S", rCreated, "B", 5, 15),
			buy(3, "u4", "M", rCreated, "D", 0, 10),
			vop(3, hInput{kind: hCancel, saleID: "s", user: "u4", order: "D"}, rDone, "", 20, 30),
			buy(2, "u3", "S", rCreated, "C", 40, 50),
			read(map[string]int{"S": 3, "M": 0}),
		}, bad, ok},
		{"an unknown purchase of a small that took the last unit", []porcupine.Operation{
			buy(0, "u1", "S", rCreated, "A", 0, 10), buy(1, "u2", "S", rUnknown, "", 5, 15),
			buy(2, "u3", "S", rCreated, "C", 20, 30),
			read(map[string]int{"S": 3}),
		}, bad, ok},
		{"an unknown purchase of a medium does not count against the smalls", []porcupine.Operation{
			buy(0, "u1", "S", rCreated, "A", 0, 10), buy(1, "u2", "M", rUnknown, "", 5, 15),
			buy(2, "u3", "S", rCreated, "C", 20, 30),
			read(map[string]int{"S": 2, "M": 1}),
		}, ok, ok},
		{"the final read finds more smalls than were sold", []porcupine.Operation{
			buy(0, "u1", "S", rCreated, "A", 0, 10), buy(1, "u2", "M", rCreated, "B", 5, 15),
			read(map[string]int{"S": 2, "M": 0}),
		}, bad, ok},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := porcupine.CheckOperations(variantStockModel(totals), stockOps(tt.ops)); got != (tt.variants == ok) {
				t.Errorf("per variant: got legal %v, want %v", got, tt.variants == ok)
			}
			sum := 0
			for _, n := range totals {
				sum += n
			}
			if got := porcupine.CheckOperations(stockModel(sum), stockOps(stripVariants(tt.ops))); got != (tt.whole == ok) {
				t.Errorf("one stock of %d: got legal %v, want %v", sum, got, tt.whole == ok)
			}
		})
	}
}

// TestHistoryVariantCheck runs the whole check (recorded purchases naming
// their variants, the final rows with theirs) on a planted oversell of size
// S: illegal for the sale in sizes, legal for one stock of the summed
// total.
func TestHistoryVariantCheck(t *testing.T) {
	for _, perVariant := range []bool{true, false} {
		b := newHB()
		buys := []struct{ user, variant, order string }{
			{"u1", "S", "A"}, {"u2", "S", "B"}, {"u3", "S", "C"}, {"u4", "M", "D"},
		}
		var rows []finalRow
		for i, p := range buys {
			b.h.recordPurchase("s", p.variant, p.user, p.order, 201, "", true, b.at(10*i), b.at(10*i+5))
			rows = append(rows, finalRow{id: p.order, user: p.user, status: "pending_payment", qty: 1, variant: p.variant})
		}
		if perVariant {
			b.h.setVariants(map[string]int{"S": 2, "M": 5})
		}
		b.h.finish("s", rows, b.at(10000), b.at(10010))
		c := b.h.check("s", 7, b.at(10000), 10*time.Second, "")
		if c.orders != porcupine.Ok {
			t.Errorf("per variant %v: orders %v, want ok", perVariant, c.orders)
		}
		if want := map[bool]porcupine.CheckResult{true: porcupine.Illegal, false: porcupine.Ok}[perVariant]; c.stock != want {
			t.Errorf("per variant %v: stock got %v, want %v", perVariant, c.stock, want)
		}
	}
}
