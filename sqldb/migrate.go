package sqldb

import (
	"context"
	"database/sql"
	"fmt"
)

// migration is one schema version, as statements per dialect.
type migration struct {
	version  int
	postgres []string
	sqlite   []string
}

// migrations are applied in order, each once, recorded in schema_migrations.
// Never edit an applied migration: add a new one.
//
// Version 1 is docs/api.md's schema plus two columns of sales that its
// original table did not list: admit_ratio (the admission cap is total × admit_ratio) and
// per_user (the most units one user may hold). On PostgreSQL timestamps are
// timestamptz; on SQLite they are integer unix microseconds (UTC), so that
// ordering and comparisons work in SQL.
var migrations = []migration{
	{
		version: 1,
		postgres: []string{
			`CREATE TABLE IF NOT EXISTS sales (
				id          TEXT PRIMARY KEY,
				name        TEXT NOT NULL,
				price_cents BIGINT NOT NULL,
				total       BIGINT NOT NULL,
				starts_at   TIMESTAMPTZ,
				ends_at     TIMESTAMPTZ,
				state       TEXT NOT NULL DEFAULT 'upcoming',
				admit_ratio DOUBLE PRECISION NOT NULL DEFAULT 1.5,
				per_user    BIGINT NOT NULL DEFAULT 1
			)`,
			`CREATE TABLE IF NOT EXISTS orders (
				order_id    TEXT PRIMARY KEY,
				sale_id     TEXT NOT NULL,
				user_id     TEXT NOT NULL,
				quantity    BIGINT NOT NULL,
				price_cents BIGINT NOT NULL,
				status      TEXT NOT NULL,
				created_at  TIMESTAMPTZ NOT NULL,
				updated_at  TIMESTAMPTZ NOT NULL
			)`,
			`CREATE UNIQUE INDEX IF NOT EXISTS orders_live_user ON orders (sale_id, user_id)
				WHERE status IN ('pending_payment', 'paid')`,
			`CREATE INDEX IF NOT EXISTS orders_sale_status ON orders (sale_id, status)`,
			`CREATE INDEX IF NOT EXISTS orders_status_created ON orders (status, created_at, order_id)`,
		},
		sqlite: []string{
			`CREATE TABLE IF NOT EXISTS sales (
				id          TEXT PRIMARY KEY,
				name        TEXT NOT NULL,
				price_cents INTEGER NOT NULL,
				total       INTEGER NOT NULL,
				starts_at   INTEGER,
				ends_at     INTEGER,
				state       TEXT NOT NULL DEFAULT 'upcoming',
				admit_ratio REAL NOT NULL DEFAULT 1.5,
				per_user    INTEGER NOT NULL DEFAULT 1
			)`,
			`CREATE TABLE IF NOT EXISTS orders (
				order_id    TEXT PRIMARY KEY,
				sale_id     TEXT NOT NULL,
				user_id     TEXT NOT NULL,
				quantity    INTEGER NOT NULL,
				price_cents INTEGER NOT NULL,
				status      TEXT NOT NULL,
				created_at  INTEGER NOT NULL,
				updated_at  INTEGER NOT NULL
			)`,
			`CREATE UNIQUE INDEX IF NOT EXISTS orders_live_user ON orders (sale_id, user_id)
				WHERE status IN ('pending_payment', 'paid')`,
			`CREATE INDEX IF NOT EXISTS orders_sale_status ON orders (sale_id, status)`,
			`CREATE INDEX IF NOT EXISTS orders_status_created ON orders (status, created_at, order_id)`,
		},
	},
}

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
		stmts := m.sqlite
		if d.dialect == DialectPostgres {
			stmts = m.postgres
		}
		for _, s := range stmts {
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

// upToDate reports whether schema_migrations records the latest migration.
// Any error (no such table yet) means no.
func (d *DB) upToDate(ctx context.Context) bool {
	var v int
	err := d.w.QueryRowContext(ctx, d.q(`SELECT COUNT(*) FROM schema_migrations WHERE version = ?`),
		migrations[len(migrations)-1].version).Scan(&v)
	return err == nil && v == 1
}
