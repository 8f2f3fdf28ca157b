package sqldb

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"math/bits"
	"slices"
	"strings"

	"github.com/flashgate/flashgate"
)

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
// refuses (see isRefusal: a NUL byte in a PostgreSQL text, a constraint).
// The database out of reach before any order was sent (see isUnavailable:
// a connection refused, lost or not to be had, a server starting up or
// shutting down, met by BEGIN) fails it with flashgate.ErrUnavailable: the
// same batch passes once the database is back. A connection lost while the
// batch's statements were in flight is not ErrUnavailable: the batch may
// be its cause (a record that crashes the server process or makes it end
// the connection), so a caller that splits batches on failures must count
// it. Other errors are neither and may pass when tried again.
//
// The rows are inserted grouped by (sale, status, variant, quantity), in the given
// order within a group, by multi-row INSERTs of up to insertRows rows whose
// prepared statements are reused (see chunkRows): a group's inserted rows
// and units are the statement's affected rows times the quantity. On
// SQLite the counters (order_counts) and the pending releases are kept here,
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
	// Group by (sale, status, variant, quantity), stably. The order also keeps two
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
		// No order was sent yet: a connection that could not be had is
		// the database's doing, never the batch's.
		return 0, unavailable(fmt.Errorf("inserting orders: %w", err))
	}
	defer func() { _ = tx.Rollback() }()
	var counts []orderCount
	args := make([]any, 0, 10*min(len(orders), pgInsertRows))
	for start := 0; start < len(orders); {
		// A group is a run of one (sale, status, variant, quantity). Where this code
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
			// A chunk is one group: its sale, status, variant and quantity
			// are boxed once for all its rows, and a row's updated_at
			// shares created_at's box when they are equal (a new order's),
			// so that a row costs three boxes (id, user, time), not nine.
			g := &chunk[0]
			sale, status, variant, qty := any(g.SaleID), any(string(st)), any(g.Variant), any(g.Quantity)
			var price, bucket any
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
				if price == nil || price.(int64) != o.PriceCents {
					price = o.PriceCents
				}
				if bucket == nil || bucket.(int) != o.Bucket {
					bucket = o.Bucket
				}
				c := d.ts(created)
				u := c
				if !updated.Equal(created) {
					u = d.ts(updated)
				}
				args = append(args, o.ID, sale, o.UserID, qty, price, status, c, u, bucket, variant)
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

// compareInsertKey orders rows by sale, stored status, variant and
// quantity: the order PostgreSQL's triggers lock counter rows in
// (order_counts by sale and status, variant_counts by sale, status and
// variant), so that two batches never wait for each other crosswise.
func compareInsertKey(a, b flashgate.Order) int {
	if c := strings.Compare(a.SaleID, b.SaleID); c != 0 {
		return c
	}
	if c := strings.Compare(string(insertedStatus(a.Status)), string(insertedStatus(b.Status))); c != 0 {
		return c
	}
	if c := strings.Compare(a.Variant, b.Variant); c != 0 {
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
// pgInsertRows on PostgreSQL (10 parameters each, well under both drivers'
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
		b.WriteString("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
	}
	b.WriteString(` ON CONFLICT DO NOTHING`)
	return d.q(b.String())
}

// insertChunk runs the INSERT of k orders (args holds their 10k values) in
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
