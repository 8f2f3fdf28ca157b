package sqldb

import (
	"fmt"
	"net/url"
	"strings"
)

// CheckURL reports whether Open would accept dsn's form, without opening
// anything: postgres://… or postgresql://… that parses as a URL, or
// sqlite://PATH (also sqlite3://) with a non-empty PATH. Open and the command
// line share it, so a URL the flags accept is one Open takes.
func CheckURL(dsn string) error {
	_, err := dialectOf(dsn)
	return err
}

// dialectOf returns the dialect dsn names, or why dsn is not a database URL.
func dialectOf(dsn string) (string, error) {
	scheme, rest, ok := strings.Cut(dsn, "://")
	if !ok {
		return "", fmt.Errorf("db: malformed URL %q (want postgres://… or sqlite://PATH)", redact(dsn))
	}
	switch strings.ToLower(scheme) {
	case "postgres", "postgresql":
		if _, err := url.Parse(dsn); err != nil {
			return "", fmt.Errorf("db: malformed URL %q (want postgres://… or sqlite://PATH)", redact(dsn))
		}
		return DialectPostgres, nil
	case "sqlite", "sqlite3":
		if path, _, _ := strings.Cut(rest, "?"); path == "" {
			return "", fmt.Errorf("db: sqlite URL has no path (want sqlite://PATH)")
		}
		return DialectSQLite, nil
	}
	return "", fmt.Errorf("db: unsupported URL scheme %q (want postgres://… or sqlite://PATH)", scheme)
}
