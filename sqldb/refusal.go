package sqldb

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/flashgate/flashgate"
)

// refusedError is an error of the database refusing the data itself, not
// failing: errors.Is(err, flashgate.ErrBadRequest) holds, so that the order
// sink moves the order to the dead-letter stream instead of retrying it
// forever. It unwraps to the driver's error.
type refusedError struct{ err error }

func (e *refusedError) Error() string { return e.err.Error() }
func (e *refusedError) Unwrap() error { return e.err }

// Is makes errors.Is(err, flashgate.ErrBadRequest) hold.
func (e *refusedError) Is(target error) bool { return target == flashgate.ErrBadRequest }

// refused returns err wrapped as a refusedError when isRefusal(err), else
// err as it is (nil stays nil).
func refused(err error) error {
	if err == nil || !isRefusal(err) {
		return err
	}
	return &refusedError{err}
}

// isRefusal reports whether err is the database refusing a value, by the
// drivers' error codes (never the text): on PostgreSQL the SQLSTATE classes
// 22 (data exception: a NUL byte or invalid UTF-8 in a text, 22021; a
// number out of range, 22003; …) and 23 (integrity constraint violation:
// a CHECK, NOT NULL, foreign key or unique constraint, or an exclusion),
// and 54000 (program_limit_exceeded: a value too large for an index row);
// on SQLite the primary codes SQLITE_CONSTRAINT (any constraint, and
// RAISE in a trigger), SQLITE_MISMATCH (a type error) and SQLITE_TOOBIG (a
// value over the length limit). The same statement with other values may
// succeed; retrying the same values never will. Everything else (a lost
// connection, a server shutting down, a lock or serialisation failure, a
// cancelled context, a syntax error) is not a refusal: it may pass.
func isRefusal(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		c := pgErr.Code
		return len(c) == 5 && (c[:2] == "22" || c[:2] == "23" || c == pgProgramLimitExceeded)
	}
	var liteErr *sqlite.Error
	if errors.As(err, &liteErr) {
		switch liteErr.Code() & 0xff {
		case sqlite3.SQLITE_CONSTRAINT, sqlite3.SQLITE_MISMATCH, sqlite3.SQLITE_TOOBIG:
			return true
		}
	}
	return false
}

// pgProgramLimitExceeded is PostgreSQL's SQLSTATE for a value beyond an
// implementation limit, such as an index row over about 2.7 kB.
const pgProgramLimitExceeded = "54000"
