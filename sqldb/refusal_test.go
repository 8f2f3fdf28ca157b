package sqldb

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/dbfault"
)

// TestIsRefusal checks isRefusal against the errors the real drivers
// return: a value the database refuses (a NUL byte, invalid UTF-8, a
// number out of range, a text where a number goes, a CHECK, NOT NULL or
// unique constraint, a value over SQLite's length limit) is a refusal; a
// syntax error, a closed database, a cancelled context and an error that
// only says so in its text are not.
func TestIsRefusal(t *testing.T) {
	each(t, func(t *testing.T, dsn string, db *DB) {
		ctx := context.Background()
		if _, err := db.w.ExecContext(ctx, `CREATE TABLE probe (id INTEGER PRIMARY KEY, n INTEGER NOT NULL CHECK (n > 0), s TEXT)`); err != nil {
			t.Fatal(err)
		}
		ins := func(args ...any) error {
			_, err := db.w.ExecContext(ctx, db.q(`INSERT INTO probe (id, n, s) VALUES (?, ?, ?)`), args...)
			return err
		}
		if err := ins(1, 1, "one"); err != nil {
			t.Fatalf("first insert: %v", err)
		}
		closed := open(t, dsn)
		_ = closed.Close()
		_, closedErr := closed.InsertOrders(ctx, []flashgate.Order{order("o1", "s", "u", 1, t0)})
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, cancelled := db.w.ExecContext(cctx, db.q(`INSERT INTO probe (id, n, s) VALUES (?, ?, ?)`), 9, 1, "x")
		_, syntax := db.w.ExecContext(ctx, `INSERT INTO probe VALUES (`)
		tests := []struct {
			name string
			err  error
			want bool
		}{
			{"check", ins(2, 0, "x"), true},
			{"not null", ins(3, nil, "x"), true},
			{"unique", ins(1, 1, "x"), true},
			{"text for a number", ins("abc", 1, "x"), true},
			{"wrapped", fmt.Errorf("inserting: %w", ins(2, 0, "x")), true},
			{"syntax", syntax, false},
			{"closed", closedErr, false},
			{"cancelled", cancelled, false},
			{"nil", nil, false},
			{"text only (postgres)", errors.New("ERROR: invalid byte sequence (SQLSTATE 22021)"), false},
			{"text only (sqlite)", errors.New("constraint failed: CHECK constraint failed: n > 0 (275)"), false},
		}
		if db.Dialect() == DialectPostgres {
			tests = append(tests, []struct {
				name string
				err  error
				want bool
			}{
				{"nul byte", ins(4, 1, "a\x00b"), true},
				{"invalid utf-8", ins(5, 1, "a\xffb"), true},
				{"out of range", ins("1099511627776", 1, "x"), true}, // parsed by the server: 22003
			}...)
		} else {
			conn, err := db.w.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := sqlite.Limit(conn, sqlite3.SQLITE_LIMIT_LENGTH, 1000); err != nil {
				t.Fatal(err)
			}
			_, tooBig := conn.ExecContext(ctx, `INSERT INTO probe (id, n, s) VALUES (?, ?, ?)`, 6, 1, strings.Repeat("x", 2000))
			_, _ = sqlite.Limit(conn, sqlite3.SQLITE_LIMIT_LENGTH, 1_000_000_000)
			conn.Close()
			tests = append(tests, struct {
				name string
				err  error
				want bool
			}{"too big", tooBig, true})
		}
		for _, tc := range tests {
			if tc.name != "nil" && tc.err == nil {
				t.Fatalf("%s: the statement succeeded, want an error", tc.name)
			}
			if got := isRefusal(tc.err); got != tc.want {
				t.Errorf("%s: isRefusal(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
			}
		}
	})
}

// TestInsertOrdersRefused: a batch of orders of two sales of which the
// database refuses one fails whole with flashgate.ErrBadRequest, wrapping
// the driver's error, and stores nothing; alone, the ordinary orders are
// stored and the refused one is ErrBadRequest again. Delivering the stored
// orders again, or a second live order of a user, is no refusal (nothing is
// inserted, no error), and neither is an insert the database fails
// (dbfault.Hold, a closed database).
func TestInsertOrdersRefused(t *testing.T) {
	each(t, func(t *testing.T, dsn string, db *DB) {
		ctx := context.Background()
		dbfault.Refuse(t, dsn, "refused-")
		release := dbfault.Hold(t, dsn, "held-")
		good := []flashgate.Order{
			order("a1", "sa", "alice", 1, t0), order("a2", "sa", "jürgen@bücher.example", 1, t0),
			order("b1", "sb", "auth0|64f1", 1, t0),
		}
		poison := []flashgate.Order{order("p1", "sa", "refused-1", 1, t0)}
		if db.Dialect() == DialectPostgres {
			poison = append(poison, order("p2", "sa", "nul\x00user", 1, t0), order("p3", "sb", "bad\xffutf8", 1, t0))
		}
		for _, p := range poison {
			batch := append(append([]flashgate.Order{}, good[:2]...), p, good[2])
			n, err := db.InsertOrders(ctx, batch)
			if !errors.Is(err, flashgate.ErrBadRequest) || n != 0 {
				t.Fatalf("batch with %q: got %d, %v, want 0 and ErrBadRequest", p.UserID, n, err)
			}
			if db.Dialect() == DialectPostgres && !errors.As(err, new(*pgconn.PgError)) {
				t.Errorf("batch with %q: got %T %v, want the driver's error inside", p.UserID, err, err)
			}
			if _, err := db.InsertOrders(ctx, []flashgate.Order{p}); !errors.Is(err, flashgate.ErrBadRequest) {
				t.Errorf("%q alone: got %v, want ErrBadRequest", p.UserID, err)
			}
		}
		for _, s := range []string{"sa", "sb"} {
			if f, _ := db.Figures(ctx, s); f.Persisted != 0 {
				t.Errorf("sale %s: got %d rows after refused batches, want 0", s, f.Persisted)
			}
		}
		if n, err := db.InsertOrders(ctx, good); err != nil || n != 3 {
			t.Fatalf("the ordinary orders: got %d, %v, want 3", n, err)
		}
		again := append(append([]flashgate.Order{}, good...), order("a3", "sa", "alice", 1, t0))
		if n, err := db.InsertOrders(ctx, again); err != nil || n != 0 {
			t.Errorf("delivered again, and a second live order of alice: got %d, %v, want 0, nil", n, err)
		}
		held := order("h1", "sb", "held-1", 1, t0)
		if _, err := db.InsertOrders(ctx, []flashgate.Order{order("b2", "sb", "bob", 1, t0), held}); err == nil || errors.Is(err, flashgate.ErrBadRequest) {
			t.Errorf("a held insert: got %v, want an error that is not ErrBadRequest", err)
		}
		release()
		if n, err := db.InsertOrders(ctx, []flashgate.Order{order("b2", "sb", "bob", 1, t0), held}); err != nil || n != 2 {
			t.Errorf("after the release: got %d, %v, want 2, nil", n, err)
		}
		closed := open(t, dsn)
		_ = closed.Close()
		if _, err := closed.InsertOrders(ctx, good); err == nil || errors.Is(err, flashgate.ErrBadRequest) {
			t.Errorf("a closed database: got %v, want an error that is not ErrBadRequest", err)
		}
	})
}
