package sqldb

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
)

// TestStepPaymentOneWinner: of racing actors on one step of a payment,
// exactly one wins; a step whose order is not in its from statuses changes
// neither the payment nor the order; a retake step counts the order's units
// among the persisted units of the figures (sale, variant and bucket).
func TestStepPaymentOneWinner(t *testing.T) {
	each(t, func(t *testing.T, _ string, db *DB) {
		ctx := context.Background()
		o := order("o1", "s", "u1", 2, t0)
		o.Variant = "M"
		if _, err := db.InsertOrders(ctx, []flashgate.Order{o, order("o2", "s", "u2", 1, t0)}); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"o1", "o2"} {
			if _, err := db.InsertPayment(ctx, flashgate.Payment{OrderID: id, IntentID: "pi_" + id, Status: "succeeded", AmountCents: 1, Currency: "usd"}, t0); err != nil {
				t.Fatal(err)
			}
		}
		pay := flashgate.PaymentStep{OrderID: "o1", FromOutcome: []string{""}, ToOutcome: "paid",
			FromStatus: []flashgate.OrderStatus{flashgate.StatusPendingPayment}, ToStatus: flashgate.StatusPaid}
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			wins int
		)
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				won, err := db.StepPayment(ctx, pay, t0)
				if err != nil {
					t.Errorf("StepPayment: %v", err)
				}
				if won {
					mu.Lock()
					wins++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if wins != 1 {
			t.Fatalf("8 racing steps: got %d winners, want 1", wins)
		}
		// o2 expired: the on-time step loses and leaves its payment alone.
		if _, err := db.Transition(ctx, "o2", []flashgate.OrderStatus{flashgate.StatusPendingPayment}, flashgate.StatusExpired, t0); err != nil {
			t.Fatal(err)
		}
		pay.OrderID = "o2"
		if won, err := db.StepPayment(ctx, pay, t0); won || err != nil {
			t.Fatalf("paying an expired order: got %v, %v, want false", won, err)
		}
		if p, _ := db.Payment(ctx, "o2"); p.Outcome != "" {
			t.Fatalf("outcome after a lost step: got %q, want none", p.Outcome)
		}
		before, _ := db.Figures(ctx, "s")
		late := flashgate.PaymentStep{OrderID: "o2", FromOutcome: []string{""}, ToOutcome: "honoured_late",
			FromStatus: []flashgate.OrderStatus{flashgate.StatusExpired}, ToStatus: flashgate.StatusPaid, Retake: true}
		if won, err := db.StepPayment(ctx, late, t0); !won || err != nil {
			t.Fatalf("honour: got %v, %v, want true", won, err)
		}
		after, _ := db.Figures(ctx, "s")
		if got, want := after.PersistedUnits, before.PersistedUnits+1; got != want {
			t.Errorf("persisted units after a retake: got %d, want %d", got, want)
		}
		if got, want := after.LiveUnits, before.LiveUnits+1; got != want {
			t.Errorf("live units after a retake: got %d, want %d", got, want)
		}
		if after.Persisted != before.Persisted {
			t.Errorf("rows after a retake: got %d, want %d (a retake is no row)", after.Persisted, before.Persisted)
		}
		b, err := db.BucketFigures(ctx, "s", 1)
		if err != nil || b[0].PersistedUnits != after.PersistedUnits {
			t.Errorf("bucket figures: got %+v, %v, want %d persisted units", b, err, after.PersistedUnits)
		}
	})
}

// TestEventFlags: a charge.refunded or dispute event sets its flag in the
// event's own transaction, and an event stored before its payment row
// sets it when the row is stored.
func TestEventFlags(t *testing.T) {
	each(t, func(t *testing.T, _ string, db *DB) {
		ctx := context.Background()
		if _, err := db.InsertOrders(ctx, []flashgate.Order{order("o1", "s", "u1", 1, t0), order("o2", "s", "u2", 1, t0)}); err != nil {
			t.Fatal(err)
		}
		if _, err := db.InsertPayment(ctx, flashgate.Payment{OrderID: "o1", IntentID: "pi_1", Status: "succeeded", AmountCents: 1, Currency: "usd"}, t0); err != nil {
			t.Fatal(err)
		}
		if fresh, err := db.RecordEvent(ctx, "evt_1", flashgate.EventChargeRefunded, "pi_1", "o1", "", t0); !fresh || err != nil {
			t.Fatalf("RecordEvent: %v, %v", fresh, err)
		}
		if p, _ := db.Payment(ctx, "o1"); !p.Refunded {
			t.Errorf("charge.refunded: refunded flag not set with the event")
		}
		// Before the row: both events are stored, the row comes later.
		for i, typ := range []string{flashgate.EventChargeRefunded, flashgate.EventDisputeCreated} {
			if _, err := db.RecordEvent(ctx, "evt_2"+string(rune('a'+i)), typ, "pi_2", "o2", "", t0); err != nil {
				t.Fatal(err)
			}
		}
		p, err := db.InsertPayment(ctx, flashgate.Payment{OrderID: "o2", IntentID: "pi_2", Status: "succeeded", AmountCents: 1, Currency: "usd"}, t0.Add(time.Second))
		if err != nil || !p.Refunded || !p.Disputed {
			t.Errorf("row after its events: got %+v, %v, want refunded and disputed", p, err)
		}
	})
}
