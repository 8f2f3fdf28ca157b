package sqldb

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// migration is one schema version. Statements that differ between the
// dialects only in their column types are written once, in both, with
// {int}, {real} and {time} standing for the type (see ddlTypes); the rest,
// such as triggers, are written per dialect and run after them.
type migration struct {
	version  int
	both     []string
	postgres []string
	sqlite   []string
}

// ddlTypes are the column types each dialect gives a placeholder of a
// migration's shared statements. On PostgreSQL timestamps are timestamptz;
// on SQLite they are integer unix microseconds (UTC), so that ordering and
// comparisons work in SQL.
var ddlTypes = map[string]*strings.Replacer{
	DialectPostgres: strings.NewReplacer("{int}", "BIGINT", "{real}", "DOUBLE PRECISION", "{time}", "TIMESTAMPTZ"),
	DialectSQLite:   strings.NewReplacer("{int}", "INTEGER", "{real}", "REAL", "{time}", "INTEGER"),
}

// statements returns m's statements for dialect, in the order they run.
func (m migration) statements(dialect string) []string {
	out := make([]string, 0, len(m.both)+len(m.postgres)+len(m.sqlite))
	for _, q := range m.both {
		out = append(out, ddlTypes[dialect].Replace(q))
	}
	if dialect == DialectPostgres {
		return append(out, m.postgres...)
	}
	return append(out, m.sqlite...)
}

