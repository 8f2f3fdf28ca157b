package sqldb

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// TestIsUnique checks isUnique against the errors the real drivers return:
// a duplicate primary key and a duplicate live order (the partial unique
// index) are unique violations, a NOT NULL violation is not, and neither is
// an error that only says so in its text.
func TestIsUnique(t *testing.T) {
	each(t, func(t *testing.T, _ string, db *DB) {
		ctx := context.Background()
		insertSale := `INSERT INTO sales (id, name, price_cents, total, state, admit_ratio, per_user)
			VALUES (?, 'x', 1, 10, 'open', 1.5, 1)`
		if _, err := db.w.ExecContext(ctx, db.q(insertSale), "u1"); err != nil {
			t.Fatalf("first insert: %v", err)
		}
		_, dupKey := db.w.ExecContext(ctx, db.q(insertSale), "u1")
		insertOrder := `INSERT INTO orders (order_id, sale_id, user_id, quantity, price_cents, status, created_at, updated_at)
			VALUES (?, 'u1', 'alice', 1, 1, 'paid', ?, ?)`
		if _, err := db.w.ExecContext(ctx, db.q(insertOrder), "o1", db.ts(t0), db.ts(t0)); err != nil {
			t.Fatalf("first order: %v", err)
		}
		_, dupLive := db.w.ExecContext(ctx, db.q(insertOrder), "o2", db.ts(t0), db.ts(t0))
		_, notNull := db.w.ExecContext(ctx, db.q(`INSERT INTO sales (id, name, price_cents, total) VALUES ('u2', NULL, 1, 1)`))
		for _, tc := range []struct {
			name string
			err  error
			want bool
		}{
			{"duplicate primary key", dupKey, true},
			{"duplicate primary key, wrapped", fmt.Errorf("creating: %w", dupKey), true},
			{"duplicate live order", dupLive, true},
			{"not null violation", notNull, false},
			{"nil", nil, false},
			{"text only (postgres)", errors.New("ERROR: duplicate key (SQLSTATE 23505)"), false},
			{"text only (sqlite)", errors.New("UNIQUE constraint failed: sales.id"), false},
		} {
			if tc.name != "nil" && tc.err == nil {
				t.Fatalf("%s: the insert succeeded, want an error", tc.name)
			}
			if got := isUnique(tc.err); got != tc.want {
				t.Errorf("%s: isUnique(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
			}
		}
	})
}
