package sqldb

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/flashgate/flashgate"
)

// unavailable returns err wrapped with flashgate.ErrUnavailable when
// isUnavailable(err), else err as it is (nil stays nil).
func unavailable(err error) error {
	if err == nil || !isUnavailable(err) {
		return err
	}
	return fmt.Errorf("%w (%w)", flashgate.ErrUnavailable, err)
}

// isUnavailable reports whether err is the database out of reach, not a
// failure of the statement: a connection that could not be made (refused,
// reset, a server starting up or shutting down, too many connections, a
// failed login) or that was lost (a PostgreSQL SQLSTATE of class 08,
// 57P01 admin_shutdown, 57P02 crash_shutdown, 57P03 cannot_connect_now,
// 53300 too_many_connections; driver.ErrBadConn, sql.ErrConnDone, pgx's
// conn closed; a network error; the server's end of the stream). By the drivers' error types and
// codes, never their text. The same statement may pass, unchanged, once the
// database is back; which orders it holds makes no difference. A cancelled
// context, a lock or serialisation failure, a syntax error and a refusal
// (isRefusal) are not.
func isUnavailable(err error) bool {
	if err == nil {
		return false
	}
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) {
		return true
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		c := pgErr.Code
		switch {
		case len(c) == 5 && c[:2] == "08",
			c == pgAdminShutdown, c == pgCrashShutdown, c == pgCannotConnectNow, c == pgTooManyConnections:
			return true
		}
		return false
	}
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) || errors.Is(err, pgconn.ErrConnClosed) {
		return true
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	var opErr *net.OpError
	return errors.As(err, &opErr)
}

// PostgreSQL's SQLSTATEs of a server that ends or refuses connections.
const (
	pgAdminShutdown      = "57P01" // terminating connection due to administrator command (fast shutdown, pg_terminate_backend)
	pgCrashShutdown      = "57P02" // terminating connection because another server process exited abnormally
	pgCannotConnectNow   = "57P03" // the database system is starting up (or shutting down)
	pgTooManyConnections = "53300"
)
