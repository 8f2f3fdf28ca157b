package sqldb

import (
	"strings"
	"testing"
)

// TestMigrationStatements checks that every shared statement is rendered in
// each dialect's types, with no placeholder left.
func TestMigrationStatements(t *testing.T) {
	for _, dialect := range []string{DialectPostgres, DialectSQLite} {
		for _, m := range migrations {
			for _, q := range m.statements(dialect) {
				if strings.Contains(q, "{int}") || strings.Contains(q, "{time}") || strings.Contains(q, "{real}") {
					t.Errorf("%s v%d: placeholder left in %q", dialect, m.version, q)
				}
			}
		}
	}
	v1 := strings.Join(migrations[0].statements(DialectPostgres), "\n")
	for _, want := range []string{"starts_at   TIMESTAMPTZ,", "admit_ratio DOUBLE PRECISION NOT NULL", "total       BIGINT NOT NULL"} {
		if !strings.Contains(v1, want) {
			t.Errorf("postgres v1 lacks %q", want)
		}
	}
	v1 = strings.Join(migrations[0].statements(DialectSQLite), "\n")
	for _, want := range []string{"starts_at   INTEGER,", "admit_ratio REAL NOT NULL", "created_at  INTEGER NOT NULL"} {
		if !strings.Contains(v1, want) {
			t.Errorf("sqlite v1 lacks %q", want)
		}
	}
}