// migrations are applied in order, each once, recorded in schema_migrations.
// Never edit an applied migration: add a new one.
//
// Version 1 is docs/api.md's schema plus two columns of sales that its
// original table did not list: admit_ratio (the admission cap is total ×
// admit_ratio) and per_user (the most units one user may hold).
var migrations = []migration{
	{
		version: 1,
		both: []string{
			`CREATE TABLE IF NOT EXISTS sales (
				id          TEXT PRIMARY KEY,
				name        TEXT NOT NULL,
				price_cents {int} NOT NULL,
				total       {int} NOT NULL,
				starts_at   {time},
				ends_at     {time},
				state       TEXT NOT NULL DEFAULT 'upcoming',
				admit_ratio {real} NOT NULL DEFAULT 1.5,
				per_user    {int} NOT NULL DEFAULT 1
			)`,
			`CREATE TABLE IF NOT EXISTS orders (
				order_id    TEXT PRIMARY KEY,
				sale_id     TEXT NOT NULL,
				user_id     TEXT NOT NULL,
				quantity    {int} NOT NULL,
				price_cents {int} NOT NULL,
				status      TEXT NOT NULL,
				created_at  {time} NOT NULL,
				updated_at  {time} NOT NULL
			)`,
			`CREATE UNIQUE INDEX IF NOT EXISTS orders_live_user ON orders (sale_id, user_id)
				WHERE status IN ('pending_payment', 'paid')`,
			`CREATE INDEX IF NOT EXISTS orders_sale_status ON orders (sale_id, status)`,
			`CREATE INDEX IF NOT EXISTS orders_status_created ON orders (status, created_at, order_id)`,
		},
	},
	{
		// Version 2 keeps the bookkeeping of each sale flat as the sale
		// grows (see docs/internals.md, "Bookkeeping that stays flat"):
		// order_counts holds rows and units per (sale, status) and
		// release_queue every order that left a live status and whose
		// release a re-sync has not yet delivered to Redis; release_sync
		// counts the deliveries. Triggers keep all three in the transaction
		// of every row change, whoever makes it; the counts are filled from
		// the rows that exist, under a lock that holds writers off meanwhile.
		version:  2,
		postgres: bookkeepingPostgres,
		sqlite:   bookkeepingSQLite,
	},
	{
		// Version 3 stores the bucket layout of a sale (buckets, and the
		// salts of the buckets' hash tags, comma-separated) and the bucket
		// each order's units came from; an unbucketed sale has buckets 1,
		// no salts, and its orders bucket 0.
		version: 3,
		postgres: []string{
			`ALTER TABLE sales ADD COLUMN IF NOT EXISTS buckets INTEGER NOT NULL DEFAULT 1`,
			`ALTER TABLE sales ADD COLUMN IF NOT EXISTS bucket_salts TEXT NOT NULL DEFAULT ''`,
			`ALTER TABLE orders ADD COLUMN IF NOT EXISTS bucket INTEGER NOT NULL DEFAULT 0`,
		},
		sqlite: []string{
			`ALTER TABLE sales ADD COLUMN buckets INTEGER NOT NULL DEFAULT 1`,
			`ALTER TABLE sales ADD COLUMN bucket_salts TEXT NOT NULL DEFAULT ''`,
			`ALTER TABLE orders ADD COLUMN bucket INTEGER NOT NULL DEFAULT 0`,
		},
	},
	{
		// Version 4 drops SQLite's row trigger on INSERT: InsertOrders, the
		// only writer of new rows, counts its rows and queues released ones
		// once per (sale, status) per batch in its own transaction, which
		// costs a fraction of a trigger program run for every row (see
		// docs/internals.md, "The order sink's inserts"). The UPDATE and
		// DELETE triggers stay. PostgreSQL keeps its statement-level
		// trigger, which already counts once per statement.
		version: 4,
		sqlite:  []string{`DROP TRIGGER IF EXISTS orders_count_insert`},
	},
	{
		// Version 5 marks the sales that ended and settled (archived = 1):
		// the control plane's periodic passes and the lookup of orders not
		// yet stored read only the others, through the partial index, so
		// their cost does not grow with past sales (docs/internals.md,
		// "Archived sales").
		version: 5,
		both: []string{
			`ALTER TABLE sales ADD COLUMN archived {int} NOT NULL DEFAULT 0`,
			`CREATE INDEX IF NOT EXISTS sales_live ON sales (id) WHERE archived = 0`,
		},
	},
	{
		// Version 6 holds the leader fence: the highest fencing token a
		// write of the control plane's loops carried (see raiseFence). A
		// write with a lower token changes nothing.
		version: 6,
		both: []string{
			`CREATE TABLE IF NOT EXISTS leader_fence (
				id    {int} PRIMARY KEY,
				token {int} NOT NULL
			)`,
			`INSERT INTO leader_fence (id, token) VALUES (1, 0) ON CONFLICT (id) DO NOTHING`,
		},
	},
	{
		// Version 7 stores a sale's fair-queue settings (docs/api.md, "Fair
		// queue"): queue is "" (first come) or "fair"; zeros mean defaults,
		// challenge_auto is 1 (true) or 0.
		version: 7,
		postgres: []string{
			`ALTER TABLE sales ADD COLUMN IF NOT EXISTS queue TEXT NOT NULL DEFAULT ''`,
			`ALTER TABLE sales ADD COLUMN IF NOT EXISTS prequeue_seconds INTEGER NOT NULL DEFAULT 0`,
			`ALTER TABLE sales ADD COLUMN IF NOT EXISTS challenge_maxnumber BIGINT NOT NULL DEFAULT 0`,
			`ALTER TABLE sales ADD COLUMN IF NOT EXISTS challenge_auto INTEGER NOT NULL DEFAULT 1`,
			`ALTER TABLE sales ADD COLUMN IF NOT EXISTS admit_per_minute BIGINT NOT NULL DEFAULT 0`,
			`ALTER TABLE sales ADD COLUMN IF NOT EXISTS admit_seconds INTEGER NOT NULL DEFAULT 0`,
		},
		sqlite: []string{
			`ALTER TABLE sales ADD COLUMN queue TEXT NOT NULL DEFAULT ''`,
			`ALTER TABLE sales ADD COLUMN prequeue_seconds INTEGER NOT NULL DEFAULT 0`,
			`ALTER TABLE sales ADD COLUMN challenge_maxnumber BIGINT NOT NULL DEFAULT 0`,
			`ALTER TABLE sales ADD COLUMN challenge_auto INTEGER NOT NULL DEFAULT 1`,
			`ALTER TABLE sales ADD COLUMN admit_per_minute BIGINT NOT NULL DEFAULT 0`,
			`ALTER TABLE sales ADD COLUMN admit_seconds INTEGER NOT NULL DEFAULT 0`,
		},
	},
	{
		// Version 8 journals fair queues (docs/internals.md, "Fair queue
		// journal"): one mark a queue (its epoch, seed commitment,
		// frontiers and open windows) and its entrants, so that a rebuild
		// of the sale restores the queue.
		version: 8,
		both: []string{
			`CREATE TABLE IF NOT EXISTS queue_marks (
				sale_id  TEXT PRIMARY KEY,
				epoch    TEXT NOT NULL,
				seed_sha TEXT NOT NULL,
				k        {int} NOT NULL DEFAULT 0,
				e        {int} NOT NULL DEFAULT 0,
				windows  TEXT NOT NULL DEFAULT ''
			)`,
			`CREATE TABLE IF NOT EXISTS queue_entrants (
				sale_id TEXT NOT NULL,
				user_id TEXT NOT NULL,
				entry   TEXT NOT NULL,
				PRIMARY KEY (sale_id, user_id)
			)`,
		},
	},
	{
		// Version 9 keeps payments at a provider (docs/api.md, "Payments"),
		// and a sale's currency ('' = the deployment's):
		// payments holds one payment per order (its PaymentIntent, the
		// intent's last known status, what flashgate made of a success:
		// outcome, and refunds and disputes), payment_events each webhook
		// event id once, so that a redelivered event changes nothing.
		version: 9,
		both: []string{
			`ALTER TABLE sales ADD COLUMN currency TEXT NOT NULL DEFAULT ''`,
			`CREATE TABLE IF NOT EXISTS payments (
				order_id     TEXT PRIMARY KEY,
				intent_id    TEXT NOT NULL UNIQUE,
				status       TEXT NOT NULL,
				outcome      TEXT NOT NULL DEFAULT '',
				amount_cents {int} NOT NULL,
				currency     TEXT NOT NULL,
				refund_id    TEXT NOT NULL DEFAULT '',
				refunded     {int} NOT NULL DEFAULT 0,
				disputed     {int} NOT NULL DEFAULT 0,
				created_at   {time} NOT NULL,
				updated_at   {time} NOT NULL
			)`,
			`CREATE INDEX IF NOT EXISTS payments_open ON payments (outcome, status)`,
			`CREATE TABLE IF NOT EXISTS payment_events (
				event_id    TEXT PRIMARY KEY,
				type        TEXT NOT NULL,
				intent_id   TEXT NOT NULL,
				order_id    TEXT NOT NULL DEFAULT '',
				received_at {time} NOT NULL
			)`,
		},
	},
	{
		// Version 10 stores the variants of a sale sold in several (a JSON
		// array of {id, name, total}; '' for a sale of one stock) and the
		// variant each order's units came from ('' for a sale of one stock).
		version: 10,
		both: []string{
			`ALTER TABLE sales ADD COLUMN variants TEXT NOT NULL DEFAULT ''`,
			`ALTER TABLE orders ADD COLUMN variant TEXT NOT NULL DEFAULT ''`,
		},
	},
	{
		// Version 11 keeps the bookkeeping of a sale sold in variants flat
		// too: variant_counts holds rows and units per (sale, variant,
		// status) of the rows that name a variant, kept by triggers in the
		// transaction of every row change as order_counts is, and filled
		// from the rows that exist under a lock that holds writers off.
		version:  11,
		postgres: variantCountsPostgres,
		sqlite:   variantCountsSQLite,
	},
	{
		// Version 12 makes a payment's steps owned and its reconciliation
		// scale (docs/internals.md, "Late payments"): retakes holds the
		// units each late payment took again in Redis, which the figures
		// count among the persisted units (Redis counts them as reserved);
		// a payment's next_check_at and checks are the reconciliation's
		// backoff (NULL: due now).
		version: 12,
		both: []string{
			`CREATE TABLE IF NOT EXISTS retakes (
				order_id   TEXT PRIMARY KEY,
				sale_id    TEXT NOT NULL,
				bucket     {int} NOT NULL DEFAULT 0,
				variant    TEXT NOT NULL DEFAULT '',
				quantity   {int} NOT NULL,
				created_at {time} NOT NULL
			)`,
			`CREATE INDEX IF NOT EXISTS retakes_sale ON retakes (sale_id)`,
			`ALTER TABLE payments ADD COLUMN next_check_at {time}`,
			`ALTER TABLE payments ADD COLUMN checks {int} NOT NULL DEFAULT 0`,
		},
	},
}

