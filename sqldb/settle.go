package sqldb

import (
	"context"
	"fmt"
	"time"

	"github.com/flashgate/flashgate"
)

// StepPayment applies one owned step of a payment's life in one
// transaction: the payment's outcome moves from one of st.FromOutcome to
// st.ToOutcome and, when st.ToStatus is set, its order's status from one
// of st.FromStatus to st.ToStatus; with st.Retake a row of retakes records
// the units a late payment took again (counted among the persisted units
// by Figures from then on). It reports whether it did all of it: of actors
// racing for one step exactly one wins, and a loser changes nothing.
func (d *DB) StepPayment(ctx context.Context, st flashgate.PaymentStep, now time.Time) (bool, error) {
	if len(st.FromOutcome) == 0 || (st.ToStatus != "" && (len(st.FromStatus) == 0 || !storedStatus(st.ToStatus))) {
		return false, fmt.Errorf("payment step of %s: %w", st.OrderID, flashgate.ErrBadRequest)
	}
	tx, err := d.w.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("payment step of %s: %w", st.OrderID, err)
	}
	defer func() { _ = tx.Rollback() }()
	args := []any{st.ToOutcome, st.Refunded, st.RefundID, st.RefundID, st.IntentStatus, st.IntentStatus, d.ts(now), st.OrderID}
	for _, f := range st.FromOutcome {
		args = append(args, f)
	}
	res, err := tx.ExecContext(ctx, d.q(`UPDATE payments SET outcome = ?,
		refunded = CASE WHEN ? THEN 1 ELSE refunded END,
		refund_id = CASE WHEN ? <> '' THEN ? ELSE refund_id END,
		status = CASE WHEN ? <> '' AND status <> 'succeeded' THEN ? ELSE status END,
		updated_at = ? WHERE order_id = ? AND outcome IN (`+placeholders(len(st.FromOutcome))+`)`), args...)
	if err != nil {
		return false, fmt.Errorf("payment step of %s: %w", st.OrderID, err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		if err != nil {
			return false, fmt.Errorf("payment step of %s: %w", st.OrderID, err)
		}
		return false, nil
	}
	if st.ToStatus != "" {
		args := []any{string(st.ToStatus), d.ts(now), st.OrderID}
		for _, f := range st.FromStatus {
			args = append(args, string(f))
		}
		res, err := tx.ExecContext(ctx, d.q(`UPDATE orders SET status = ?, updated_at = ?
			WHERE order_id = ? AND status IN (`+placeholders(len(st.FromStatus))+`)`), args...)
		if err != nil {
			if isUnique(err) {
				return false, fmt.Errorf("order %s to %s: %w", st.OrderID, st.ToStatus, flashgate.ErrAlreadyPurchased)
			}
			return false, fmt.Errorf("payment step of %s: %w", st.OrderID, err)
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			if err != nil {
				return false, fmt.Errorf("payment step of %s: %w", st.OrderID, err)
			}
			return false, nil
		}
	}
	if st.Retake {
		if _, err := tx.ExecContext(ctx, d.q(`INSERT INTO retakes (order_id, sale_id, bucket, variant, quantity, created_at)
			SELECT order_id, sale_id, bucket, variant, quantity, ? FROM orders WHERE order_id = ?
			ON CONFLICT (order_id) DO NOTHING`), d.ts(now), st.OrderID); err != nil {
			return false, fmt.Errorf("payment step of %s: %w", st.OrderID, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("payment step of %s: %w", st.OrderID, err)
	}
	return true, nil
}
