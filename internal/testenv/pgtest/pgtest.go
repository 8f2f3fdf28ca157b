// Package pgtest gives each test its own fresh PostgreSQL database on the
// throwaway cluster that `make test` starts (FLASHGATE_TEST_POSTGRES holds a
// URL of its maintenance database).
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvVar names the variable with the maintenance database URL.
const EnvVar = "FLASHGATE_TEST_POSTGRES"

// New creates an empty database for tb, drops it in tb.Cleanup, and returns
// its postgres:// URL. Without a cluster it skips the test, or fails it when
// FLASHGATE_TEST_REQUIRE=1.
func New(tb testing.TB) string {
	tb.Helper()
	base := os.Getenv(EnvVar)
	if base == "" {
		if os.Getenv("FLASHGATE_TEST_REQUIRE") == "1" {
			tb.Fatalf("pgtest: %s is not set (run the tests with `make test`)", EnvVar)
		}
		tb.Skipf("pgtest: %s is not set", EnvVar)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		tb.Fatalf("pgtest: connecting: %v", err)
	}
	defer conn.Close(context.Background())
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "fgtest_" + hex.EncodeToString(b)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		tb.Fatalf("pgtest: creating database: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, base)
		if err != nil {
			return
		}
		defer c.Close(context.Background())
		_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	u, err := url.Parse(base)
	if err != nil {
		tb.Fatalf("pgtest: %s: %v", EnvVar, err)
	}
	u.Path = "/" + name
	return u.String()
}
