package sqldb

import (
	"context"
	"fmt"
	"time"

	"github.com/flashgate/flashgate"
)

const secondChargeCols = `intent_id, order_id, status, outcome, amount_cents, currency, refund_id, created_at, updated_at`

func scanSecondCharge(r rowScanner, checks *int64) (flashgate.SecondCharge, error) {
	var (
		c       flashgate.SecondCharge
		cr, upd stamp
	)
	dest := []any{&c.IntentID, &c.OrderID, &c.Status, &c.Outcome, &c.AmountCents, &c.Currency, &c.RefundID, &cr, &upd}
	if checks != nil {
		dest = append(dest, checks)
	}
	if err := r.Scan(dest...); err != nil {
		return flashgate.SecondCharge{}, err
	}
	c.CreatedAt, c.UpdatedAt = cr.T, upd.T
	return c, nil
}

// RecordSecondCharge stores c (a second charge of its order: an intent
// whose order's payment is another intent) unless its intent is stored
// already, and returns it as stored: of two actors that find one, both
// go on from the one row.
func (d *DB) RecordSecondCharge(ctx context.Context, c flashgate.SecondCharge, now time.Time) (flashgate.SecondCharge, error) {
	if _, err := d.w.ExecContext(ctx, d.q(`INSERT INTO second_charges (`+secondChargeCols+`)
		VALUES (?, ?, ?, '', ?, ?, '', ?, ?) ON CONFLICT (intent_id) DO NOTHING`),
		c.IntentID, c.OrderID, c.Status, c.AmountCents, c.Currency, d.ts(now), d.ts(now)); err != nil {
		return flashgate.SecondCharge{}, fmt.Errorf("storing second charge %s: %w", c.IntentID, err)
	}
	return d.SecondCharge(ctx, c.IntentID)
}

// SecondCharge returns the second charge of intent intentID, or
// flashgate.ErrNotFound.
func (d *DB) SecondCharge(ctx context.Context, intentID string) (flashgate.SecondCharge, error) {
	c, err := scanSecondCharge(d.w.QueryRowContext(ctx, d.q(`SELECT `+secondChargeCols+` FROM second_charges WHERE intent_id = ?`), intentID), nil)
	if err != nil {
		return flashgate.SecondCharge{}, notFound(err, "second charge "+intentID)
	}
	return c, nil
}

// StepSecondCharge moves a second charge's outcome from one of from to to
// in one conditional UPDATE, with the intent's status (status "" keeps
// it) and the refund's id (refundID "" keeps it), and reports whether it
// did: of two racing actors, exactly one moves it.
func (d *DB) StepSecondCharge(ctx context.Context, intentID string, from []string, to, status, refundID string, now time.Time) (bool, error) {
	args := []any{to, status, status, refundID, refundID, d.ts(now), intentID}
	for _, f := range from {
		args = append(args, f)
	}
	res, err := d.w.ExecContext(ctx, d.q(`UPDATE second_charges SET outcome = ?,
		status = CASE WHEN ? <> '' THEN ? ELSE status END,
		refund_id = CASE WHEN ? <> '' THEN ? ELSE refund_id END,
		updated_at = ? WHERE intent_id = ? AND outcome IN (`+placeholders(len(from))+`)`), args...)
	if err != nil {
		return false, fmt.Errorf("second charge %s: %w", intentID, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("second charge %s: %w", intentID, err)
	}
	return n == 1, nil
}

// DueSecondCharges returns up to limit second charges not yet settled
// (neither refunded nor canceled) whose next look is due at now, the
// longest due first, each with its Checks.
func (d *DB) DueSecondCharges(ctx context.Context, now time.Time, limit int) ([]flashgate.SecondCharge, error) {
	rows, err := d.w.QueryContext(ctx, d.q(`SELECT `+secondChargeCols+`, checks FROM second_charges
		WHERE outcome NOT IN ('refunded', 'canceled') AND (next_check_at IS NULL OR next_check_at <= ?)
		ORDER BY COALESCE(next_check_at, created_at), intent_id LIMIT ?`), d.ts(now), limit)
	if err != nil {
		return nil, fmt.Errorf("due second charges: %w", err)
	}
	defer rows.Close()
	var out []flashgate.SecondCharge
	for rows.Next() {
		var checks int64
		c, err := scanSecondCharge(rows, &checks)
		if err != nil {
			return nil, fmt.Errorf("due second charges: %w", err)
		}
		c.Checks = int(checks)
		out = append(out, c)
	}
	return out, rows.Err()
}

// DeferSecondCharge counts one more look at a second charge and sets when
// the next one is due.
func (d *DB) DeferSecondCharge(ctx context.Context, intentID string, next time.Time) error {
	if _, err := d.w.ExecContext(ctx, d.q(`UPDATE second_charges SET checks = checks + 1, next_check_at = ? WHERE intent_id = ?`),
		d.ts(next), intentID); err != nil {
		return fmt.Errorf("deferring second charge %s: %w", intentID, err)
	}
	return nil
}
