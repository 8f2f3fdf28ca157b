package sqldb

// The statements of the schema versions that keep the bookkeeping flat:
// order_counts and the release queue (version 2, bookkeepingPostgres and
// bookkeepingSQLite) and variant_counts (version 11). migrate.go lists the
// versions; these are only their bodies, and like every applied migration
// they are never edited (TestMigrationsUnchanged).

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
