package sqldb

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/flashgate/flashgate"
)

// fenceIdleTimeout is how long a fenced transaction may idle on
// PostgreSQL: the control plane's default lease.
const fenceIdleTimeout = `'5s'`

// raiseFence raises the leader fence (table leader_fence) to token inside
// tx, or refuses a token below it with flashgate.ErrFenced. Its UPDATE
// compares the token in its WHERE and holds the fence row's lock until tx
// ends, so fenced transactions run one at a time, and a write with a stale
// token (a control plane that lost its lease, or was paused past it, while
// a newer one wrote) changes nothing.
//
// On PostgreSQL the transaction is ended by the server when it idles for
// fenceIdleTimeout: a control plane frozen inside it (SIGSTOP, a stalled
// VM) must not hold the fence row, and so the next leader's writes, for
// longer than its lease.
func (d *DB) raiseFence(ctx context.Context, tx *sql.Tx, token int64) error {
	if d.dialect == DialectPostgres {
		if _, err := tx.ExecContext(ctx, `SET LOCAL idle_in_transaction_session_timeout = `+fenceIdleTimeout); err != nil {
			return fmt.Errorf("leader fence: %w", err)
		}
	}
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
