package sqldb

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
)

// queryer runs a query: the read pool, or the connection of a snapshot.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

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
// until the next rebuild). Other reads in read go to the pool as usual.
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
	if _, err := c.ExecContext(ctx, begin); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	defer func() {
		// Read only: the end changes nothing. A failed one is returned
		// only when read did not fail; the connection is then discarded
		// rather than reused inside a transaction.
		if _, rerr := c.ExecContext(context.WithoutCancel(ctx), "ROLLBACK"); rerr != nil {
			_ = c.Raw(func(any) error { return driver.ErrBadConn })
			if err == nil {
				err = fmt.Errorf("snapshot: %w", rerr)
			}
		}
	}()
	return read(context.WithValue(ctx, snapshotKey{d}, c))
}
