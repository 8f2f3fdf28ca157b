package sqldb

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/flashgate/flashgate"
)

// Figures counts a sale's orders by status, with the units of live rows and
// of all rows, from one query and hence one consistent snapshot. It reads the
// counters that triggers keep in the transaction of every row change
// (order_counts), so it costs the same for ten orders as for a million.
func (d *DB) Figures(ctx context.Context, saleID string) (flashgate.SaleFigures, error) {
	rows, err := d.reader(ctx).QueryContext(ctx, d.q(`SELECT status, orders, units FROM order_counts WHERE sale_id = ?
		UNION ALL `+retakenUnits+` WHERE sale_id = ? AND pending <> 1`), saleID, saleID)
	if err != nil {
		return flashgate.SaleFigures{}, fmt.Errorf("figures of sale %s: %w", saleID, err)
	}
	f, err := scanFigures(rows)
	if err != nil {
		return flashgate.SaleFigures{}, fmt.Errorf("figures of sale %s: %w", saleID, err)
	}
	return f, nil
}

// BucketFigures are Figures per bucket of a bucketed sale, indexed by bucket
// (n entries), from one query and hence one snapshot. Unlike Figures it
// aggregates the sale's rows (the counters are per sale): a bucketed
// sale's re-sync pass costs a scan of its orders_sale_status_id index.
func (d *DB) BucketFigures(ctx context.Context, saleID string, n int) ([]flashgate.SaleFigures, error) {
	rows, err := d.reader(ctx).QueryContext(ctx, d.q(`SELECT bucket, status, COUNT(*), CAST(COALESCE(SUM(quantity), 0) AS BIGINT)
		FROM orders WHERE sale_id = ? GROUP BY bucket, status
		UNION ALL SELECT bucket, '`+statusRetaken+`', COUNT(*), CAST(COALESCE(SUM(quantity), 0) AS BIGINT)
		FROM retakes WHERE sale_id = ? AND pending <> 1 GROUP BY bucket`), saleID, saleID)
	if err != nil {
		return nil, fmt.Errorf("bucket figures of sale %s: %w", saleID, err)
	}
	defer rows.Close()
	out := make([]flashgate.SaleFigures, n)
	for rows.Next() {
		var (
			b             int
			st            string
			orders, units int64
		)
		if err := rows.Scan(&b, &st, &orders, &units); err != nil {
			return nil, fmt.Errorf("bucket figures of sale %s: %w", saleID, err)
		}
		if b < 0 || b >= n {
			return nil, fmt.Errorf("bucket figures of sale %s: an order in bucket %d of %d", saleID, b, n)
		}
		addFigures(&out[b], flashgate.OrderStatus(st), orders, units)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("bucket figures of sale %s: %w", saleID, err)
	}
	return out, nil
}

