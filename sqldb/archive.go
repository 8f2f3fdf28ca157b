package sqldb

import (
	"context"
	"fmt"

	"github.com/flashgate/flashgate"
)

// LiveSales returns the sales not archived, ordered by id: what the control
// plane's periodic passes and the lookup of orders not yet stored read. It
// reads the partial index sales_live, so its cost follows the live sales
// and not every sale ever made.
func (d *DB) LiveSales(ctx context.Context) ([]flashgate.Sale, error) {
	rows, err := d.r.QueryContext(ctx, `SELECT `+saleReadCols+` FROM sales WHERE archived = 0 ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("listing live sales: %w", err)
	}
	defer rows.Close()
	var out []flashgate.Sale
	for rows.Next() {
		s, err := scanSale(rows)
		if err != nil {
			return nil, fmt.Errorf("listing live sales: %w", err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing live sales: %w", err)
	}
	return out, nil
}

// ArchiveSale marks sale id archived if it is closed and not archived yet,
// and reports whether it did. The caller checks that the sale settled; the
// condition on the state keeps a sale reopened meanwhile live.
func (d *DB) ArchiveSale(ctx context.Context, id string) (bool, error) {
	res, err := d.w.ExecContext(ctx, d.q(`UPDATE sales SET archived = 1 WHERE id = ? AND state = 'closed' AND archived = 0`), id)
	if err != nil {
		return false, fmt.Errorf("archiving sale %s: %w", id, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("archiving sale %s: %w", id, err)
	}
	return n == 1, nil
}

// UnarchiveSale makes sale id live again (before it is reopened); an
// unknown id is flashgate.ErrNotFound.
func (d *DB) UnarchiveSale(ctx context.Context, id string) error {
	res, err := d.w.ExecContext(ctx, d.q(`UPDATE sales SET archived = 0 WHERE id = ?`), id)
	if err != nil {
		return fmt.Errorf("unarchiving sale %s: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("unarchiving sale %s: %w", id, err)
	} else if n == 0 {
		return fmt.Errorf("sale %s: %w", id, flashgate.ErrNotFound)
	}
	return nil
}
