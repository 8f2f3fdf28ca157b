package sqldb

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/flashgate/flashgate"
)

const paymentCols = `order_id, intent_id, status, outcome, amount_cents, currency, refund_id, refunded, disputed, created_at, updated_at`

func scanPayment(r rowScanner) (flashgate.Payment, error) {
	var (
		p                  flashgate.Payment
		refunded, disputed int64
		cr, upd            stamp
	)
	if err := r.Scan(&p.OrderID, &p.IntentID, &p.Status, &p.Outcome, &p.AmountCents, &p.Currency,
		&p.RefundID, &refunded, &disputed, &cr, &upd); err != nil {
		return flashgate.Payment{}, err
	}
	p.Refunded, p.Disputed = refunded != 0, disputed != 0
	p.CreatedAt, p.UpdatedAt = cr.T, upd.T
	return p, nil
}

// InsertPayment stores p unless its order already has a payment, and
// returns the order's payment as stored: a second checkout of one order
// gets the first one's. A returned payment that names another intent than
// p's means p's intent is a second charge of the order (the caller's to
// deal with: controlplane/orders, secondCharge). The refunded and disputed flags of events stored
// before the row (a charge.refunded or a dispute that came first) are set
// in the same statement. On PostgreSQL the insert holds the intent's flag
// lock (lockFlags) as RecordEvent does, so that under READ COMMITTED a flag
// event recorded meanwhile is seen by one of the two: either the row's
// EXISTS sees the event, or the event's UPDATE sees the row.
func (d *DB) InsertPayment(ctx context.Context, p flashgate.Payment, now time.Time) (flashgate.Payment, error) {
	tx, err := d.w.BeginTx(ctx, nil)
	if err != nil {
		return flashgate.Payment{}, fmt.Errorf("storing payment of %s: %w", p.OrderID, err)
	}
	defer func() { _ = tx.Rollback() }()
	if err := d.lockFlags(ctx, tx, p.IntentID); err != nil {
		return flashgate.Payment{}, fmt.Errorf("storing payment of %s: %w", p.OrderID, err)
	}
	if _, err := tx.ExecContext(ctx, d.q(`INSERT INTO payments (`+paymentCols+`)
		VALUES (?, ?, ?, '', ?, ?, '',
		CASE WHEN EXISTS (SELECT 1 FROM payment_events WHERE intent_id = ? AND type = ?) THEN 1 ELSE 0 END,
		CASE WHEN EXISTS (SELECT 1 FROM payment_events WHERE intent_id = ? AND type = ?) THEN 1 ELSE 0 END,
		?, ?) ON CONFLICT (order_id) DO NOTHING`),
		p.OrderID, p.IntentID, p.Status, p.AmountCents, p.Currency,
		p.IntentID, flashgate.EventChargeRefunded, p.IntentID, flashgate.EventDisputeCreated,
		d.ts(now), d.ts(now)); err != nil {
		return flashgate.Payment{}, fmt.Errorf("storing payment of %s: %w", p.OrderID, err)
	}
	if err := tx.Commit(); err != nil {
		return flashgate.Payment{}, fmt.Errorf("storing payment of %s: %w", p.OrderID, err)
	}
	return d.paymentWhere(ctx, d.w, `order_id = ?`, p.OrderID)
}

// flagLockSpace is the first key of the advisory locks of lockFlags.
const flagLockSpace = 36

// lockFlags takes, on PostgreSQL, a transaction-scoped advisory lock on an
// intent's flags, held by InsertPayment and by RecordEvent for a flag
// event until they commit: each then reads what the other committed. A
// SQLite database serializes its writers already.
func (d *DB) lockFlags(ctx context.Context, tx *sql.Tx, intentID string) error {
	if d.dialect != DialectPostgres || intentID == "" {
		return nil
	}
	_, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, flagLockSpace, intentID)
	return err
}

// Payment returns the payment of order orderID, or flashgate.ErrNotFound.
func (d *DB) Payment(ctx context.Context, orderID string) (flashgate.Payment, error) {
	return d.paymentWhere(ctx, d.w, `order_id = ?`, orderID)
}