// The statuses whose rows hold units, and those whose units went back.
const (
	liveStatuses     = `('pending_payment', 'paid')`
	releasedStatuses = `('cancelled', 'expired', 'refunded')`
)

var bookkeepingTables = []string{
	`CREATE TABLE IF NOT EXISTS order_counts (
		sale_id TEXT NOT NULL,
		status  TEXT NOT NULL,
		orders  BIGINT NOT NULL DEFAULT 0,
		units   BIGINT NOT NULL DEFAULT 0,
		PRIMARY KEY (sale_id, status)
	)`,
	`CREATE TABLE IF NOT EXISTS release_queue (
		sale_id  TEXT NOT NULL,
		order_id TEXT NOT NULL,
		user_id  TEXT NOT NULL,
		quantity BIGINT NOT NULL,
		PRIMARY KEY (sale_id, order_id)
	)`,
	`CREATE TABLE IF NOT EXISTS release_sync (
		sale_id   TEXT PRIMARY KEY,
		delivered BIGINT NOT NULL DEFAULT 0
	)`,
	// Re-sync's rebuild pages through one status of a sale at a time.
	`CREATE INDEX IF NOT EXISTS orders_sale_status_id ON orders (sale_id, status, order_id)`,
	`DROP INDEX IF EXISTS orders_sale_status`,
}

