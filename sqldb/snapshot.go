package sqldb

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"time"
)

// queryer runs a query: the read pool, or the connection of a snapshot.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// rollbackWait bounds the end of a Snapshot's transaction.
const rollbackWait = 5 * time.Second

// snapshotKey is the context key of a Snapshot's connection.
type snapshotKey struct{ d *DB }

// reader is where a read runs: the connection of the Snapshot ctx is in,
// or the read pool.
func (d *DB) reader(ctx context.Context) queryer {
	if c, ok := ctx.Value(snapshotKey{d}).(*sql.Conn); ok {
		return c
	}
	return d.r
}

// Snapshot runs read with a context whose reads of a sale's figures
// (Figures, VariantFigures, BucketFigures, BucketVariantFigures) and of
// its pending retakes (PendingRetakes) all see one database snapshot: one
// read-only transaction (REPEATABLE READ on PostgreSQL; a deferred one on
// SQLite, whose first read fixes the snapshot in WAL mode). A re-sync
// reads its pending retakes and its figures so: a late payment's honour
// then falls before both reads or after both, never between (where the
// figures counted its unit and the rebuild held it again, a unit hidden
// until the next rebuild). Other reads in read go to the pool as usual;
// with an in-memory SQLite database the snapshot holds its one
// connection, so read must call nothing but the reads above.
func (d *DB) Snapshot(ctx context.Context, read func(ctx context.Context) error) (err error) {
	c, err := d.r.Conn(ctx)
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	defer func() { _ = c.Close() }()
	begin := "BEGIN DEFERRED"
	if d.dialect == DialectPostgres {
		begin = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
	}
	// end ends the transaction, within rollbackWait whatever ctx says.
	// Read only: it changes nothing. A connection it could not end is
	// discarded rather than reused inside a transaction, but for an
	// in-memory SQLite database's one connection, which is the database.
	end := func() error {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackWait)
		defer cancel()
		_, err := c.ExecContext(rctx, "ROLLBACK")
		if err != nil && (d.r != d.w || d.dialect == DialectPostgres) {
			_ = c.Raw(func(any) error { return driver.ErrBadConn })
		}
		return err
	}
	if _, err := c.ExecContext(ctx, begin); err != nil {
		// The driver may report a cancellation after BEGIN ran.
		_ = end()
		return fmt.Errorf("snapshot: %w", err)
	}
	defer func() {
		if rerr := end(); rerr != nil && err == nil {
			err = fmt.Errorf("snapshot: %w", rerr)
		}
	}()
	return read(context.WithValue(ctx, snapshotKey{d}, c))
}
