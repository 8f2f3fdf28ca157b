package sqldb

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/flashgate/flashgate"
)

// deleteChunk is the most ids one DELETE statement of ReleasesDelivered
// carries.
const deleteChunk = 500

// PendingReleases returns up to limit orders of a sale that left a live status
// and whose release no re-sync has delivered yet (by id), and how many
// releases of the sale were delivered before them, both from one snapshot.
// A trigger queues each release in the transaction of its row change, so a
// crash cannot lose one. A limit below 1 means 1000.
func (d *DB) PendingReleases(ctx context.Context, saleID string, limit int) (queued []flashgate.Order, delivered int64, err error) {
	if limit < 1 {
		limit = 1000
	}
	opts := &sql.TxOptions{ReadOnly: true}
	if d.dialect == DialectPostgres {
		opts.Isolation = sql.LevelRepeatableRead
	}
	tx, err := d.r.BeginTx(ctx, opts)
	if err != nil {
		return nil, 0, fmt.Errorf("pending releases of sale %s: %w", saleID, err)
	}
	defer func() { _ = tx.Rollback() }()
	err = tx.QueryRowContext(ctx, d.q(`SELECT COALESCE((SELECT delivered FROM release_sync WHERE sale_id = ?), 0)`), saleID).Scan(&delivered)
	if err != nil {
		return nil, 0, fmt.Errorf("pending releases of sale %s: %w", saleID, err)
	}
	rows, err := tx.QueryContext(ctx, d.q(`SELECT q.order_id, q.user_id, q.quantity,
		COALESCE(o.bucket, 0), COALESCE(o.variant, '') FROM release_queue q
		LEFT JOIN orders o ON o.order_id = q.order_id
		WHERE q.sale_id = ? ORDER BY q.order_id LIMIT ?`), saleID, limit)
	if err != nil {
		return nil, 0, fmt.Errorf("pending releases of sale %s: %w", saleID, err)
	}
	defer rows.Close()
	for rows.Next() {
		o := flashgate.Order{SaleID: saleID}
		if err := rows.Scan(&o.ID, &o.UserID, &o.Quantity, &o.Bucket, &o.Variant); err != nil {
			return nil, 0, fmt.Errorf("pending releases of sale %s: %w", saleID, err)
		}
		queued = append(queued, o)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("pending releases of sale %s: %w", saleID, err)
	}
	return queued, delivered, nil
}

// ReleasesDelivered removes the given orders of a sale from its release
// queue, once Redis holds their releases, and adds how many it removed to
// the sale's delivered count, in one transaction. It returns the new count.
// Orders already removed (by a concurrent re-sync) are not counted twice.
// It runs under fencing token fence (see raiseFence).
func (d *DB) ReleasesDelivered(ctx context.Context, saleID string, orderIDs []string, fence int64) (delivered int64, err error) {
	tx, err := d.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("delivering releases of sale %s: %w", saleID, err)
	}
	defer func() { _ = tx.Rollback() }()
	if err := d.raiseFence(ctx, tx, fence); err != nil {
		return 0, fmt.Errorf("delivering releases of sale %s: %w", saleID, err)
	}
	var removed int64
	for start := 0; start < len(orderIDs); start += deleteChunk {
		chunk := orderIDs[start:min(start+deleteChunk, len(orderIDs))]
		args := make([]any, 0, 1+len(chunk))
		args = append(args, saleID)
		for _, id := range chunk {
			args = append(args, id)
		}
		res, err := tx.ExecContext(ctx, d.q(`DELETE FROM release_queue WHERE sale_id = ? AND order_id IN (`+placeholders(len(chunk))+`)`), args...)
		if err != nil {
			return 0, fmt.Errorf("delivering releases of sale %s: %w", saleID, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return 0, fmt.Errorf("delivering releases of sale %s: %w", saleID, err)
		}
		removed += n
	}
	err = tx.QueryRowContext(ctx, d.q(`INSERT INTO release_sync (sale_id, delivered) VALUES (?, ?)
		ON CONFLICT (sale_id) DO UPDATE SET delivered = release_sync.delivered + excluded.delivered
		RETURNING delivered`), saleID, removed).Scan(&delivered)
	if err != nil {
		return 0, fmt.Errorf("delivering releases of sale %s: %w", saleID, err)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("delivering releases of sale %s: %w", saleID, err)
	}
	return delivered, nil
}
