// Package sqldb is flashgate's system of record: sales and orders in
// PostgreSQL (pgx) or SQLite (modernc, pure Go), behind one database/sql API.
// Schema migrations run when a database is opened.
package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
	"modernc.org/sqlite"               // registers the "sqlite" driver
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/flashgate/flashgate"
)

// The dialects Dialect reports.
const (
	DialectPostgres = "postgres"
	DialectSQLite   = "sqlite"
)

// DB is an open flashgate database. It is safe for concurrent use.
type DB struct {
	dialect string
	// w runs every write. On SQLite it holds one connection, so writers are
	// serialised in process and never fail with SQLITE_BUSY against each
	// other; on PostgreSQL it is the same pool as r.
	w *sql.DB
	// r runs reads. On SQLite it is a pool of read-only connections that, in
	// WAL mode, read while a write transaction is open.
	r *sql.DB

	// stmtMu guards insertStmts: on SQLite, the INSERTs of 1, 2, 4, …,
	// insertRows orders, prepared on w (see prepareInserts).
	stmtMu      sync.Mutex
	insertStmts [insertStmtSizes]*sql.Stmt
}

// insertStmtSizes is how many INSERT sizes there are: 1, 2, 4, …, insertRows.
const insertStmtSizes = 9

// Open opens the database named by dsn and brings its schema up to date.
// dsn is postgres://… (or postgresql://…), or sqlite://PATH with PATH relative
// (sqlite://flashgate.db) or absolute (sqlite:///var/lib/flashgate/orders.db);
// sqlite://:memory: gives a private in-memory database.
func Open(ctx context.Context, dsn string) (*DB, error) {
	dialect, err := dialectOf(dsn)
	if err != nil {
		return nil, err
	}
	var d *DB
	switch dialect {
	case DialectPostgres:
		d, err = openPostgres(ctx, dsn)
	default:
		_, rest, _ := strings.Cut(dsn, "://")
		d, err = openSQLite(ctx, rest)
	}
	if err != nil {
		return nil, err
	}
	if err := d.migrate(ctx); err != nil {
		_ = d.Close()
		return nil, fmt.Errorf("db: migrating schema: %w", err)
	}
	return d, nil
}

func openPostgres(ctx context.Context, dsn string) (*DB, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, fmt.Errorf("db: postgres URL: %w", err)
	}
	db.SetMaxOpenConns(32)
	db.SetMaxIdleConns(32)
	db.SetConnMaxIdleTime(5 * time.Minute)
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("db: connecting to postgres: %w", err)
	}
	return &DB{dialect: DialectPostgres, w: db, r: db}, nil
}

// writerPragmas tune SQLite's writer connection for the order sink's
// batches. temp_store(memory) keeps the statement journal in memory: every
// multi-row INSERT … ON CONFLICT inside a transaction saves the pages it
// changes there, and in a temporary file that was a write(2) a page. A
// page cache of 16 MiB (the default is 2 MiB) holds the hot pages of the
// orders indexes, whose (sale, user) and order id keys land all over
// them, across batches.
const writerPragmas = "&_pragma=temp_store(memory)&_pragma=cache_size(-16384)&_pragma=wal_autocheckpoint(10000)"

func openSQLite(ctx context.Context, rest string) (*DB, error) {
	path, _, _ := strings.Cut(rest, "?")
	if path == "" {
		return nil, fmt.Errorf("db: sqlite URL has no path (want sqlite://PATH)")
	}
	const common = "_busy_timeout=10000&_foreign_keys=1&_txlock=immediate"
	if path == ":memory:" {
		// Every connection to :memory: is its own database: one connection
		// serves reads and writes.
		db, err := sql.Open("sqlite", ":memory:?"+common+writerPragmas)
		if err != nil {
			return nil, fmt.Errorf("db: sqlite: %w", err)
		}
		db.SetMaxOpenConns(1)
		db.SetConnMaxIdleTime(0)
		db.SetConnMaxLifetime(0)
		if err := db.PingContext(ctx); err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("db: opening sqlite: %w", err)
		}
		return &DB{dialect: DialectSQLite, w: db, r: db}, nil
	}
	w, err := sql.Open("sqlite", path+"?"+common+"&_journal_mode=WAL&_synchronous=NORMAL"+writerPragmas)
	if err != nil {
		return nil, fmt.Errorf("db: sqlite: %w", err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxIdleTime(0)
	w.SetConnMaxLifetime(0)
	if err := pingSQLite(ctx, w); err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("db: opening sqlite %s: %w", path, err)
	}
	r, err := sql.Open("sqlite", path+"?"+common+"&_query_only=1")
	if err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("db: sqlite: %w", err)
	}
	r.SetMaxOpenConns(8)
	r.SetMaxIdleConns(8)
	return &DB{dialect: DialectSQLite, w: w, r: r}, nil
}

