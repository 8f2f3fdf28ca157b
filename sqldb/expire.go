package sqldb

import (
	"context"
	"fmt"
	"time"

	"github.com/flashgate/flashgate"
)

// ExpireDue moves up to limit pending_payment orders created before
// createdBefore, and without a payment in flight at the provider (a
// payments row neither settled nor canceled, or one an admin refund owns:
// the reconciliation asks the provider about those first), to expired (updated_at = now) and returns them, oldest first.
// It leaves a draw sale's orders: each is a winner's, paid by its entry's
// hold, captured before the close made the order, and the close marks it
// paid, later when a fault cut it short (an expiry then gave the unit back
// while the card stayed charged).
// Every returned order was moved by this call: on PostgreSQL the rows are
// picked with FOR UPDATE SKIP LOCKED, so two control planes never expire the
// same row; SQLite serialises writers. A limit below 1 means 100. It runs
// under fencing token fence (see raiseFence): with a stale one it expires
// nothing and returns flashgate.ErrFenced.
func (d *DB) ExpireDue(ctx context.Context, createdBefore, now time.Time, limit int, fence int64) ([]flashgate.Order, error) {
	if limit < 1 {
		limit = 100
	}
	tx, err := d.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("expiring orders: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	if err := d.raiseFence(ctx, tx, fence); err != nil {
		return nil, fmt.Errorf("expiring orders: %w", err)
	}
	rows, err := tx.QueryContext(ctx, d.expireDueSQL(),
		string(flashgate.StatusExpired), d.ts(now),
		string(flashgate.StatusPendingPayment), d.ts(createdBefore), flashgate.QueueDraw, limit,
		string(flashgate.StatusPendingPayment))
	if err != nil {
		return nil, fmt.Errorf("expiring orders: %w", err)
	}
	out, err := scanOrders(rows)
	if err != nil {
		return nil, fmt.Errorf("expiring orders: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("expiring orders: %w", err)
	}
	sortOrders(out)
	return out, nil
}

// expireDueSQL is ExpireDue's statement in d's dialect. On SQLite the outer
// status test is written +status, which keeps the planner from answering
// the outer WHERE by walking orders_status_created over every
// pending_payment row (O(orders) a pass) instead of looking up the few ids
// the subquery picked by primary key.
func (d *DB) expireDueSQL() string {
	lock, outer := "", "+status"
	if d.dialect == DialectPostgres {
		lock, outer = " FOR UPDATE SKIP LOCKED", "status"
	}
	return d.q(`UPDATE orders SET status = ?, updated_at = ?
		WHERE order_id IN (SELECT order_id FROM orders
			WHERE status = ? AND created_at < ?
			AND NOT EXISTS (SELECT 1 FROM payments p WHERE p.order_id = orders.order_id
				AND ((p.outcome = '' AND p.status <> 'canceled') OR p.outcome = 'refunding'))
			AND NOT EXISTS (SELECT 1 FROM sales s WHERE s.id = orders.sale_id AND s.queue = ?)
			ORDER BY created_at, order_id LIMIT ?` + lock + `)
		AND ` + outer + ` = ? RETURNING ` + orderColsB)
}
