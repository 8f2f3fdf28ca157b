package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/flashgate/flashgate"
)

const orderCols = `order_id, sale_id, user_id, quantity, price_cents, status, created_at, updated_at`

// orderColsB are orderCols, the bucket and the variant, which every read
// scans.
const orderColsB = orderCols + `, bucket, variant`

func scanOrder(r rowScanner) (flashgate.Order, error) {
	var (
		o       flashgate.Order
		st      string
		cr, upd stamp
	)
	if err := r.Scan(&o.ID, &o.SaleID, &o.UserID, &o.Quantity, &o.PriceCents, &st, &cr, &upd, &o.Bucket, &o.Variant); err != nil {
		return flashgate.Order{}, err
	}
	o.Status = flashgate.OrderStatus(st)
	o.CreatedAt, o.UpdatedAt = cr.T, upd.T
	return o, nil
}

func scanOrders(rows *sql.Rows) ([]flashgate.Order, error) {
	defer rows.Close()
	var out []flashgate.Order
	for rows.Next() {
		o, err := scanOrder(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, rows.Err()
}

// storedStatus reports whether s may be stored in a row (reserved lives in
// Redis only).
func storedStatus(s flashgate.OrderStatus) bool {
	switch s {
	case flashgate.StatusPendingPayment, flashgate.StatusPaid, flashgate.StatusCancelled,
		flashgate.StatusExpired, flashgate.StatusRefunded:
		return true
	}
	return false
}

// Order returns the order with id, or flashgate.ErrNotFound.
func (d *DB) Order(ctx context.Context, id string) (flashgate.Order, error) {
	o, err := scanOrder(d.r.QueryRowContext(ctx, d.q(`SELECT `+orderColsB+` FROM orders WHERE order_id = ?`), id))
	if err != nil {
		return flashgate.Order{}, notFound(err, "order "+id)
	}
	return o, nil
}

// Transition moves order id from any status in from to status to, stamping
// updated_at with now, in one conditional UPDATE: of two racing transitions
// (pay and expire, say) at most one wins. It returns the updated row. No
// such order is flashgate.ErrNotFound; an order whose status is not in from
// is returned as it stands, with flashgate.ErrNotPayable.
func (d *DB) Transition(ctx context.Context, id string, from []flashgate.OrderStatus, to flashgate.OrderStatus, now time.Time) (flashgate.Order, error) {
	if !storedStatus(to) {
		return flashgate.Order{}, &flashgate.FieldError{Field: "status", Reason: "cannot store " + string(to)}
	}
	if len(from) > 0 {
		args := []any{string(to), d.ts(now), id}
		for _, f := range from {
			args = append(args, string(f))
		}
		query := `UPDATE orders SET status = ?, updated_at = ? WHERE order_id = ? AND status IN (` +
			placeholders(len(from)) + `) RETURNING ` + orderColsB
		o, err := scanOrder(d.w.QueryRowContext(ctx, d.q(query), args...))
		switch {
		case err == nil:
			return o, nil
		case isUnique(err):
			return flashgate.Order{}, fmt.Errorf("order %s to %s: %w", id, to, flashgate.ErrAlreadyPurchased)
		case !errors.Is(err, sql.ErrNoRows):
			return flashgate.Order{}, fmt.Errorf("order %s to %s: %w", id, to, err)
		}
	}
	o, err := d.orderFrom(ctx, d.w, id)
	if err != nil {
		return flashgate.Order{}, notFound(err, "order "+id)
	}
	return o, fmt.Errorf("order %s is %s: %w", id, o.Status, flashgate.ErrNotPayable)
}

// orderFrom reads an order through db; Transition reads through the writer
// so that it sees its own database's latest commit.
func (d *DB) orderFrom(ctx context.Context, db *sql.DB, id string) (flashgate.Order, error) {
	return scanOrder(db.QueryRowContext(ctx, d.q(`SELECT `+orderColsB+` FROM orders WHERE order_id = ?`), id))
}

func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

// sortOrders sorts by creation, then id: RETURNING gives no order.
func sortOrders(os []flashgate.Order) {
	slices.SortFunc(os, func(a, b flashgate.Order) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
}

// LiveOrders returns the sale's pending_payment and paid orders, oldest
// first. It loads them all: for checks and reports, not for periodic loops
// (those page with OrdersPage).
func (d *DB) LiveOrders(ctx context.Context, saleID string) ([]flashgate.Order, error) {
	return d.ordersIn(ctx, saleID, flashgate.StatusPendingPayment, flashgate.StatusPaid)
}

// ReleasedOrders returns the sale's cancelled, expired and refunded orders,
// oldest first; like LiveOrders it loads them all.
func (d *DB) ReleasedOrders(ctx context.Context, saleID string) ([]flashgate.Order, error) {
	return d.ordersIn(ctx, saleID, flashgate.StatusCancelled, flashgate.StatusExpired, flashgate.StatusRefunded)
}

func (d *DB) ordersIn(ctx context.Context, saleID string, sts ...flashgate.OrderStatus) ([]flashgate.Order, error) {
	args := []any{saleID}
	for _, s := range sts {
		args = append(args, string(s))
	}
	return d.queryOrders(ctx, saleID, `SELECT `+orderColsB+` FROM orders
		WHERE sale_id = ? AND status IN (`+placeholders(len(sts))+`) ORDER BY created_at, order_id`, args...)
}

// queryOrders runs an orders query of one sale and scans its rows.
func (d *DB) queryOrders(ctx context.Context, saleID, query string, args ...any) ([]flashgate.Order, error) {
	rows, err := d.r.QueryContext(ctx, d.q(query), args...)
	if err != nil {
		return nil, fmt.Errorf("orders of sale %s: %w", saleID, err)
	}
	out, err := scanOrders(rows)
	if err != nil {
		return nil, fmt.Errorf("orders of sale %s: %w", saleID, err)
	}
	return out, nil
}

// OrdersPage returns up to limit orders of a sale in status st whose id
// sorts after afterID, by id: a page of a walk through one status that
// holds only a page in memory. A limit below 1 means 1000.
func (d *DB) OrdersPage(ctx context.Context, saleID string, st flashgate.OrderStatus, afterID string, limit int) ([]flashgate.Order, error) {
	if limit < 1 {
		limit = 1000
	}
	return d.queryOrders(ctx, saleID, `SELECT `+orderColsB+` FROM orders
		WHERE sale_id = ? AND status = ? AND order_id > ? ORDER BY order_id LIMIT ?`, saleID, string(st), afterID, limit)
}