// pingSQLite opens the writer's connection. Switching a new file to WAL
// while another process opens it too can fail with SQLITE_BUSY at once,
// without waiting for busy_timeout (TestConcurrentFirstOpen saw it about
// once in 30 runs): such a failure is retried, for up to two seconds.
func pingSQLite(ctx context.Context, w *sql.DB) error {
	for i := 0; ; i++ {
		err := w.PingContext(ctx)
		var liteErr *sqlite.Error
		if err == nil || i == 100 || !errors.As(err, &liteErr) || liteErr.Code()&0xff != sqlite3.SQLITE_BUSY {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// redact drops a password from a URL-ish string before it reaches an error.
func redact(s string) string {
	if at := strings.LastIndexByte(s, '@'); at >= 0 {
		return "…" + s[at:]
	}
	return s
}

// Close closes the database.
func (d *DB) Close() error {
	// The statements stay in place, closed: an insert racing Close fails
	// with an error, as on a closed database.
	d.stmtMu.Lock()
	for _, s := range d.insertStmts {
		if s != nil {
			_ = s.Close()
		}
	}
	d.stmtMu.Unlock()
	err := d.w.Close()
	if d.r != d.w {
		if rerr := d.r.Close(); err == nil {
			err = rerr
		}
	}
	return err
}

// Ping checks that the database answers.
func (d *DB) Ping(ctx context.Context) error {
	if err := d.w.PingContext(ctx); err != nil {
		return fmt.Errorf("db: ping: %w", err)
	}
	if d.r != d.w {
		if err := d.r.PingContext(ctx); err != nil {
			return fmt.Errorf("db: ping: %w", err)
		}
	}
	return nil
}

// Dialect returns "postgres" or "sqlite".
func (d *DB) Dialect() string { return d.dialect }

// q rewrites ? placeholders into $1, $2, … for PostgreSQL. Queries here
// never hold a literal '?'.
func (d *DB) q(query string) string {
	if d.dialect != DialectPostgres {
		return query
	}
	var b strings.Builder
	b.Grow(len(query) + 16)
	n := 0
	for i := 0; i < len(query); i++ {
		if query[i] == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(query[i])
	}
	return b.String()
}

// ts turns t into the stored form: a UTC time.Time (timestamptz) on
// PostgreSQL, integer unix microseconds on SQLite, so that ordering and
// comparison work in SQL on both.
func (d *DB) ts(t time.Time) any {
	t = t.UTC().Truncate(time.Microsecond)
	if d.dialect == DialectSQLite {
		return t.UnixMicro()
	}
	return t
}

func (d *DB) tsPtr(t *time.Time) any {
	if t == nil {
		return nil
	}
	return d.ts(*t)
}

// stamp scans a stored timestamp of either dialect; NULL leaves Valid false.
type stamp struct {
	T     time.Time
	Valid bool
}

// Scan implements sql.Scanner.
func (s *stamp) Scan(v any) error {
	switch x := v.(type) {
	case nil:
		s.T, s.Valid = time.Time{}, false
	case time.Time:
		s.T, s.Valid = x.UTC(), true
	case int64:
		s.T, s.Valid = time.UnixMicro(x).UTC(), true
	default:
		return fmt.Errorf("db: cannot scan %T into a timestamp", v)
	}
	return nil
}

func (s stamp) ptr() *time.Time {
	if !s.Valid {
		return nil
	}
	t := s.T
	return &t
}

var _ sql.Scanner = (*stamp)(nil)

// isUnique reports whether err is a unique-constraint violation, by the
// drivers' error codes: PostgreSQL's SQLSTATE 23505 (unique_violation) and
// SQLite's extended codes SQLITE_CONSTRAINT_UNIQUE and
// SQLITE_CONSTRAINT_PRIMARYKEY. The error text is never looked at.
func isUnique(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code == pgUniqueViolation
	}
	var liteErr *sqlite.Error
	if errors.As(err, &liteErr) {
		c := liteErr.Code()
		return c == sqlite3.SQLITE_CONSTRAINT_UNIQUE || c == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
	}
	return false
}

// pgUniqueViolation is PostgreSQL's SQLSTATE for a unique-constraint
// violation.
const pgUniqueViolation = "23505"

var errNoRows = sql.ErrNoRows

func notFound(err error, what string) error {
	if errors.Is(err, errNoRows) {
		return fmt.Errorf("%s: %w", what, flashgate.ErrNotFound)
	}
	return fmt.Errorf("%s: %w", what, err)
}
