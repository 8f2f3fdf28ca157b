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
		// The pending row PendRetake wrote becomes an honoured one.
		if _, err := tx.ExecContext(ctx, d.q(`INSERT INTO retakes (order_id, sale_id, bucket, variant, quantity, created_at, pending)
			SELECT order_id, sale_id, bucket, variant, quantity, ?, 0 FROM orders WHERE order_id = ?
			ON CONFLICT (order_id) DO UPDATE SET pending = 0`), d.ts(now), st.OrderID); err != nil {
			return false, fmt.Errorf("payment step of %s: %w", st.OrderID, err)
		}
		// The release the order's expiry (or cancel) queued for the
		// re-sync, if no pass delivered it yet, goes: the order is live
		// again. Redis's released set made it a no-op while the retake
		// kept the order there, but a rebuild after a Redis loss restores
		// the paid order as live, out of that set, and the release then
		// freed its unit (explorer seed 20264038: sold again).
		if _, err := tx.ExecContext(ctx, d.q(`DELETE FROM release_queue
			WHERE sale_id = (SELECT sale_id FROM orders WHERE order_id = ?) AND order_id = ?`), st.OrderID, st.OrderID); err != nil {
			return false, fmt.Errorf("payment step of %s: %w", st.OrderID, err)
		}
	}
	if st.OweRetake {
		if _, err := tx.ExecContext(ctx, d.q(`UPDATE retakes SET pending = 2 WHERE order_id = ? AND pending = 0`), st.OrderID); err != nil {
			return false, fmt.Errorf("payment step of %s: %w", st.OrderID, err)
		}
	}
	if st.DropRetake {
		if _, err := tx.ExecContext(ctx, d.q(`DELETE FROM retakes WHERE order_id = ? AND pending = 1`), st.OrderID); err != nil {
			return false, fmt.Errorf("payment step of %s: %w", st.OrderID, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("payment step of %s: %w", st.OrderID, err)
	}
	return true, nil
}

// PendRetake records, before a late payment's retake in Redis, that the
// retake may take the order's units (a retakes row with pending = 1), so
// that a rebuild of the sale in Redis between the retake and its honour
// step holds them (PendingRetakes). It writes the row only while the
// payment's outcome is late_pending, in one transaction that holds the
// payment row, so that a step that decided to refund it (and dropped the
// row) is never followed by a new pending row. It reports whether the
// payment was still late_pending; a row already there is kept.
func (d *DB) PendRetake(ctx context.Context, orderID string, now time.Time) (bool, error) {
	tx, err := d.w.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("pending retake of %s: %w", orderID, err)
	}
	defer func() { _ = tx.Rollback() }()
	res, err := tx.ExecContext(ctx, d.q(`UPDATE payments SET updated_at = ? WHERE order_id = ? AND outcome = 'late_pending'`), d.ts(now), orderID)
	if err != nil {
		return false, fmt.Errorf("pending retake of %s: %w", orderID, err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		if err != nil {
			return false, fmt.Errorf("pending retake of %s: %w", orderID, err)
		}
		return false, nil
	}
	if _, err := tx.ExecContext(ctx, d.q(`INSERT INTO retakes (order_id, sale_id, bucket, variant, quantity, created_at, pending)
		SELECT order_id, sale_id, bucket, variant, quantity, ?, 1 FROM orders WHERE order_id = ?
		ON CONFLICT (order_id) DO NOTHING`), d.ts(now), orderID); err != nil {
		return false, fmt.Errorf("pending retake of %s: %w", orderID, err)
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("pending retake of %s: %w", orderID, err)
	}
	return true, nil
}

// HonouredRetakes are the orders of a sale whose late payment's retake an
// honour step recorded (the retakes row no longer pending) and that are
// still paid, as orders (id, user, bucket, variant, quantity), by id. A
// rebuild reads them after its restore to tell, of the retakes it read
// as pending in its snapshot, those honoured since (which it holds:
// the snapshot may not count them) from those refunded since (which it
// must not: nothing would give their units back).
func (d *DB) HonouredRetakes(ctx context.Context, saleID string) ([]flashgate.Order, error) {
	return d.retakeOrders(ctx, "honoured retakes", saleID, `r.pending = 0 AND o.status = ?`, string(flashgate.StatusPaid))
}

// OwedRetakes are the orders of a sale whose honoured retake a refund
// marked as owed back (flashgate.PaymentStep.OweRetake) and whose units
// no unretake has been recorded as giving back yet (RetakeGivenBack), as
// orders (id, user, bucket, variant, quantity), by id.
func (d *DB) OwedRetakes(ctx context.Context, saleID string) ([]flashgate.Order, error) {
	return d.retakeOrders(ctx, "owed retakes", saleID, `r.pending = 2`)
}

// RetakeGivenBack records that an unretake gave back the units of the
// order's owed retake (or found nothing to give back): its retakes row is
// marked given back (pending = 3), still among the persisted units. A
// no-op for an order with no owed retake.
func (d *DB) RetakeGivenBack(ctx context.Context, orderID string) error {
	if _, err := d.w.ExecContext(ctx, d.q(`UPDATE retakes SET pending = 3 WHERE order_id = ? AND pending = 2`), orderID); err != nil {
		return fmt.Errorf("retake of %s given back: %w", orderID, err)
	}
	return nil
}

// PendingRetakes are the orders of a sale whose late payment's retake is
// pending (PendRetake wrote it, no honour or refund step resolved it), as
// orders (id, user, bucket, variant, quantity), by id.
func (d *DB) PendingRetakes(ctx context.Context, saleID string) ([]flashgate.Order, error) {
	return d.retakeOrders(ctx, "pending retakes", saleID, `r.pending = 1`)
}

// retakeOrders are the orders of a sale whose retakes row matches cond (on
// r, the row, and o, its order; args fill cond's placeholders), as orders
// (id, user, bucket, variant, quantity), by id; what names them in errors.
// It reads in ctx's Snapshot, if any.
func (d *DB) retakeOrders(ctx context.Context, what, saleID, cond string, args ...any) ([]flashgate.Order, error) {
	rows, err := d.reader(ctx).QueryContext(ctx, d.q(`SELECT o.order_id, o.user_id, r.bucket, r.variant, r.quantity
		FROM retakes r JOIN orders o ON o.order_id = r.order_id
		WHERE r.sale_id = ? AND `+cond+` ORDER BY r.order_id`), append([]any{saleID}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("%s of sale %s: %w", what, saleID, err)
	}
	defer rows.Close()
	var out []flashgate.Order
	for rows.Next() {
		o := flashgate.Order{SaleID: saleID}
		if err := rows.Scan(&o.ID, &o.UserID, &o.Bucket, &o.Variant, &o.Quantity); err != nil {
			return nil, fmt.Errorf("%s of sale %s: %w", what, saleID, err)
		}
		out = append(out, o)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s of sale %s: %w", what, saleID, err)
	}
	return out, nil
}
