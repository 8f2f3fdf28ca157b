// Package dbfault puts real faults into a real test database (PostgreSQL or
// SQLite, by a flashgate database URL): a rule that refuses some orders, as
// a database refuses a value, and a trigger that fails some inserts with an
// error that is not a refusal until it is released.
package dbfault

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver
	"modernc.org/sqlite"               // the "sqlite" driver
)

// exec runs statements on the database at dsn (postgres://… or
// sqlite://PATH), each on its own; sqlite runs the second of each pair.
func exec(tb testing.TB, dsn string, pg, lite []string) {
	tb.Helper()
	driver, name, stmts := "pgx", dsn, pg
	if path, ok := strings.CutPrefix(dsn, "sqlite://"); ok {
		driver, name, stmts = "sqlite", strings.SplitN(path, "?", 2)[0]+"?_busy_timeout=10000", lite
	}
	db, err := sql.Open(driver, name)
	if err != nil {
		tb.Fatalf("dbfault: %v", err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, s := range stmts {
		if _, err := db.ExecContext(ctx, s); err != nil {
			tb.Fatalf("dbfault: %s: %v", s, err)
		}
	}
}

// Refuse makes the database refuse every order whose user id starts with
// prefix (letters, digits and '-' only): a CHECK constraint on PostgreSQL
// (SQLSTATE 23514), a trigger's RAISE(ABORT) on SQLite
// (SQLITE_CONSTRAINT_TRIGGER).
func Refuse(tb testing.TB, dsn, prefix string) {
	tb.Helper()
	exec(tb, dsn,
		[]string{`ALTER TABLE orders ADD CONSTRAINT dbfault_refuse CHECK (user_id NOT LIKE '` + prefix + `%')`},
		[]string{`CREATE TRIGGER dbfault_refuse BEFORE INSERT ON orders WHEN NEW.user_id LIKE '` + prefix + `%'
			BEGIN SELECT RAISE(ABORT, 'dbfault: refused'); END`})
}

// Hold makes every insert of an order whose user id starts with prefix
// fail with an error that is not a refusal, as a lock timeout or a failing
// server would, until the returned release is called: on PostgreSQL a
// trigger raises SQLSTATE 55P03 (lock_not_available), on SQLite a trigger
// calls dbfault_fail, a function that fails (SQLITE_ERROR).
func Hold(tb testing.TB, dsn, prefix string) (release func()) {
	tb.Helper()
	exec(tb, dsn,
		[]string{`CREATE TABLE dbfault_released (x INTEGER)`,
			`CREATE FUNCTION dbfault_hold() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN
				IF NEW.user_id LIKE '` + prefix + `%' AND NOT EXISTS (SELECT 1 FROM dbfault_released) THEN
					RAISE EXCEPTION 'dbfault: held' USING ERRCODE = 'lock_not_available';
				END IF;
				RETURN NEW;
			END $$`,
			`CREATE TRIGGER dbfault_hold BEFORE INSERT ON orders FOR EACH ROW EXECUTE FUNCTION dbfault_hold()`},
		[]string{`CREATE TABLE dbfault_released (x INTEGER)`,
			`CREATE TRIGGER dbfault_hold BEFORE INSERT ON orders
			WHEN NEW.user_id LIKE '` + prefix + `%' AND NOT EXISTS (SELECT 1 FROM dbfault_released)
			BEGIN SELECT dbfault_fail(); END`})
	return func() {
		tb.Helper()
		release := []string{`INSERT INTO dbfault_released (x) VALUES (1)`}
		exec(tb, dsn, release, release)
	}
}

// dbfault_fail is registered with the sqlite driver for every connection
// opened after this package's init: it always fails.
func init() {
	sqlite.MustRegisterScalarFunction("dbfault_fail", 0, func(*sqlite.FunctionContext, []driver.Value) (driver.Value, error) {
		return nil, errors.New("dbfault: held")
	})
}

// Disconnect makes PostgreSQL end the connection of every insert of an
// order whose user id starts with prefix (letters, digits and '-' only): a
// trigger terminates its own backend (FATAL, SQLSTATE 57P01
// admin_shutdown, the connection closed), as a record that crashes the
// server process or an extension would. The database stays up and answers
// every other insert. On SQLite, which has no connection to lose, it does
// nothing and reports false.
func Disconnect(tb testing.TB, dsn, prefix string) bool {
	tb.Helper()
	if strings.HasPrefix(dsn, "sqlite://") {
		return false
	}
	exec(tb, dsn,
		[]string{`CREATE FUNCTION dbfault_disconnect() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN
				IF NEW.user_id LIKE '` + prefix + `%' THEN
					PERFORM pg_terminate_backend(pg_backend_pid());
					PERFORM pg_sleep(5);
				END IF;
				RETURN NEW;
			END $$`,
			`CREATE TRIGGER dbfault_disconnect BEFORE INSERT ON orders FOR EACH ROW EXECUTE FUNCTION dbfault_disconnect()`},
		nil)
	return true
}
