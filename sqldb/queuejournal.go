package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/flashgate/flashgate"
)

// queueJournalChunk is how many entrants one INSERT of JournalQueue writes.
const queueJournalChunk = 500

// JournalQueue writes a fair queue's mark and a batch of its entrants in
// one transaction. The frontiers only grow (the greater of the stored and
// the given); a mark of another epoch (a queue opened anew after it was
// lost unjournaled) replaces the old one and its entrants. An entrant
// journaled before keeps its entry.
func (d *DB) JournalQueue(ctx context.Context, saleID string, m flashgate.QueueMark, entrants []flashgate.QueueEntrant) error {
	tx, err := d.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("journaling queue %s: %w", saleID, err)
	}
	defer func() { _ = tx.Rollback() }()
	var epoch string
	switch err := tx.QueryRowContext(ctx, d.q(`SELECT epoch FROM queue_marks WHERE sale_id = ?`), saleID).Scan(&epoch); {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return fmt.Errorf("journaling queue %s: %w", saleID, err)
	case epoch != m.Epoch:
		if _, err := tx.ExecContext(ctx, d.q(`DELETE FROM queue_entrants WHERE sale_id = ?`), saleID); err != nil {
			return fmt.Errorf("journaling queue %s: %w", saleID, err)
		}
	}
	greatest := "GREATEST"
	if d.dialect != DialectPostgres {
		greatest = "MAX"
	}
	if _, err := tx.ExecContext(ctx, d.q(`INSERT INTO queue_marks (sale_id, epoch, seed_sha, k, e, windows) VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (sale_id) DO UPDATE SET
			k = CASE WHEN queue_marks.epoch = excluded.epoch THEN `+greatest+`(queue_marks.k, excluded.k) ELSE excluded.k END,
			e = CASE WHEN queue_marks.epoch = excluded.epoch THEN `+greatest+`(queue_marks.e, excluded.e) ELSE excluded.e END,
			windows = CASE WHEN queue_marks.epoch = excluded.epoch AND excluded.k < queue_marks.k THEN queue_marks.windows ELSE excluded.windows END,
			epoch = excluded.epoch, seed_sha = excluded.seed_sha`),
		saleID, m.Epoch, m.SeedSHA, m.K, m.E, m.Windows); err != nil {
		return fmt.Errorf("journaling queue %s: %w", saleID, err)
	}
	for len(entrants) > 0 {
		chunk := entrants[:min(len(entrants), queueJournalChunk)]
		entrants = entrants[len(chunk):]
		args := make([]any, 0, 3*len(chunk))
		var b strings.Builder
		b.WriteString(`INSERT INTO queue_entrants (sale_id, user_id, entry) VALUES `)
		for i, en := range chunk {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString("(?, ?, ?)")
			args = append(args, saleID, en.User, en.Entry)
		}
		b.WriteString(` ON CONFLICT (sale_id, user_id) DO NOTHING`)
		if _, err := tx.ExecContext(ctx, d.q(b.String()), args...); err != nil {
			return fmt.Errorf("journaling queue %s: %w", saleID, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("journaling queue %s: %w", saleID, err)
	}
	return nil
}

// QueueJournal reads a fair queue's journal: its mark (ok false when it
// has none) and every entrant.
func (d *DB) QueueJournal(ctx context.Context, saleID string) (m flashgate.QueueMark, entrants []flashgate.QueueEntrant, ok bool, err error) {
	err = d.w.QueryRowContext(ctx, d.q(`SELECT epoch, seed_sha, k, e, windows FROM queue_marks WHERE sale_id = ?`), saleID).
		Scan(&m.Epoch, &m.SeedSHA, &m.K, &m.E, &m.Windows)
	if errors.Is(err, sql.ErrNoRows) {
		return m, nil, false, nil
	}
	if err != nil {
		return m, nil, false, fmt.Errorf("reading queue journal %s: %w", saleID, err)
	}
	rows, err := d.w.QueryContext(ctx, d.q(`SELECT user_id, entry FROM queue_entrants WHERE sale_id = ?`), saleID)
	if err != nil {
		return m, nil, false, fmt.Errorf("reading queue journal %s: %w", saleID, err)
	}
	defer rows.Close()
	for rows.Next() {
		var en flashgate.QueueEntrant
		if err := rows.Scan(&en.User, &en.Entry); err != nil {
			return m, nil, false, fmt.Errorf("reading queue journal %s: %w", saleID, err)
		}
		entrants = append(entrants, en)
	}
	if err := rows.Err(); err != nil {
		return m, nil, false, fmt.Errorf("reading queue journal %s: %w", saleID, err)
	}
	return m, entrants, true, nil
}
