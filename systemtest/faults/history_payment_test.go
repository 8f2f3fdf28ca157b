//go:build faults

package faults

import (
	"testing"

	"github.com/flashgate/flashgate"
)

// TestCheckPayments: the payments' model finds each broken promise in a
// final state made to break it, and none in a sound one.
func TestCheckPayments(t *testing.T) {
	ord := func(id, user string, st flashgate.OrderStatus) flashgate.Order {
		return flashgate.Order{ID: id, UserID: user, Quantity: 1, Status: st}
	}
	sound := func() payFinal {
		return payFinal{Total: 3, Booked: 2,
			Orders: map[string]flashgate.Order{"o1": ord("o1", "u1", flashgate.StatusPaid), "o2": ord("o2", "u2", flashgate.StatusExpired),
				"o4": ord("o4", "u4", flashgate.StatusPendingPayment)},
			Buyers: map[string]string{"u1": "o1", "u4": "o4"},
			Intents: []payIntent{{ID: "pi1", OrderID: "o1", Status: "succeeded"}, {ID: "pi2", OrderID: "o2", Status: "succeeded", Refunds: 1},
				{ID: "pi4", OrderID: "o4", Status: flashgate.IntentProcessing}}}
	}
	cases := []struct {
		name   string
		break_ func(f *payFinal)
		check  func(v payVerdict) int
	}{
		{"sound", func(*payFinal) {}, func(v payVerdict) int { return btoi(!v.ok()) }},
		{"paid without a unit", func(f *payFinal) { delete(f.Buyers, "u1") }, func(v payVerdict) int { return v.PaidWithoutUnit }},
		{"unit held by an expired order", func(f *payFinal) { f.Buyers["u2"] = "o2"; f.Booked = 2 }, func(v payVerdict) int { return v.UnitsHeldByUnpaid }},
		{"success neither honoured nor refunded", func(f *payFinal) { f.Intents[1].Refunds = 0 }, func(v payVerdict) int { return v.SucceededUnsettled }},
		{"refund of an honoured order", func(f *payFinal) { f.Intents[0].Refunds = 1 }, func(v payVerdict) int { return v.RefundedButHonoured }},
		{"refunded twice", func(f *payFinal) { f.Intents[1].Refunds = 2 }, func(v payVerdict) int { return v.RefundedButHonoured }},
		{"processing payment of a cancelled order", func(f *payFinal) {
			f.Orders["o3"] = ord("o3", "u3", flashgate.StatusCancelled)
			f.Intents = append(f.Intents, payIntent{ID: "pi3", OrderID: "o3", Status: flashgate.IntentProcessing})
		}, func(v payVerdict) int { return v.ProcessingOrderGone }},
		{"booked differs", func(f *payFinal) { f.Booked = 1 }, func(v payVerdict) int { return int(v.BookedDiffersFromDB * -1) }},
	}
	for _, tc := range cases {
		f := sound()
		tc.break_(&f)
		got := tc.check(checkPayments(f, nil))
		want := 1
		if tc.name == "sound" {
			want = 0
		}
		if got != want {
			t.Errorf("%s: got %d, want %d (%s)", tc.name, got, want, checkPayments(f, nil))
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
