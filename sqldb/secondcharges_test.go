package sqldb

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
)

// TestSecondCharges: an intent whose order's payment is another intent is
// recorded once (a second record returns the first), leaves the
// unadopted intents for good, is due until it is settled, put off by each
// look, and each of its steps has exactly one winner among racing actors.
func TestSecondCharges(t *testing.T) {
	each(t, func(t *testing.T, _ string, db *DB) {
		ctx := context.Background()
		if _, err := db.InsertOrders(ctx, []flashgate.Order{order("o1", "s", "u1", 1, t0)}); err != nil {
			t.Fatal(err)
		}
		if _, err := db.InsertPayment(ctx, flashgate.Payment{OrderID: "o1", IntentID: "pi_own", Status: "succeeded", AmountCents: 1, Currency: "usd"}, t0); err != nil {
			t.Fatal(err)
		}
		if _, err := db.RecordEvent(ctx, "evt_x", flashgate.EventIntentSucceeded, "pi_x", "o1", "succeeded", t0); err != nil {
			t.Fatal(err)
		}
		// The outside intent's insert finds the order's payment.
		if p, err := db.InsertPayment(ctx, flashgate.Payment{OrderID: "o1", IntentID: "pi_x", Status: "succeeded", AmountCents: 5, Currency: "usd"}, t0); err != nil || p.IntentID != "pi_own" {
			t.Fatalf("InsertPayment of a second intent: got %+v, %v, want the order's payment pi_own", p, err)
		}
		ids, err := db.UnadoptedIntents(ctx, t0.Add(-time.Hour), 10)
		if err != nil || len(ids) != 1 || ids[0] != "pi_x" {
			t.Fatalf("UnadoptedIntents before the record: got %v, %v, want [pi_x]", ids, err)
		}
		c := flashgate.SecondCharge{IntentID: "pi_x", OrderID: "o1", Status: "succeeded", AmountCents: 5, Currency: "usd"}
		for i := range 2 {
			got, err := db.RecordSecondCharge(ctx, c, t0.Add(time.Duration(i)*time.Second))
			if err != nil || got.IntentID != "pi_x" || got.Outcome != "" || !got.CreatedAt.Equal(t0) {
				t.Fatalf("record %d: got %+v, %v, want the first record", i, got, err)
			}
		}
		if ids, err := db.UnadoptedIntents(ctx, t0.Add(-time.Hour), 10); err != nil || len(ids) != 0 {
			t.Errorf("UnadoptedIntents after the record: got %v, %v, want none", ids, err)
		}
		if due, err := db.DueSecondCharges(ctx, t0, 10); err != nil || len(due) != 1 || due[0].Checks != 0 {
			t.Fatalf("DueSecondCharges: got %+v, %v, want pi_x, 0 checks", due, err)
		}
		if err := db.DeferSecondCharge(ctx, "pi_x", t0.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		tests := []struct {
			at   time.Time
			want int
		}{{t0.Add(time.Second), 0}, {t0.Add(time.Minute), 1}}
		for _, tc := range tests {
			due, err := db.DueSecondCharges(ctx, tc.at, 10)
			if err != nil || len(due) != tc.want {
				t.Errorf("DueSecondCharges at %v: got %d, %v, want %d", tc.at.Sub(t0), len(due), err, tc.want)
			}
			if len(due) == 1 && due[0].Checks != 1 {
				t.Errorf("got %d checks, want 1", due[0].Checks)
			}
		}
		steps := []struct {
			from      []string
			to, refID string
		}{{[]string{""}, "refunding", ""}, {[]string{"refunding"}, "refunded", "re_1"}}
		for _, st := range steps {
			var (
				wg   sync.WaitGroup
				mu   sync.Mutex
				wins int
			)
			for range 6 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					won, err := db.StepSecondCharge(ctx, "pi_x", st.from, st.to, "succeeded", st.refID, t0)
					if err != nil {
						t.Errorf("StepSecondCharge: %v", err)
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
				t.Errorf("step to %s: got %d winners, want 1", st.to, wins)
			}
		}
		got, err := db.SecondCharge(ctx, "pi_x")
		if err != nil || got.Outcome != "refunded" || got.RefundID != "re_1" || got.Status != "succeeded" {
			t.Errorf("SecondCharge: got %+v, %v, want refunded with re_1", got, err)
		}
		if due, err := db.DueSecondCharges(ctx, t0.Add(time.Hour), 10); err != nil || len(due) != 0 {
			t.Errorf("DueSecondCharges once refunded: got %+v, %v, want none", due, err)
		}
		if _, err := db.SecondCharge(ctx, "pi_none"); !errors.Is(err, flashgate.ErrNotFound) {
			t.Errorf("SecondCharge of an unknown intent: got %v, want ErrNotFound", err)
		}
	})
}
