package sqldb

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"time"

	"github.com/flashgate/flashgate"
)

const orderCols = `order_id, sale_id, user_id, quantity, price_cents, status, created_at, updated_at`

// orderColsB are orderCols and the bucket, which every read scans.
const orderColsB = orderCols + `, bucket`

// deleteChunk is the most ids one DELETE statement of ReleasesDelivered
// carries.
const deleteChunk = 500

func scanOrder(r rowScanner) (flashgate.Order, error) {
	var (
		o       flashgate.Order
		st      string
		cr, upd stamp
	)
	if err := r.Scan(&o.ID, &o.SaleID, &o.UserID, &o.Quantity, &o.PriceCents, &st, &cr, &upd, &o.Bucket); err != nil {
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

// insertedStatus is the status a row is stored with: reserved (or none)
// becomes pending_payment.
func insertedStatus(st flashgate.OrderStatus) flashgate.OrderStatus {
	if st == "" || st == flashgate.StatusReserved {
		return flashgate.StatusPendingPayment
	}
	return st
}

// InsertOrders stores orders in one transaction, skipping any that conflict
// with a stored row (the same order id, or a second live order of a user in
// a sale), and returns how many rows were really inserted; inserting the
// same batch again inserts nothing. An empty or reserved Status is stored as
// pending_payment; a zero CreatedAt as now; a zero UpdatedAt as CreatedAt.
// An order without id, sale or user, or with a quantity below 1, fails the
// batch with flashgate.ErrBadRequest, and so does a value the database
// refuses (see isRefusal: a NUL byte in a PostgreSQL text, a constraint);
// other errors (the database unreachable, say) are not ErrBadRequest and
// may pass when tried again.
//
// The rows are inserted grouped by (sale, status, quantity), in the given
// order within a group, by multi-row INSERTs of up to insertRows rows whose
// prepared statements are reused (see chunkRows): a group's inserted rows
// and units are the statement's affected rows times the quantity. On
// SQLite the counters (order_counts) and the release queue are kept here,
// once per (sale, status) per batch, in the same transaction (see migration
// 4); on PostgreSQL the statement-level trigger keeps them.
func (d *DB) InsertOrders(ctx context.Context, orders []flashgate.Order) (inserted int, err error) {
	if len(orders) == 0 {
		return 0, nil
	}
	defer func() { err = refused(err) }()
	for i := range orders {
		o := &orders[i]
		switch {
		case o.ID == "":
			return 0, &flashgate.FieldError{Field: "order_id", Reason: "empty"}
		case o.SaleID == "":
			return 0, &flashgate.FieldError{Field: "sale_id", Reason: "empty"}
		case o.UserID == "":
			return 0, &flashgate.FieldError{Field: "user_id", Reason: "empty"}
		case o.Quantity < 1:
			return 0, &flashgate.FieldError{Field: "quantity", Reason: "below 1"}
		case o.Status != "" && o.Status != flashgate.StatusReserved && !storedStatus(o.Status):
			return 0, &flashgate.FieldError{Field: "status", Reason: "unknown status " + string(o.Status)}
		}
	}
	// Group by (sale, status, quantity), stably. The order also keeps two
	// concurrent batches on PostgreSQL from locking counter rows crosswise:
	// each statement's trigger locks its (sale, status) rows until commit.
	if !groupedForInsert(orders) {
		orders = slices.Clone(orders)
		slices.SortStableFunc(orders, compareInsertKey)
	}
	counting := d.dialect == DialectSQLite
	if counting {
		if err := d.prepareInserts(ctx); err != nil {
			return 0, fmt.Errorf("inserting orders: %w", err)
		}
	}
	now := nowUTC()
	tx, err := d.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("inserting orders: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	var counts []orderCount
	args := make([]any, 0, 9*min(len(orders), pgInsertRows))
	for start := 0; start < len(orders); {
		// A group is a run of one (sale, status, quantity). Where this code
		// counts, a released row goes alone, so that the statement says
		// whether it was inserted (and must be queued for release).
		st := insertedStatus(orders[start].Status)
		released := counting && !st.Live()
		end := start + 1
		for end < len(orders) && !released && compareInsertKey(orders[start], orders[end]) == 0 {
			end++
		}
		for start < end {
			k := d.chunkRows(end - start)
			chunk := orders[start : start+k]
			start += k
			args = args[:0]
			for i := range chunk {
				o := &chunk[i]
				created := o.CreatedAt
				if created.IsZero() {
					created = now
				}
				updated := o.UpdatedAt
				if updated.IsZero() {
					updated = created
				}
				args = append(args, o.ID, o.SaleID, o.UserID, o.Quantity, o.PriceCents, string(st), d.ts(created), d.ts(updated), o.Bucket)
			}
			n, err := d.insertChunk(ctx, tx, k, args)
			if err != nil {
				return 0, fmt.Errorf("inserting orders: %w", err)
			}
			inserted += int(n)
			if !counting || n == 0 {
				continue
			}
			o := chunk[0]
			if released {
				if _, err := tx.ExecContext(ctx, `INSERT INTO release_queue (sale_id, order_id, user_id, quantity) VALUES (?, ?, ?, ?)
					ON CONFLICT DO NOTHING`, o.SaleID, o.ID, o.UserID, o.Quantity); err != nil {
					return 0, fmt.Errorf("inserting orders: queueing a release: %w", err)
				}
			}
			if l := len(counts) - 1; l >= 0 && counts[l].sale == o.SaleID && counts[l].status == st {
				counts[l].orders += n
				counts[l].units += n * o.Quantity
			} else {
				counts = append(counts, orderCount{o.SaleID, st, n, n * o.Quantity})
			}
		}
	}
	for _, c := range counts {
		if _, err := tx.ExecContext(ctx, `INSERT INTO order_counts (sale_id, status, orders, units) VALUES (?, ?, ?, ?)
			ON CONFLICT (sale_id, status) DO UPDATE SET orders = orders + excluded.orders, units = units + excluded.units`,
			c.sale, string(c.status), c.orders, c.units); err != nil {
			return 0, fmt.Errorf("inserting orders: counting them: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("inserting orders: %w", err)
	}
	return inserted, nil
}

// orderCount is what one batch adds to a counter row of order_counts.
type orderCount struct {
	sale          string
	status        flashgate.OrderStatus
	orders, units int64
}

// compareInsertKey orders rows by sale, stored status and quantity.
func compareInsertKey(a, b flashgate.Order) int {
	if c := strings.Compare(a.SaleID, b.SaleID); c != 0 {
		return c
	}
	if c := strings.Compare(string(insertedStatus(a.Status)), string(insertedStatus(b.Status))); c != 0 {
		return c
	}
	return cmp.Compare(a.Quantity, b.Quantity)
}

// groupedForInsert reports whether orders are sorted by compareInsertKey
// already (an order sink's batch of one sale: one group), so that
// InsertOrders need not copy them.
func groupedForInsert(orders []flashgate.Order) bool {
	for i := 1; i < len(orders); i++ {
		if compareInsertKey(orders[i-1], orders[i]) > 0 {
			return false
		}
	}
	return true
}

// insertRows is the most rows one INSERT statement carries on SQLite, and
// pgInsertRows on PostgreSQL (9 parameters each, well under both drivers'
// parameter limits).
const (
	insertRows   = 256
	pgInsertRows = 1024
)

// chunkRows is how many of n rows (n > 0) the next statement carries: on
// SQLite the largest power of two not above n or insertRows (nine prepared
// statements cover every size); on PostgreSQL n up to pgInsertRows (pgx
// caches a prepared statement per text on each connection), so that an
// order sink's batch is one statement and one run of the statement-level
// trigger.
func (d *DB) chunkRows(n int) int {
	if d.dialect == DialectPostgres {
		return min(n, pgInsertRows)
	}
	if n >= insertRows {
		return insertRows
	}
	return 1 << (bits.Len(uint(n)) - 1)
}

// insertSQL is the INSERT of k orders, skipping conflicts.
func (d *DB) insertSQL(k int) string {
	var b strings.Builder
	b.Grow(64 + 32*k)
	b.WriteString(`INSERT INTO orders (` + orderColsB + `) VALUES `)
	for i := 0; i < k; i++ {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(?, ?, ?, ?, ?, ?, ?, ?, ?)")
	}
	b.WriteString(` ON CONFLICT DO NOTHING`)
	return d.q(b.String())
}

// insertChunk runs the INSERT of k orders (args holds their 9k values) in
// tx and returns how many rows it inserted. On SQLite it reuses a statement
// prepared once on the writer's connection (modernc prepares every Exec
// anew otherwise, and an INSERT of 256 rows takes long to prepare); pgx
// caches prepared statements by their text on each connection itself.
func (d *DB) insertChunk(ctx context.Context, tx *sql.Tx, k int, args []any) (int64, error) {
	var (
		res sql.Result
		err error
	)
	if d.dialect == DialectSQLite {
		res, err = tx.StmtContext(ctx, d.insertStmt(k)).ExecContext(ctx, args...)
	} else {
		res, err = tx.ExecContext(ctx, d.insertSQL(k), args...)
	}
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// prepareInserts prepares the INSERTs of every power of two of rows up to
// insertRows on SQLite's writer, once (and again after a failure). It runs
// before InsertOrders' transaction: the writer has a single connection,
// which the transaction holds.
func (d *DB) prepareInserts(ctx context.Context) error {
	d.stmtMu.Lock()
	defer d.stmtMu.Unlock()
	for i := range d.insertStmts {
		if d.insertStmts[i] != nil {
			continue
		}
		stmt, err := d.w.PrepareContext(ctx, d.insertSQL(1<<i))
		if err != nil {
			return fmt.Errorf("preparing an insert of %d orders: %w", 1<<i, err)
		}
		d.insertStmts[i] = stmt
	}
	return nil
}

// insertStmt returns the prepared INSERT of k rows (a power of two).
func (d *DB) insertStmt(k int) *sql.Stmt {
	d.stmtMu.Lock()
	defer d.stmtMu.Unlock()
	return d.insertStmts[bits.Len(uint(k))-1]
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

// ExpireDue moves up to limit pending_payment orders created before
// createdBefore to expired (updated_at = now) and returns them, oldest first.
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
		string(flashgate.StatusPendingPayment), d.ts(createdBefore), limit,
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
			WHERE status = ? AND created_at < ? ORDER BY created_at, order_id LIMIT ?` + lock + `)
		AND ` + outer + ` = ? RETURNING ` + orderColsB)
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

// Figures counts a sale's orders by status, with the units of live rows and
// of all rows, from one query and hence one consistent snapshot. It reads the
// counters that triggers keep in the transaction of every row change
// (order_counts), so it costs the same for ten orders as for a million.
func (d *DB) Figures(ctx context.Context, saleID string) (flashgate.SaleFigures, error) {
	rows, err := d.r.QueryContext(ctx, d.q(`SELECT status, orders, units FROM order_counts WHERE sale_id = ?`), saleID)
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
	rows, err := d.r.QueryContext(ctx, d.q(`SELECT bucket, status, COUNT(*), CAST(COALESCE(SUM(quantity), 0) AS BIGINT)
		FROM orders WHERE sale_id = ? GROUP BY bucket, status`), saleID)
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

// addFigures adds orders rows of status st holding units to f.
func addFigures(f *flashgate.SaleFigures, st flashgate.OrderStatus, orders, units int64) {
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

// ReleaseQueue returns up to limit orders of a sale that left a live status
// and whose release no re-sync has delivered yet (by id), and how many
// releases of the sale were delivered before them, both from one snapshot.
// A trigger queues each release in the transaction of its row change, so a
// crash cannot lose one. A limit below 1 means 1000.
func (d *DB) ReleaseQueue(ctx context.Context, saleID string, limit int) (queued []flashgate.Order, delivered int64, err error) {
	if limit < 1 {
		limit = 1000
	}
	opts := &sql.TxOptions{ReadOnly: true}
	if d.dialect == DialectPostgres {
		opts.Isolation = sql.LevelRepeatableRead
	}
	tx, err := d.r.BeginTx(ctx, opts)
	if err != nil {
		return nil, 0, fmt.Errorf("release queue of sale %s: %w", saleID, err)
	}
	defer func() { _ = tx.Rollback() }()
	err = tx.QueryRowContext(ctx, d.q(`SELECT COALESCE((SELECT delivered FROM release_sync WHERE sale_id = ?), 0)`), saleID).Scan(&delivered)
	if err != nil {
		return nil, 0, fmt.Errorf("release queue of sale %s: %w", saleID, err)
	}
	rows, err := tx.QueryContext(ctx, d.q(`SELECT q.order_id, q.user_id, q.quantity,
		COALESCE((SELECT o.bucket FROM orders o WHERE o.order_id = q.order_id), 0) FROM release_queue q
		WHERE q.sale_id = ? ORDER BY q.order_id LIMIT ?`), saleID, limit)
	if err != nil {
		return nil, 0, fmt.Errorf("release queue of sale %s: %w", saleID, err)
	}
	defer rows.Close()
	for rows.Next() {
		o := flashgate.Order{SaleID: saleID}
		if err := rows.Scan(&o.ID, &o.UserID, &o.Quantity, &o.Bucket); err != nil {
			return nil, 0, fmt.Errorf("release queue of sale %s: %w", saleID, err)
		}
		queued = append(queued, o)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("release queue of sale %s: %w", saleID, err)
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
