package faults

import (
	"testing"

	"github.com/anishathalye/porcupine"
)

// TestModelFailoverLoss checks the loss window of a failover to a replica
// that lacked the last orders (the lagging-replica-failover scenario: from
// the kill of the primary until the tiers reach the promoted replica): a
// 201 confirmed before it may be gone, and its unit and its buyer free
// again; nothing confirmed after it may be.
func TestModelFailoverLoss(t *testing.T) {
	const ok, bad = porcupine.Ok, porcupine.Illegal
	tests := []struct {
		name          string
		total         int
		b             *hb
		rows          []string
		orders, stock porcupine.CheckResult
	}{
		{"lost in the failover; the buyer buys again, the unit sells again", 3,
			newHB().buy("u1", 0, 10, 201, "", "A").buy("u2", 5, 15, 201, "", "B").flush(100, 120).
				buy("u1", 200, 210, 201, "", "C").buy("u3", 205, 215, 201, "", "D").buy("u2", 220, 230, 409, "already_purchased", "B"),
			[]string{"B u2 pending_payment", "C u1 pending_payment", "D u3 pending_payment"}, ok, ok},
		{"lost in the failover, and the unit sold twice after it", 2,
			newHB().buy("u1", 0, 10, 201, "", "A").buy("u2", 5, 15, 201, "", "B").flush(100, 120).
				buy("u3", 200, 210, 201, "", "C").buy("u4", 205, 215, 201, "", "D"),
			[]string{"B u2 pending_payment", "C u3 pending_payment", "D u4 pending_payment"}, ok, bad},
		{"kept by the replica, yet the buyer is sold a second order", 2,
			newHB().buy("u1", 0, 10, 201, "", "A").flush(100, 120).buy("u1", 200, 210, 201, "", "C"),
			[]string{"A u1 pending_payment", "C u1 pending_payment"}, bad, ok},
		{"a 201 of the new primary without a row", 2,
			newHB().buy("u1", 0, 10, 201, "", "A").flush(100, 120).buy("u2", 200, 210, 201, "", "C"),
			[]string{"A u1 pending_payment"}, bad, ok},
		// An answer that overlaps the window may be lost (none does in the
		// scenario: its crowds run before the kill and after the switch).
		{"a 201 answered during the failover without a row", 2,
			newHB().flush(100, 120).buy("u1", 110, 130, 201, "", "A"),
			nil, ok, ok},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.b.check(t, tt.total, tt.rows...)
			if got.orders != tt.orders || got.stock != tt.stock {
				t.Errorf("got orders %s, stock %s, want %s, %s (%s)", got.orders, got.stock, tt.orders, tt.stock, got)
			}
		})
	}
}