// bookkeepingPostgres uses statement-level triggers with transition tables:
// one counter update per (sale, status) per statement, however many rows
// the statement wrote (a sink batch, an expiry batch).
var bookkeepingPostgres = append(append([]string{}, bookkeepingTables...),
	`LOCK TABLE orders IN SHARE ROW EXCLUSIVE MODE`,
	`CREATE OR REPLACE FUNCTION flashgate_count_orders() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		IF TG_OP = 'INSERT' THEN
			INSERT INTO order_counts AS c (sale_id, status, orders, units)
				SELECT sale_id, status, COUNT(*), SUM(quantity) FROM new_rows
				GROUP BY sale_id, status ORDER BY sale_id, status
				ON CONFLICT (sale_id, status) DO UPDATE
				SET orders = c.orders + EXCLUDED.orders, units = c.units + EXCLUDED.units;
			INSERT INTO release_queue (sale_id, order_id, user_id, quantity)
				SELECT sale_id, order_id, user_id, quantity FROM new_rows
				WHERE status IN `+releasedStatuses+`
				ON CONFLICT DO NOTHING;
		ELSIF TG_OP = 'UPDATE' THEN
			INSERT INTO order_counts AS c (sale_id, status, orders, units)
				SELECT sale_id, status, SUM(n), SUM(u) FROM (
					SELECT o.sale_id, o.status, -1 AS n, -o.quantity AS u
						FROM old_rows o JOIN new_rows w USING (order_id)
						WHERE (o.sale_id, o.status, o.quantity) IS DISTINCT FROM (w.sale_id, w.status, w.quantity)
					UNION ALL
					SELECT w.sale_id, w.status, 1, w.quantity
						FROM old_rows o JOIN new_rows w USING (order_id)
						WHERE (o.sale_id, o.status, o.quantity) IS DISTINCT FROM (w.sale_id, w.status, w.quantity)
				) d GROUP BY sale_id, status HAVING SUM(n) <> 0 OR SUM(u) <> 0 ORDER BY sale_id, status
				ON CONFLICT (sale_id, status) DO UPDATE
				SET orders = c.orders + EXCLUDED.orders, units = c.units + EXCLUDED.units;
			INSERT INTO release_queue (sale_id, order_id, user_id, quantity)
				SELECT w.sale_id, w.order_id, w.user_id, w.quantity
				FROM old_rows o JOIN new_rows w USING (order_id)
				WHERE w.status IN `+releasedStatuses+` AND o.status NOT IN `+releasedStatuses+`
				ON CONFLICT DO NOTHING;
		ELSE
			INSERT INTO order_counts AS c (sale_id, status, orders, units)
				SELECT sale_id, status, -COUNT(*), -SUM(quantity) FROM old_rows
				GROUP BY sale_id, status ORDER BY sale_id, status
				ON CONFLICT (sale_id, status) DO UPDATE
				SET orders = c.orders + EXCLUDED.orders, units = c.units + EXCLUDED.units;
		END IF;
		RETURN NULL;
	END $$`,
	`DROP TRIGGER IF EXISTS orders_count_insert ON orders`,
	`CREATE TRIGGER orders_count_insert AFTER INSERT ON orders
		REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION flashgate_count_orders()`,
	`DROP TRIGGER IF EXISTS orders_count_update ON orders`,
	`CREATE TRIGGER orders_count_update AFTER UPDATE ON orders
		REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION flashgate_count_orders()`,
	`DROP TRIGGER IF EXISTS orders_count_delete ON orders`,
	`CREATE TRIGGER orders_count_delete AFTER DELETE ON orders
		REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION flashgate_count_orders()`,
	`DELETE FROM order_counts`,
	`INSERT INTO order_counts (sale_id, status, orders, units)
		SELECT sale_id, status, COUNT(*), SUM(quantity) FROM orders GROUP BY sale_id, status`,
)

