package sqldb

import (
	"context"
	"fmt"

	"github.com/flashgate/flashgate"
)

// PutDrawEntries stores draw entries, each as its row's latest word: a new
// entry id is inserted, a known one takes the entry's state and updated_at
// (and its payment intent and order id once they are set; an empty one
// keeps the row's) unless the row's updated_at is later (a stale writer's
// change, written after a newer one, changes nothing). One transaction; at most one live entry (pending or
// entered) per (sale, user), so entries of one user go in the order they
// happened. A bad state is ErrBadRequest.
func (d *DB) PutDrawEntries(ctx context.Context, entries []flashgate.DrawEntry) error {
	for _, e := range entries {
		if !e.State.Valid() || !flashgate.ValidID(e.ID) || !flashgate.ValidSaleID(e.SaleID) {
			return &flashgate.FieldError{Field: "entry", Reason: fmt.Sprintf("entry %q of sale %q in state %q", e.ID, e.SaleID, e.State)}
		}
	}
	tx, err := d.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("storing draw entries: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	q := d.q(`INSERT INTO draw_entries (entry_id, sale_id, user_id, variant, quantity, state, payment_intent, order_id, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (entry_id) DO UPDATE SET state = excluded.state, updated_at = excluded.updated_at,
			payment_intent = CASE WHEN excluded.payment_intent <> '' THEN excluded.payment_intent ELSE draw_entries.payment_intent END,
			order_id = CASE WHEN excluded.order_id <> '' THEN excluded.order_id ELSE draw_entries.order_id END
		WHERE draw_entries.updated_at <= excluded.updated_at`)
	now := nowUTC()
	for _, e := range entries {
		created, updated := e.CreatedAt, e.UpdatedAt
		if created.IsZero() {
			created = now
		}
		if updated.IsZero() {
			updated = created
		}
		if _, err := tx.ExecContext(ctx, q, e.ID, e.SaleID, e.UserID, e.Variant, e.Quantity, string(e.State),
			e.PaymentIntent, e.OrderID, d.ts(created), d.ts(updated)); err != nil {
			return fmt.Errorf("storing draw entry %s: %w", e.ID, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("storing draw entries: %w", err)
	}
	return nil
}

// DrawEntries returns a sale's draw entries, by entry id.
func (d *DB) DrawEntries(ctx context.Context, saleID string) ([]flashgate.DrawEntry, error) {
	rows, err := d.r.QueryContext(ctx, d.q(`SELECT entry_id, sale_id, user_id, variant, quantity, state, payment_intent, order_id, created_at, updated_at
		FROM draw_entries WHERE sale_id = ? ORDER BY entry_id`), saleID)
	if err != nil {
		return nil, fmt.Errorf("reading draw entries of %s: %w", saleID, err)
	}
	defer rows.Close()
	var out []flashgate.DrawEntry
	for rows.Next() {
		var e flashgate.DrawEntry
		var st string
		var created, updated stamp
		if err := rows.Scan(&e.ID, &e.SaleID, &e.UserID, &e.Variant, &e.Quantity, &st, &e.PaymentIntent, &e.OrderID, &created, &updated); err != nil {
			return nil, fmt.Errorf("reading draw entries of %s: %w", saleID, err)
		}
		e.State, e.CreatedAt, e.UpdatedAt = flashgate.DrawEntryState(st), created.T, updated.T
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading draw entries of %s: %w", saleID, err)
	}
	return out, nil
}
