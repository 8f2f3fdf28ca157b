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
		// The release o2's expiry queued is gone with the honour: o2 is
		// live again (a rebuild restores it out of the released set).
		queued, _, err := db.PendingReleases(ctx, "s", 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range queued {
			if q.ID == "o2" {
				t.Errorf("pending releases after the honour: got %v, want none of o2", queued)
			}
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

// TestPendRetake: a pending retake is written only while the payment is
// late_pending, counts in no figure, is listed by PendingRetakes until the
// honour step turns it into an honoured one (counted among the persisted
// units), and a refund's first step drops it.
func TestPendRetake(t *testing.T) {
	each(t, func(t *testing.T, _ string, db *DB) {
		ctx := context.Background()
		var orders []flashgate.Order
		for _, id := range []string{"o1", "o2"} {
			orders = append(orders, order(id, "s", "u"+id, 1, t0))
		}
		if _, err := db.InsertOrders(ctx, orders); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"o1", "o2"} {
			if _, err := db.InsertPayment(ctx, flashgate.Payment{OrderID: id, IntentID: "pi_" + id, Status: "succeeded", AmountCents: 1, Currency: "usd"}, t0); err != nil {
				t.Fatal(err)
			}
			if _, err := db.Transition(ctx, id, []flashgate.OrderStatus{flashgate.StatusPendingPayment}, flashgate.StatusExpired, t0); err != nil {
				t.Fatal(err)
			}
		}
		if ok, err := db.PendRetake(ctx, "o1", t0); ok || err != nil {
			t.Fatalf("pending retake of a payment not late_pending: got %v, %v, want false", ok, err)
		}
		for _, id := range []string{"o1", "o2"} {
			if won, err := db.StepPayment(ctx, flashgate.PaymentStep{OrderID: id, FromOutcome: []string{""}, ToOutcome: "late_pending"}, t0); !won || err != nil {
				t.Fatalf("late_pending: got %v, %v", won, err)
			}
		}
		before, _ := db.Figures(ctx, "s")
		for range 2 {
			for _, id := range []string{"o1", "o2"} {
				if ok, err := db.PendRetake(ctx, id, t0); !ok || err != nil {
					t.Fatalf("pending retake of %s: got %v, %v, want true", id, ok, err)
				}
			}
		}
		if got, _ := db.Figures(ctx, "s"); got != before {
			t.Errorf("figures with pending retakes: got %+v, want %+v", got, before)
		}
		if got, err := db.PendingRetakes(ctx, "s"); err != nil || len(got) != 2 || got[0].ID != "o1" || got[0].UserID != "uo1" || got[0].Quantity != 1 {
			t.Fatalf("pending retakes: got %+v, %v", got, err)
		}
		honour := flashgate.PaymentStep{OrderID: "o1", FromOutcome: []string{"late_pending"}, ToOutcome: "honoured_late",
			FromStatus: []flashgate.OrderStatus{flashgate.StatusExpired}, ToStatus: flashgate.StatusPaid, Retake: true}
		if won, err := db.StepPayment(ctx, honour, t0); !won || err != nil {
			t.Fatalf("honour: got %v, %v", won, err)
		}
		refund := flashgate.PaymentStep{OrderID: "o2", FromOutcome: []string{"late_pending"}, ToOutcome: "refunding_late", DropRetake: true}
		if won, err := db.StepPayment(ctx, refund, t0); !won || err != nil {
			t.Fatalf("refund: got %v, %v", won, err)
		}
		if got, err := db.PendingRetakes(ctx, "s"); err != nil || len(got) != 0 {
			t.Errorf("pending retakes after the honour and the refund: got %+v, %v, want none", got, err)
		}
		after, _ := db.Figures(ctx, "s")
		if after.PersistedUnits != before.PersistedUnits+1 || after.LiveUnits != before.LiveUnits+1 {
			t.Errorf("figures after the honour: got %+v, want one more persisted and live unit than %+v", after, before)
		}
		if ok, err := db.PendRetake(ctx, "o2", t0); ok || err != nil {
			t.Errorf("pending retake after the refund step: got %v, %v, want false", ok, err)
		}
		if got, err := db.HonouredRetakes(ctx, "s"); err != nil || len(got) != 1 || got[0].ID != "o1" || got[0].UserID != "uo1" || got[0].Quantity != 1 {
			t.Errorf("honoured retakes: got %+v, %v, want o1 only", got, err)
		}
		refundO1 := flashgate.PaymentStep{OrderID: "o1", FromOutcome: []string{"honoured_late"}, ToOutcome: "refunded",
			FromStatus: []flashgate.OrderStatus{flashgate.StatusPaid}, ToStatus: flashgate.StatusRefunded, OweRetake: true}
		if won, err := db.StepPayment(ctx, refundO1, t0); !won || err != nil {
			t.Fatalf("refund of o1: got %v, %v", won, err)
		}
		if got, err := db.HonouredRetakes(ctx, "s"); err != nil || len(got) != 0 {
			t.Errorf("honoured retakes after o1's refund: got %+v, %v, want none", got, err)
		}
		if got, _ := db.Figures(ctx, "s"); got.PersistedUnits != before.PersistedUnits+1 {
			t.Errorf("persisted units after o1's refund: got %d, want %d (its retake owed back, still counted: P never goes down)", got.PersistedUnits, before.PersistedUnits+1)
		}
		if got, err := db.OwedRetakes(ctx, "s"); err != nil || len(got) != 1 || got[0].ID != "o1" || got[0].UserID != "uo1" {
			t.Errorf("owed retakes after o1's refund: got %+v, %v, want o1", got, err)
		}
		for range 2 {
			if err := db.RetakeGivenBack(ctx, "o1"); err != nil {
				t.Fatal(err)
			}
		}
		if got, err := db.OwedRetakes(ctx, "s"); err != nil || len(got) != 0 {
			t.Errorf("owed retakes after the give-back: got %+v, %v, want none", got, err)
		}
		if got, _ := db.Figures(ctx, "s"); got.PersistedUnits != before.PersistedUnits+1 {
			t.Errorf("persisted units after the give-back: got %d, want %d", got.PersistedUnits, before.PersistedUnits+1)
		}
	})
}

// TestSnapshot: the reads of a Snapshot see the database as it was at its
// first read, whatever commits meanwhile: a pending retake honoured
// between the pending read and the figures' is seen pending by both.
func TestSnapshot(t *testing.T) {
	each(t, func(t *testing.T, _ string, db *DB) {
		ctx := context.Background()
		if _, err := db.InsertOrders(ctx, []flashgate.Order{order("o1", "s", "uo1", 1, t0)}); err != nil {
			t.Fatal(err)
		}
		if _, err := db.InsertPayment(ctx, flashgate.Payment{OrderID: "o1", IntentID: "pi_o1", Status: "succeeded", AmountCents: 1, Currency: "usd"}, t0); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Transition(ctx, "o1", []flashgate.OrderStatus{flashgate.StatusPendingPayment}, flashgate.StatusExpired, t0); err != nil {
			t.Fatal(err)
		}
		if won, err := db.StepPayment(ctx, flashgate.PaymentStep{OrderID: "o1", FromOutcome: []string{""}, ToOutcome: "late_pending"}, t0); !won || err != nil {
			t.Fatalf("late_pending: %v, %v", won, err)
		}
		if ok, err := db.PendRetake(ctx, "o1", t0); !ok || err != nil {
			t.Fatalf("PendRetake: %v, %v", ok, err)
		}
		before, _ := db.Figures(ctx, "s")
		var pending []flashgate.Order
		var fig flashgate.SaleFigures
		err := db.Snapshot(ctx, func(ctx context.Context) error {
			var err error
			if pending, err = db.PendingRetakes(ctx, "s"); err != nil {
				return err
			}
			honour := flashgate.PaymentStep{OrderID: "o1", FromOutcome: []string{"late_pending"}, ToOutcome: "honoured_late",
				FromStatus: []flashgate.OrderStatus{flashgate.StatusExpired}, ToStatus: flashgate.StatusPaid, Retake: true}
			if won, err := db.StepPayment(context.Background(), honour, t0); !won || err != nil {
				t.Errorf("honour inside the snapshot: %v, %v", won, err)
			}
			fig, err = db.Figures(ctx, "s")
			return err
		})
		if err != nil {
			t.Fatalf("Snapshot: %v", err)
		}
		if len(pending) != 1 || fig != before {
			t.Errorf("inside the snapshot: got %d pending and figures %+v, want o1 pending and %+v (the honour after the snapshot unseen)", len(pending), fig, before)
		}
		if after, _ := db.Figures(ctx, "s"); after.LiveUnits != before.LiveUnits+1 {
			t.Errorf("after the snapshot: got %+v, want the honour counted", after)
		}
	})
}
