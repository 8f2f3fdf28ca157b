package sqldb

import (
	"context"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/pgtest"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
)

// TestFlagRacingPaymentRow: on PostgreSQL (READ COMMITTED), a
// charge.refunded recorded while the payment's row is being inserted
// (after the insert read the events, before it committed) sets the flag:
// the insert's EXISTS and the event's UPDATE never miss each other. The
// interleaving is forced by a transaction that holds the order's row
// slot: the insert reads the events, then waits on it; the event is
// recorded meanwhile; the slot is then freed.
func TestFlagRacingPaymentRow(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := open(t, pgtest.New(t))
	if _, err := db.InsertOrders(ctx, []flashgate.Order{order("o1", "s", "u1", 1, t0)}); err != nil {
		t.Fatal(err)
	}
	blocker, err := db.w.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = blocker.Rollback() }()
	if _, err := blocker.ExecContext(ctx, `INSERT INTO payments (`+paymentCols+`)
		VALUES ('o1', 'pi_other', 'x', '', 1, 'usd', '', 0, 0, $1, $1)`, db.ts(t0)); err != nil {
		t.Fatal(err)
	}
	inserted := make(chan error, 1)
	go func() {
		_, err := db.InsertPayment(ctx, flashgate.Payment{OrderID: "o1", IntentID: "pi_1", Status: "succeeded", AmountCents: 1, Currency: "usd"}, t0)
		inserted <- err
	}()
	// The insert waits on the blocker's row.
	testwait.Eventually(t, 10*time.Second, func() bool {
		var n int
		_ = db.w.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'INSERT INTO payments%'`).Scan(&n)
		return n == 1
	}, "the payment's insert waits on the blocker")
	recorded := make(chan error, 1)
	go func() {
		_, err := db.RecordEvent(ctx, "evt_1", flashgate.EventChargeRefunded, "pi_1", "o1", "", t0)
		recorded <- err
	}()
	// The event is recorded (old code), or waits for the insert's lock
	// (then it is after the insert: either way it runs before the row).
	testwait.Eventually(t, 10*time.Second, func() bool {
		var n int
		_ = db.w.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'SELECT pg_advisory_xact_lock%'`).Scan(&n)
		return n == 1 || len(recorded) == 1
	}, "the event recorded, or waiting for the payment's insert")
	if err := blocker.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := <-inserted; err != nil {
		t.Fatalf("InsertPayment: %v", err)
	}
	if err := <-recorded; err != nil {
		t.Fatalf("RecordEvent: %v", err)
	}
	p, err := db.Payment(ctx, "o1")
	if err != nil {
		t.Fatal(err)
	}
	if !p.Refunded {
		t.Fatal("charge.refunded recorded while the payment's row was inserted: flag lost")
	}
}
