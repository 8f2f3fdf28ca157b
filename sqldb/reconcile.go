package sqldb

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/flashgate/flashgate"
)

// openPayment is the condition of a payment not yet settled that the
// reconciliation looks at: its intent succeeded (the order may not have
// followed), a step of it is under way (an outcome that is not final), or
// it is in flight (not canceled) for an order created before the first
// argument.
const openPayment = `p.outcome NOT IN ('paid', 'honoured_late', 'refunded_late', 'refunded')
		AND (p.status = 'succeeded' OR p.outcome <> '' OR (p.status <> 'canceled' AND o.created_at < ?))`

// DuePayments returns up to limit open payments (see OpenPayments) whose
// next look is due at now (next_check_at unset or passed), the longest due
// first: as each look moves its payment's next_check_at on (DeferPayment),
// passes with a budget reach every open payment in turn. Each payment's
// Checks is set.
func (d *DB) DuePayments(ctx context.Context, createdBefore, now time.Time, limit int) ([]flashgate.Payment, error) {
	rows, err := d.w.QueryContext(ctx, d.q(`SELECT p.order_id, p.intent_id, p.status, p.outcome, p.amount_cents,
		p.currency, p.refund_id, p.refunded, p.disputed, p.created_at, p.updated_at, p.checks
		FROM payments p JOIN orders o ON o.order_id = p.order_id
		WHERE `+openPayment+` AND (p.next_check_at IS NULL OR p.next_check_at <= ?)
		ORDER BY COALESCE(p.next_check_at, p.created_at), p.order_id LIMIT ?`), d.ts(createdBefore), d.ts(now), limit)
	if err != nil {
		return nil, fmt.Errorf("due payments: %w", err)
	}
	defer rows.Close()
	var out []flashgate.Payment
	for rows.Next() {
		var checks int64
		p, err := scanPayment(checksScanner{rows, &checks})
		if err != nil {
			return nil, fmt.Errorf("due payments: %w", err)
		}
		p.Checks = int(checks)
		out = append(out, p)
	}
	return out, rows.Err()
}

// checksScanner scans a payment's columns and then its checks.
type checksScanner struct {
	rows   *sql.Rows
	checks *int64
}

func (c checksScanner) Scan(dest ...any) error { return c.rows.Scan(append(dest, c.checks)...) }

// DeferPayment counts one more look at a payment and sets when the next
// one is due.
func (d *DB) DeferPayment(ctx context.Context, orderID string, next time.Time) error {
	if _, err := d.w.ExecContext(ctx, d.q(`UPDATE payments SET checks = checks + 1, next_check_at = ? WHERE order_id = ?`),
		d.ts(next), orderID); err != nil {
		return fmt.Errorf("deferring payment of %s: %w", orderID, err)
	}
	return nil
}

// OldestOpenPayment returns when the oldest payment not yet settled was
// created (in flight, whatever its order's age, or a step under way), and
// false when there is none.
func (d *DB) OldestOpenPayment(ctx context.Context) (time.Time, bool, error) {
	var (
		at stamp
		n  int64
	)
	err := d.r.QueryRowContext(ctx, d.q(`SELECT COUNT(*), MIN(p.created_at) FROM payments p JOIN orders o ON o.order_id = p.order_id
		WHERE `+openPayment), d.ts(time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC))).Scan(&n, &at)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("oldest open payment: %w", err)
	}
	return at.T, n > 0, nil
}