// PaymentByIntent returns the payment of intent id, or flashgate.ErrNotFound.
func (d *DB) PaymentByIntent(ctx context.Context, intentID string) (flashgate.Payment, error) {
	return d.paymentWhere(ctx, d.w, `intent_id = ?`, intentID)
}

func (d *DB) paymentWhere(ctx context.Context, db *sql.DB, where string, arg string) (flashgate.Payment, error) {
	p, err := scanPayment(db.QueryRowContext(ctx, d.q(`SELECT `+paymentCols+` FROM payments WHERE `+where), arg))
	if err != nil {
		return flashgate.Payment{}, notFound(err, "payment "+arg)
	}
	return p, nil
}

// SetPaymentStatus records the intent's status as the provider last told
// it; a settled payment keeps "succeeded" (a late event of an earlier
// state does not undo it).
func (d *DB) SetPaymentStatus(ctx context.Context, orderID, status string, now time.Time) error {
	_, err := d.w.ExecContext(ctx, d.q(`UPDATE payments SET status = ?, updated_at = ?
		WHERE order_id = ? AND status <> 'succeeded'`), status, d.ts(now), orderID)
	if err != nil {
		return fmt.Errorf("payment of %s: %w", orderID, err)
	}
	return nil
}

// MarkPayment sets the refunded (with refundID, when not empty) or
// disputed flag of a payment.
func (d *DB) MarkPayment(ctx context.Context, orderID string, refunded, disputed bool, refundID string, now time.Time) error {
	_, err := d.w.ExecContext(ctx, d.q(`UPDATE payments SET
		refunded = CASE WHEN ? THEN 1 ELSE refunded END,
		disputed = CASE WHEN ? THEN 1 ELSE disputed END,
		refund_id = CASE WHEN ? <> '' THEN ? ELSE refund_id END,
		updated_at = ? WHERE order_id = ?`), refunded, disputed, refundID, refundID, d.ts(now), orderID)
	if err != nil {
		return fmt.Errorf("payment of %s: %w", orderID, err)
	}
	return nil
}

