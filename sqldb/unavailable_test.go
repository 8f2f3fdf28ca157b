package sqldb

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/dbfault"
	"github.com/flashgate/flashgate/internal/testenv/pgtest"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
)

// TestIsUnavailable checks isUnavailable against the errors of a database
// out of reach (issue 35: the order sink must not split a batch for them)
// and of one that answers.
func TestIsUnavailable(t *testing.T) {
	pg := func(code string) error {
		return fmt.Errorf("inserting orders: %w", &pgconn.PgError{Severity: "FATAL", Code: code})
	}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"admin shutdown (fast shutdown, pg_terminate_backend)", pg("57P01"), true},
		{"crash shutdown", pg("57P02"), true},
		{"starting up", pg("57P03"), true},
		{"too many connections", pg("53300"), true},
		{"connection failure", pg("08006"), true},
		{"connection does not exist", pg("08003"), true},
		{"bad connection", fmt.Errorf("begin: %w", driver.ErrBadConn), true},
		{"connection done", sql.ErrConnDone, true},
		{"connection closed by the driver", fmt.Errorf("inserting orders: %w", pgconn.ErrConnClosed), true},
		{"refused", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, true},
		{"reset", fmt.Errorf("read: %w", syscall.ECONNRESET), true},
		{"server closed the stream", fmt.Errorf("receive message: %w", io.ErrUnexpectedEOF), true},
		{"unique violation", pg("23505"), false},
		{"serialization failure", pg("40001"), false},
		{"query cancelled", pg("57014"), false},
		{"syntax", pg("42601"), false},
		{"cancelled", fmt.Errorf("inserting orders: %w", context.Canceled), false},
		{"deadline", context.DeadlineExceeded, false},
		{"text only", errors.New("FATAL: the database system is starting up (SQLSTATE 57P03)"), false},
		{"nil", nil, false},
	}
	for _, tt := range tests {
		if got := isUnavailable(tt.err); got != tt.want {
			t.Errorf("%s: isUnavailable(%v) = %v, want %v", tt.name, tt.err, got, tt.want)
		}
	}
}

// TestInsertOrdersUnavailable has InsertOrders meet a real PostgreSQL out
// of reach: a port nobody listens on (the driver's connect error), and a
// database whose connections are cut (the pool's connection lost, then
// the new one refused). Each is flashgate.ErrUnavailable, not
// ErrBadRequest.
func TestInsertOrdersUnavailable(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.New(t)
	o := []flashgate.Order{order("o1", "s", "u1", 1, t0)}
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, flashgate.ErrUnavailable) || errors.Is(err, flashgate.ErrBadRequest) {
			t.Errorf("%s: InsertOrders: got %v, want an error wrapping flashgate.ErrUnavailable (and not ErrBadRequest)", what, err)
		}
	}

	// Nobody listening: the address of a listener closed again.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := ln.Addr().String()
	_ = ln.Close()
	raw, err := sql.Open("pgx", withHost(t, dsn, closedAddr)+"&connect_timeout=5")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = raw.Close() })
	check("nobody listening", func() error {
		_, err := (&DB{dialect: DialectPostgres, w: raw, r: raw}).InsertOrders(ctx, o)
		return err
	}())

	// Connections cut: the database reached through a proxy, which is
	// then closed (its connections too, and its port refuses).
	proxy := redistest.StartProxy(t, pgAddr(t, dsn))
	db := open(t, withHost(t, dsn, proxy.Addr))
	if _, err := db.InsertOrders(ctx, o); err != nil {
		t.Fatalf("InsertOrders through the proxy: %v", err)
	}
	proxy.Close()
	_, err = db.InsertOrders(ctx, []flashgate.Order{order("o2", "s", "u2", 1, t0)})
	check("connections cut", err)
}

// withHost returns dsn with its host:port replaced by addr.
func withHost(t *testing.T, dsn, addr string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = addr
	if u.RawQuery == "" {
		u.RawQuery = "sslmode=disable"
	}
	return u.String()
}

// pgAddr returns the host:port of dsn.
func pgAddr(t *testing.T, dsn string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// TestInsertOrdersConnectionLostByARecord (review of issue 35): an order
// whose insert makes PostgreSQL end the connection (a trigger terminates
// its backend: FATAL 57P01, as a record that crashes the server process
// would) while the database stays up. The connection was lost while the
// batch was in flight, so the batch may be the cause: InsertOrders must
// not call that the database out of reach (flashgate.ErrUnavailable, which
// the order sink never splits a batch for), or that one record stalls its
// sale forever. An ordinary order is stored right after.
func TestInsertOrdersConnectionLostByARecord(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.New(t)
	db := open(t, dsn)
	dbfault.Disconnect(t, dsn, "crash-")
	_, err := db.InsertOrders(ctx, []flashgate.Order{order("o1", "s", "u1", 1, t0), order("o2", "s", "crash-1", 1, t0)})
	if err == nil {
		t.Fatal("InsertOrders with an order that ends the connection: got nil error")
	}
	if errors.Is(err, flashgate.ErrUnavailable) {
		t.Errorf("InsertOrders with an order that ends the connection: got %v, want an error that is not flashgate.ErrUnavailable (the database is up)", err)
	}
	if _, err := db.InsertOrders(ctx, []flashgate.Order{order("o3", "s", "u3", 1, t0)}); err != nil {
		t.Errorf("InsertOrders of an ordinary order after it: %v", err)
	}
}
