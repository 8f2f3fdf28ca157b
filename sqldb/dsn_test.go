package sqldb

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckURL(t *testing.T) {
	tests := []struct {
		dsn  string
		want string // "" = accepted, else a substring of the error
	}{
		{"postgres://u:secret@127.0.0.1:5432/db?sslmode=disable", ""},
		{"postgresql://127.0.0.1/db", ""},
		{"sqlite://flashgate.db", ""},
		{"sqlite:///var/lib/flashgate/orders.db", ""},
		{"sqlite3://orders.db", ""},
		{"SQLITE://orders.db", ""},
		{"sqlite://:memory:", ""},
		{"sqlite://", "no path"},
		{"sqlite://?mode=ro", "no path"},
		{"mysql://x", "want postgres://… or sqlite://PATH"},
		{"flashgate.db", "malformed URL"},
		{"postgres://u:secret@%zz/db", "malformed URL"},
	}
	for _, tt := range tests {
		err := CheckURL(tt.dsn)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("CheckURL(%q) = %v, want nil", tt.dsn, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("CheckURL(%q) = %v, want an error containing %q", tt.dsn, err, tt.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("CheckURL(%q) leaks the password: %v", tt.dsn, err)
		}
	}
}

// TestOpenAgreesWithCheckURL opens the SQLite forms CheckURL accepts: a URL
// the command line lets through must be one Open takes.
func TestOpenAgreesWithCheckURL(t *testing.T) {
	dir := t.TempDir()
	for _, dsn := range []string{
		"sqlite://" + filepath.Join(dir, "a.db"),
		"sqlite3://" + filepath.Join(dir, "b.db"),
		"SQLITE://" + filepath.Join(dir, "c.db"),
		"sqlite://:memory:",
	} {
		if err := CheckURL(dsn); err != nil {
			t.Fatalf("CheckURL(%q) = %v", dsn, err)
		}
		d, err := Open(context.Background(), dsn)
		if err != nil {
			t.Errorf("Open(%q) = %v, want it open (CheckURL accepted it)", dsn, err)
			continue
		}
		d.Close()
	}
}
