package sqldb

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/flashgate/flashgate"
)

// raiseFence raises the leader fence (table leader_fence) to token inside
// tx, or refuses a token below it with flashgate.ErrFenced. Its UPDATE
// compares the token in its WHERE and holds the fence row's lock until tx
// ends, so fenced transactions run one at a time, and a write with a stale
// token (a control plane that lost its lease, or was paused past it, while
// a newer one wrote) changes nothing.
func (d *DB) raiseFence(ctx context.Context, tx *sql.Tx, token int64) error {
	res, err := tx.ExecContext(ctx, d.q(`UPDATE leader_fence SET token = ? WHERE id = 1 AND token <= ?`), token, token)
	if err != nil {
		return fmt.Errorf("leader fence: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("leader fence: %w", err)
	}
	if n == 0 {
		return fmt.Errorf("leader fence above token %d: %w", token, flashgate.ErrFenced)
	}
	return nil
}