// bookkeepingSQLite uses row triggers (SQLite has no others); SQLite runs
// them in process, a few microseconds a row.
var bookkeepingSQLite = append(append([]string{}, bookkeepingTables...),
	`CREATE TRIGGER IF NOT EXISTS orders_count_insert AFTER INSERT ON orders BEGIN
		INSERT INTO order_counts (sale_id, status, orders, units) VALUES (NEW.sale_id, NEW.status, 1, NEW.quantity)
			ON CONFLICT (sale_id, status) DO UPDATE SET orders = orders + 1, units = units + excluded.units;
		INSERT OR IGNORE INTO release_queue (sale_id, order_id, user_id, quantity)
			SELECT NEW.sale_id, NEW.order_id, NEW.user_id, NEW.quantity WHERE NEW.status IN `+releasedStatuses+`;
	END`,
	`CREATE TRIGGER IF NOT EXISTS orders_count_update AFTER UPDATE OF sale_id, status, quantity ON orders
		WHEN OLD.sale_id IS NOT NEW.sale_id OR OLD.status IS NOT NEW.status OR OLD.quantity IS NOT NEW.quantity BEGIN
		UPDATE order_counts SET orders = orders - 1, units = units - OLD.quantity
			WHERE sale_id = OLD.sale_id AND status = OLD.status;
		INSERT INTO order_counts (sale_id, status, orders, units) VALUES (NEW.sale_id, NEW.status, 1, NEW.quantity)
			ON CONFLICT (sale_id, status) DO UPDATE SET orders = orders + 1, units = units + excluded.units;
		INSERT OR IGNORE INTO release_queue (sale_id, order_id, user_id, quantity)
			SELECT NEW.sale_id, NEW.order_id, NEW.user_id, NEW.quantity
			WHERE NEW.status IN `+releasedStatuses+` AND OLD.status NOT IN `+releasedStatuses+`;
	END`,
	`CREATE TRIGGER IF NOT EXISTS orders_count_delete AFTER DELETE ON orders BEGIN
		UPDATE order_counts SET orders = orders - 1, units = units - OLD.quantity
			WHERE sale_id = OLD.sale_id AND status = OLD.status;
	END`,
	`DELETE FROM order_counts`,
	`INSERT INTO order_counts (sale_id, status, orders, units)
		SELECT sale_id, status, COUNT(*), SUM(quantity) FROM orders WHERE true GROUP BY sale_id, status`,
)

const variantCountsTable = `CREATE TABLE IF NOT EXISTS variant_counts (
	sale_id TEXT NOT NULL,
	variant TEXT NOT NULL,
	status  TEXT NOT NULL,
	orders  BIGINT NOT NULL DEFAULT 0,
	units   BIGINT NOT NULL DEFAULT 0,
	PRIMARY KEY (sale_id, variant, status)
)`

