package sqldb

import (
	"context"
	"database/sql"
	"fmt"
)

// migrationLock is the PostgreSQL advisory lock key that serialises
// migrations of processes starting at once ("flashgt" in ASCII).
const migrationLock = 0x666c617368677400

// migrate applies the migrations not yet recorded, in one transaction. On
// PostgreSQL it first takes a transaction-scoped advisory lock; on SQLite the
// transaction begins IMMEDIATE, which is as exclusive among writers.
// When every migration is recorded already it takes no lock at all, so a
// process may open a database while another one writes to it.
func (d *DB) migrate(ctx context.Context) error {
	if d.upToDate(ctx) {
		return nil
	}
	tx, err := d.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if d.dialect == DialectPostgres {
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrationLock)); err != nil {
			return fmt.Errorf("advisory lock: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		applied_at TEXT NOT NULL
	)`); err != nil {
		return err
	}
	applied := map[int]bool{}
	rows, err := tx.QueryContext(ctx, `SELECT version FROM schema_migrations`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return err
		}
		applied[v] = true
	}
	if err := rows.Close(); err != nil {
		return err
	}
	for _, m := range migrations {
		if applied[m.version] {
			continue
		}
		for _, s := range m.statements(d.dialect) {
			if _, err := tx.ExecContext(ctx, s); err != nil {
				return fmt.Errorf("version %d: %w", m.version, err)
			}
		}
		if err := recordVersion(ctx, tx, d, m.version); err != nil {
			return fmt.Errorf("version %d: %w", m.version, err)
		}
	}
	return tx.Commit()
}

func recordVersion(ctx context.Context, tx *sql.Tx, d *DB, v int) error {
	_, err := tx.ExecContext(ctx, d.q(`INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)`),
		v, nowUTC().Format("2006-01-02T15:04:05.000000Z"))
	return err
}

// upToDate reports whether schema_migrations records every migration (not
// only the latest: a database missing an earlier one gets it applied).
// Any error (no such table yet) means no.
func (d *DB) upToDate(ctx context.Context) bool {
	var v int
	err := d.w.QueryRowContext(ctx, d.q(`SELECT COUNT(*) FROM schema_migrations WHERE version <= ?`),
		migrations[len(migrations)-1].version).Scan(&v)
	return err == nil && v == len(migrations)
}