// SettlePayment moves a payment's outcome from one of from to to in one
// conditional UPDATE and reports whether it did: of two racing deciders,
// exactly one moves it.
func (d *DB) SettlePayment(ctx context.Context, orderID string, from []string, to string, now time.Time) (bool, error) {
	args := []any{to, d.ts(now), orderID}
	for _, f := range from {
		args = append(args, f)
	}
	res, err := d.w.ExecContext(ctx, d.q(`UPDATE payments SET outcome = ?, updated_at = ?
		WHERE order_id = ? AND outcome IN (`+placeholders(len(from))+`)`), args...)
	if err != nil {
		return false, fmt.Errorf("settling payment of %s: %w", orderID, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("settling payment of %s: %w", orderID, err)
	}
	return n == 1, nil
}

// RecordEvent stores a webhook event id once, and with it the intent's
// status the event tells (status "" leaves it) and the flag a
// charge.refunded (refunded) or charge.dispute.created (disputed) sets, in
// one transaction: a flag is never lost to a redelivery deduplicated after
// a failed write. An event before its payment row sets the flag when the
// row is stored (InsertPayment). It reports false, changing nothing, for an
// id stored before.
func (d *DB) RecordEvent(ctx context.Context, eventID, typ, intentID, orderID, status string, now time.Time) (bool, error) {
	tx, err := d.w.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("recording event: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	if typ == flashgate.EventChargeRefunded || typ == flashgate.EventDisputeCreated {
		if err := d.lockFlags(ctx, tx, intentID); err != nil {
			return false, fmt.Errorf("recording event: %w", err)
		}
	}
	res, err := tx.ExecContext(ctx, d.q(`INSERT INTO payment_events (event_id, type, intent_id, order_id, received_at)
		VALUES (?, ?, ?, ?, ?) ON CONFLICT (event_id) DO NOTHING`), eventID, typ, intentID, orderID, d.ts(now))
	if err != nil {
		return false, fmt.Errorf("recording event: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		if err != nil {
			return false, fmt.Errorf("recording event: %w", err)
		}
		return false, nil
	}
	if status != "" {
		if _, err := tx.ExecContext(ctx, d.q(`UPDATE payments SET status = ?, updated_at = ?
			WHERE intent_id = ? AND status <> 'succeeded'`), status, d.ts(now), intentID); err != nil {
			return false, fmt.Errorf("recording event: %w", err)
		}
	}
	flag := ""
	switch typ {
	case flashgate.EventChargeRefunded:
		flag = "refunded"
	case flashgate.EventDisputeCreated:
		flag = "disputed"
	}
	if flag != "" && intentID != "" {
		if _, err := tx.ExecContext(ctx, d.q(`UPDATE payments SET `+flag+` = 1, updated_at = ? WHERE intent_id = ?`),
			d.ts(now), intentID); err != nil {
			return false, fmt.Errorf("recording event: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("recording event: %w", err)
	}
	return true, nil
}

// OpenPayments returns up to limit payments not yet settled that need a
// look: those whose intent succeeded (the order may not have followed) and
// those in flight (not canceled) of orders created before createdBefore.
func (d *DB) OpenPayments(ctx context.Context, createdBefore time.Time, limit int) ([]flashgate.Payment, error) {
	rows, err := d.w.QueryContext(ctx, d.q(`SELECT p.order_id, p.intent_id, p.status, p.outcome, p.amount_cents,
		p.currency, p.refund_id, p.refunded, p.disputed, p.created_at, p.updated_at
		FROM payments p JOIN orders o ON o.order_id = p.order_id
		WHERE `+openPayment+`
		ORDER BY p.created_at LIMIT ?`), d.ts(createdBefore), limit)
	if err != nil {
		return nil, fmt.Errorf("open payments: %w", err)
	}
	defer rows.Close()
	var out []flashgate.Payment
	for rows.Next() {
		p, err := scanPayment(rows)
		if err != nil {
			return nil, fmt.Errorf("open payments: %w", err)
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// SalePayments returns the payments of a sale's orders, by order id.
func (d *DB) SalePayments(ctx context.Context, saleID string) (map[string]flashgate.Payment, error) {
	rows, err := d.r.QueryContext(ctx, d.q(`SELECT p.order_id, p.intent_id, p.status, p.outcome, p.amount_cents,
		p.currency, p.refund_id, p.refunded, p.disputed, p.created_at, p.updated_at
		FROM payments p JOIN orders o ON o.order_id = p.order_id WHERE o.sale_id = ?`), saleID)
	if err != nil {
		return nil, fmt.Errorf("payments of sale %s: %w", saleID, err)
	}
	defer rows.Close()
	out := map[string]flashgate.Payment{}
	for rows.Next() {
		p, err := scanPayment(rows)
		if err != nil {
			return nil, fmt.Errorf("payments of sale %s: %w", saleID, err)
		}
		out[p.OrderID] = p
	}
	return out, rows.Err()
}

// UnadoptedIntents returns up to limit intents named by webhook events
// received since since that neither a payment nor a second charge names,
// of orders that are rows now: events that came before their order (or
// its payment) was stored. An intent adopted as a second charge of its
// order (RecordSecondCharge) is never listed again.
func (d *DB) UnadoptedIntents(ctx context.Context, since time.Time, limit int) ([]string, error) {
	rows, err := d.w.QueryContext(ctx, d.q(`SELECT DISTINCT e.intent_id FROM payment_events e
		JOIN orders o ON o.order_id = e.order_id
		WHERE e.intent_id <> '' AND e.received_at >= ?
		AND NOT EXISTS (SELECT 1 FROM payments p WHERE p.intent_id = e.intent_id)
		AND NOT EXISTS (SELECT 1 FROM second_charges c WHERE c.intent_id = e.intent_id)
		ORDER BY e.intent_id LIMIT ?`), d.ts(since), limit)
	if err != nil {
		return nil, fmt.Errorf("unadopted intents: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("unadopted intents: %w", err)
		}
		out = append(out, id)
	}
	return out, rows.Err()
}