// variantCountsPostgres counts with statement-level triggers, as
// bookkeepingPostgres does, only the rows that name a variant. Counter
// rows are written in (sale, status, variant) order, the order
// InsertOrders groups its statements in (compareInsertKey), so that two
// batches never lock them crosswise.
var variantCountsPostgres = []string{
	variantCountsTable,
	`LOCK TABLE orders IN SHARE ROW EXCLUSIVE MODE`,
	`CREATE OR REPLACE FUNCTION flashgate_count_variants() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		IF TG_OP = 'INSERT' THEN
			INSERT INTO variant_counts AS c (sale_id, variant, status, orders, units)
				SELECT sale_id, variant, status, COUNT(*), SUM(quantity) FROM new_rows WHERE variant <> ''
				GROUP BY sale_id, status, variant ORDER BY sale_id, status, variant
				ON CONFLICT (sale_id, variant, status) DO UPDATE
				SET orders = c.orders + EXCLUDED.orders, units = c.units + EXCLUDED.units;
		ELSIF TG_OP = 'UPDATE' THEN
			INSERT INTO variant_counts AS c (sale_id, variant, status, orders, units)
				SELECT sale_id, variant, status, SUM(n), SUM(u) FROM (
					SELECT o.sale_id, o.variant, o.status, -1 AS n, -o.quantity AS u
						FROM old_rows o JOIN new_rows w USING (order_id)
						WHERE o.variant <> '' AND (o.sale_id, o.variant, o.status, o.quantity) IS DISTINCT FROM (w.sale_id, w.variant, w.status, w.quantity)
					UNION ALL
					SELECT w.sale_id, w.variant, w.status, 1, w.quantity
						FROM old_rows o JOIN new_rows w USING (order_id)
						WHERE w.variant <> '' AND (o.sale_id, o.variant, o.status, o.quantity) IS DISTINCT FROM (w.sale_id, w.variant, w.status, w.quantity)
				) d GROUP BY sale_id, status, variant HAVING SUM(n) <> 0 OR SUM(u) <> 0 ORDER BY sale_id, status, variant
				ON CONFLICT (sale_id, variant, status) DO UPDATE
				SET orders = c.orders + EXCLUDED.orders, units = c.units + EXCLUDED.units;
		ELSE
			INSERT INTO variant_counts AS c (sale_id, variant, status, orders, units)
				SELECT sale_id, variant, status, -COUNT(*), -SUM(quantity) FROM old_rows WHERE variant <> ''
				GROUP BY sale_id, status, variant ORDER BY sale_id, status, variant
				ON CONFLICT (sale_id, variant, status) DO UPDATE
				SET orders = c.orders + EXCLUDED.orders, units = c.units + EXCLUDED.units;
		END IF;
		RETURN NULL;
	END $$`,
	`DROP TRIGGER IF EXISTS orders_variant_count_insert ON orders`,
	`CREATE TRIGGER orders_variant_count_insert AFTER INSERT ON orders
		REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION flashgate_count_variants()`,
	`DROP TRIGGER IF EXISTS orders_variant_count_update ON orders`,
	`CREATE TRIGGER orders_variant_count_update AFTER UPDATE ON orders
		REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION flashgate_count_variants()`,
	`DROP TRIGGER IF EXISTS orders_variant_count_delete ON orders`,
	`CREATE TRIGGER orders_variant_count_delete AFTER DELETE ON orders
		REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION flashgate_count_variants()`,
	`DELETE FROM variant_counts`,
	`INSERT INTO variant_counts (sale_id, variant, status, orders, units)
		SELECT sale_id, variant, status, COUNT(*), SUM(quantity) FROM orders WHERE variant <> '' GROUP BY sale_id, variant, status`,
}

// variantCountsSQLite counts with row triggers that run only for rows
// naming a variant (WHEN), so a sale of one stock pays for none.
var variantCountsSQLite = []string{
	variantCountsTable,
	`CREATE TRIGGER IF NOT EXISTS orders_variant_count_insert AFTER INSERT ON orders WHEN NEW.variant <> '' BEGIN
		INSERT INTO variant_counts (sale_id, variant, status, orders, units) VALUES (NEW.sale_id, NEW.variant, NEW.status, 1, NEW.quantity)
			ON CONFLICT (sale_id, variant, status) DO UPDATE SET orders = orders + 1, units = units + excluded.units;
	END`,
	`CREATE TRIGGER IF NOT EXISTS orders_variant_count_update AFTER UPDATE OF sale_id, variant, status, quantity ON orders
		WHEN (OLD.variant <> '' OR NEW.variant <> '') AND (OLD.sale_id IS NOT NEW.sale_id OR OLD.variant IS NOT NEW.variant
			OR OLD.status IS NOT NEW.status OR OLD.quantity IS NOT NEW.quantity) BEGIN
		UPDATE variant_counts SET orders = orders - 1, units = units - OLD.quantity
			WHERE sale_id = OLD.sale_id AND variant = OLD.variant AND status = OLD.status;
		INSERT INTO variant_counts (sale_id, variant, status, orders, units)
			SELECT NEW.sale_id, NEW.variant, NEW.status, 1, NEW.quantity WHERE NEW.variant <> ''
			ON CONFLICT (sale_id, variant, status) DO UPDATE SET orders = orders + 1, units = units + excluded.units;
	END`,
	`CREATE TRIGGER IF NOT EXISTS orders_variant_count_delete AFTER DELETE ON orders WHEN OLD.variant <> '' BEGIN
		UPDATE variant_counts SET orders = orders - 1, units = units - OLD.quantity
			WHERE sale_id = OLD.sale_id AND variant = OLD.variant AND status = OLD.status;
	END`,
	`DELETE FROM variant_counts`,
	`INSERT INTO variant_counts (sale_id, variant, status, orders, units)
		SELECT sale_id, variant, status, COUNT(*), SUM(quantity) FROM orders WHERE variant <> '' GROUP BY sale_id, variant, status`,
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