// BucketVariantFigures are BucketFigures of a sale sold in variants, with
// each bucket's figures per variant id, from one query and hence one
// snapshot. Rows whose variant is "" count in their bucket's figures only.
func (d *DB) BucketVariantFigures(ctx context.Context, saleID string, n int) ([]flashgate.SaleFigures, []map[string]flashgate.SaleFigures, error) {
	rows, err := d.reader(ctx).QueryContext(ctx, d.q(`SELECT bucket, variant, status, COUNT(*), CAST(COALESCE(SUM(quantity), 0) AS BIGINT)
		FROM orders WHERE sale_id = ? GROUP BY bucket, variant, status
		UNION ALL SELECT bucket, variant, '`+statusRetaken+`', COUNT(*), CAST(COALESCE(SUM(quantity), 0) AS BIGINT)
		FROM retakes WHERE sale_id = ? AND pending <> 1 GROUP BY bucket, variant`), saleID, saleID)
	if err != nil {
		return nil, nil, fmt.Errorf("bucket figures of sale %s: %w", saleID, err)
	}
	defer rows.Close()
	out := make([]flashgate.SaleFigures, n)
	per := make([]map[string]flashgate.SaleFigures, n)
	for b := range per {
		per[b] = make(map[string]flashgate.SaleFigures)
	}
	for rows.Next() {
		var (
			b             int
			v, st         string
			orders, units int64
		)
		if err := rows.Scan(&b, &v, &st, &orders, &units); err != nil {
			return nil, nil, fmt.Errorf("bucket figures of sale %s: %w", saleID, err)
		}
		if b < 0 || b >= n {
			return nil, nil, fmt.Errorf("bucket figures of sale %s: an order in bucket %d of %d", saleID, b, n)
		}
		addFigures(&out[b], flashgate.OrderStatus(st), orders, units)
		if v != "" {
			f := per[b][v]
			addFigures(&f, flashgate.OrderStatus(st), orders, units)
			per[b][v] = f
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("bucket figures of sale %s: %w", saleID, err)
	}
	return out, per, nil
}

// AllFigures sums the figures of every sale, for metrics; like Figures it
// reads counters, one row per sale and status.
func (d *DB) AllFigures(ctx context.Context) (flashgate.SaleFigures, error) {
	rows, err := d.r.QueryContext(ctx, `SELECT status, CAST(SUM(orders) AS BIGINT), CAST(SUM(units) AS BIGINT) FROM order_counts GROUP BY status`)
	if err != nil {
		return flashgate.SaleFigures{}, fmt.Errorf("figures of all sales: %w", err)
	}
	f, err := scanFigures(rows)
	if err != nil {
		return flashgate.SaleFigures{}, fmt.Errorf("figures of all sales: %w", err)
	}
	return f, nil
}

// scanFigures folds (status, orders, units) rows into SaleFigures.
func scanFigures(rows *sql.Rows) (flashgate.SaleFigures, error) {
	defer rows.Close()
	var f flashgate.SaleFigures
	for rows.Next() {
		var (
			st            string
			orders, units int64
		)
		if err := rows.Scan(&st, &orders, &units); err != nil {
			return flashgate.SaleFigures{}, err
		}
		addFigures(&f, flashgate.OrderStatus(st), orders, units)
	}
	return f, rows.Err()
}

// statusRetaken is the status figures queries give the units of retakes,
// and retakenUnits the query that reads a sale's (a row even when none).
// Every retake but a pending one counts (pending <> 1: honoured 0, owed
// back 2, given back 3): a pending one may never take its units, and Redis
// counts them as reserved once it does; an honoured one's units stay
// persisted after its order's refund, as a released row's do (P never goes
// down, so a re-sync never reads Redis as older than the database).
const (
	statusRetaken = "retaken"
	retakenUnits  = `SELECT '` + statusRetaken + `', COUNT(*), CAST(COALESCE(SUM(quantity), 0) AS BIGINT) FROM retakes`
)

// addFigures adds orders rows of status st holding units to f.
func addFigures(f *flashgate.SaleFigures, st flashgate.OrderStatus, orders, units int64) {
	if st == statusRetaken {
		// Units a late payment took again: persisted once more (Redis
		// counted them as reserved when it took them), no row of their own.
		f.PersistedUnits += units
		return
	}
	f.Persisted += orders
	f.PersistedUnits += units
	switch st {
	case flashgate.StatusPendingPayment:
		f.PendingPayment += orders
		f.LiveUnits += units
	case flashgate.StatusPaid:
		f.Paid += orders
		f.LiveUnits += units
	case flashgate.StatusCancelled:
		f.Cancelled += orders
	case flashgate.StatusExpired:
		f.Expired += orders
	case flashgate.StatusRefunded:
		f.Refunded += orders
	}
}

// VariantFigures are the figures of a sale sold in several variants, of the
// whole sale and per variant id, from one query and hence one snapshot:
// the re-sync's L and P of the sale and of each variant agree. Like
// Figures it reads counters (order_counts, and variant_counts kept by
// triggers in the transaction of every row change), so it costs the same
// for ten orders as for a million. Rows whose variant is "" (none) count
// in the whole sale's figures only.
func (d *DB) VariantFigures(ctx context.Context, saleID string) (flashgate.SaleFigures, map[string]flashgate.SaleFigures, error) {
	rows, err := d.reader(ctx).QueryContext(ctx, d.q(`SELECT '', status, orders, units FROM order_counts WHERE sale_id = ?
		UNION ALL SELECT variant, status, orders, units FROM variant_counts WHERE sale_id = ?
		UNION ALL SELECT '', '`+statusRetaken+`', COUNT(*), CAST(COALESCE(SUM(quantity), 0) AS BIGINT) FROM retakes WHERE sale_id = ? AND pending <> 1
		UNION ALL SELECT variant, '`+statusRetaken+`', COUNT(*), CAST(COALESCE(SUM(quantity), 0) AS BIGINT)
		FROM retakes WHERE sale_id = ? AND pending <> 1 AND variant <> '' GROUP BY variant`), saleID, saleID, saleID, saleID)
	if err != nil {
		return flashgate.SaleFigures{}, nil, fmt.Errorf("variant figures of sale %s: %w", saleID, err)
	}
	defer rows.Close()
	var all flashgate.SaleFigures
	per := make(map[string]flashgate.SaleFigures)
	for rows.Next() {
		var (
			v, st         string
			orders, units int64
		)
		if err := rows.Scan(&v, &st, &orders, &units); err != nil {
			return flashgate.SaleFigures{}, nil, fmt.Errorf("variant figures of sale %s: %w", saleID, err)
		}
		if v == "" {
			addFigures(&all, flashgate.OrderStatus(st), orders, units)
			continue
		}
		f := per[v]
		addFigures(&f, flashgate.OrderStatus(st), orders, units)
		per[v] = f
	}
	if err := rows.Err(); err != nil {
		return flashgate.SaleFigures{}, nil, fmt.Errorf("variant figures of sale %s: %w", saleID, err)
	}
	return all, per, nil
}
