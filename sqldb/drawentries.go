package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/flashgate/flashgate"
)

// PutDrawEntries stores draw entries, each as its row's latest word: a new
// entry id is inserted, a known one takes the entry's state and updated_at
// (and its payment intent and order id once they are set; an empty one
// keeps the row's) unless the row's entry has gone further (drawRank) or,
// as far, its (updated_at, seq) is later (a stale writer's change, written
// after a newer one, changes nothing). One transaction; at most one live entry (pending or
// entered) per (sale, user), so entries of one user go in the order they
// happened: a new live entry supersedes its user's live row of another
// id (SupersedeDrawEntries). A bad state is ErrBadRequest.
func (d *DB) PutDrawEntries(ctx context.Context, entries []flashgate.DrawEntry) error {
	return d.SupersedeDrawEntries(ctx, entries, nil, nil)
}

// SupersedeDrawEntries is PutDrawEntries that reports the rows it
// supersedes. A live entry (pending or entered) whose id the table does
// not hold, of a user whose live row is another entry (Redis lost that
// entry, and its buyer entered again: docs/api.md, "Draws"), supersedes
// that row: the row becomes withdrawn, stamped as the new entry, and the
// new entry is stored, so that one user's entries never stop the others'
// (draw_entries_live refusing the new row failed the whole batch). The
// later entry supersedes the earlier: when the live row was made after
// the new entry (CreatedAt; a flush that read the new entry's first change
// before Redis lost it writes it after the buyer entered again on the
// rebuilt sale), the row stands and the new entry is stored withdrawn, as
// a superseded row. The superseded rows, in their new state, go to before inside the
// transaction, before it commits (nil: nobody is told); an error from
// before stores nothing.
//
// When an entry moves to entered and its sale's close has begun reading
// the rows (DrawClosing), the entries go to closing first, inside the
// transaction and under the sales' locks, before anything is written, and
// only those it returns are stored (nil: all are): a journal's flush there
// leaves out the moves to entered that Redis lost since its read, which
// the close, whose final flush could not see them, can no longer draw.
// An error from closing stores nothing.
func (d *DB) SupersedeDrawEntries(ctx context.Context, entries []flashgate.DrawEntry,
	closing func(entries []flashgate.DrawEntry) ([]flashgate.DrawEntry, error), before func(superseded []flashgate.DrawEntry) error) error {
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
	if err := d.lockDraws(ctx, tx, drawSales(entries)); err != nil {
		return fmt.Errorf("storing draw entries: %w", err)
	}
	if closing != nil {
		closed, err := d.drawsClosing(ctx, tx, entries)
		if err != nil {
			return err
		}
		if closed {
			if entries, err = closing(entries); err != nil {
				return fmt.Errorf("storing draw entries: %w", err)
			}
		}
	}
	newRank, rowRank := drawRank("excluded"), drawRank("draw_entries")
	q := d.q(`INSERT INTO draw_entries (entry_id, sale_id, user_id, variant, quantity, state, payment_intent, order_id, created_at, updated_at, seq)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (entry_id) DO UPDATE SET state = excluded.state, updated_at = excluded.updated_at, seq = excluded.seq,
			payment_intent = CASE WHEN excluded.payment_intent <> '' THEN excluded.payment_intent ELSE draw_entries.payment_intent END,
			order_id = CASE WHEN excluded.order_id <> '' THEN excluded.order_id ELSE draw_entries.order_id END
		WHERE ` + newRank + ` > ` + rowRank + `
			OR (` + newRank + ` = ` + rowRank + ` AND (draw_entries.updated_at < excluded.updated_at
				OR (draw_entries.updated_at = excluded.updated_at AND draw_entries.seq <= excluded.seq)))`)
	// supersede withdraws the user's live row of another id, unless the
	// table holds the new entry's id already (then it is no new entry).
	// Its states are literals, as in draw_entries_live's WHERE, so that
	// both databases find the user's row through that partial index:
	// with parameters SQLite read every live row of the sale through
	// draw_entries_sale, once per entry stored (a 20,000-entry draw's
	// flushes took most of a core).
	// Only a row made no later than the new entry goes: a row made after
	// it is the buyer's later entry, and the new one, written late (a
	// flush that read the entry's first change before Redis lost it, the
	// buyer entering again on the rebuilt sale), is the one superseded
	// (newer, below).
	supersede := d.q(`UPDATE draw_entries SET state = ?, updated_at = ?, seq = ?
		WHERE sale_id = ? AND user_id = ? AND entry_id <> ? AND state IN ('pending', 'entered')
			AND created_at <= ?
			AND NOT EXISTS (SELECT 1 FROM draw_entries n WHERE n.entry_id = ?)
		RETURNING entry_id, user_id, variant, quantity, payment_intent, order_id, created_at`)
	// newer finds the user's live row of another id made after the new
	// entry (left by supersede), unless the table holds the new entry's
	// id already.
	newer := d.q(`SELECT COUNT(*) FROM draw_entries
		WHERE sale_id = ? AND user_id = ? AND entry_id <> ? AND state IN ('pending', 'entered')
			AND NOT EXISTS (SELECT 1 FROM draw_entries n WHERE n.entry_id = ?)`)
	// The statements are prepared once for the batch: SQLite parsing them
	// again for each entry was a tenth of a draw demo's CPU.
	put, err := tx.PrepareContext(ctx, q)
	if err != nil {
		return fmt.Errorf("storing draw entries: %w", err)
	}
	defer put.Close()
	sup, err := tx.PrepareContext(ctx, supersede)
	if err != nil {
		return fmt.Errorf("storing draw entries: %w", err)
	}
	defer sup.Close()
	later, err := tx.PrepareContext(ctx, newer)
	if err != nil {
		return fmt.Errorf("storing draw entries: %w", err)
	}
	defer later.Close()
	var superseded []flashgate.DrawEntry
	now := nowUTC()
	for _, e := range entries {
		created, updated := e.CreatedAt, e.UpdatedAt
		if created.IsZero() {
			created = now
		}
		if updated.IsZero() {
			updated = created
		}
		if e.State == flashgate.DrawPending || e.State == flashgate.DrawEntered {
			old, err := d.supersede(ctx, sup, e, created, updated)
			if err != nil {
				return err
			}
			superseded = append(superseded, old...)
			var n int64
			// A user has one live row: one withdrawn leaves none newer.
			if len(old) == 0 {
				if err := later.QueryRowContext(ctx, e.SaleID, e.UserID, e.ID, e.ID).Scan(&n); err != nil {
					return fmt.Errorf("storing draw entry %s: %w", e.ID, err)
				}
			}
			if n > 0 {
				// The buyer's later entry stands: this one is stored
				// withdrawn, and its hold, if any, listed for release.
				e.State = flashgate.DrawWithdrawn
				superseded = append(superseded, flashgate.DrawEntry{ID: e.ID, SaleID: e.SaleID, UserID: e.UserID, Variant: e.Variant,
					Quantity: e.Quantity, State: e.State, PaymentIntent: e.PaymentIntent, CreatedAt: created, UpdatedAt: updated, Seq: e.Seq})
			}
		}
		if _, err := put.ExecContext(ctx, e.ID, e.SaleID, e.UserID, e.Variant, e.Quantity, string(e.State),
			e.PaymentIntent, e.OrderID, d.ts(created), d.ts(updated), e.Seq); err != nil {
			return fmt.Errorf("storing draw entry %s: %w", e.ID, err)
		}
	}
	if len(superseded) > 0 && before != nil {
		if err := before(superseded); err != nil {
			return fmt.Errorf("storing draw entries: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("storing draw entries: %w", err)
	}
	return nil
}

// drawsClosing reports, in tx (under lockDraws' locks), whether the sale
// of an entry of entries that moves to entered has its close's record
// (DrawClosing).
func (d *DB) drawsClosing(ctx context.Context, tx *sql.Tx, entries []flashgate.DrawEntry) (bool, error) {
	var sales []string
	for _, e := range entries {
		if e.State == flashgate.DrawEntered && !slices.Contains(sales, e.SaleID) {
			sales = append(sales, e.SaleID)
		}
	}
	for _, s := range sales {
		var n int64
		if err := tx.QueryRowContext(ctx, d.q(`SELECT COUNT(*) FROM draw_closes WHERE sale_id = ?`), s).Scan(&n); err != nil {
			return false, fmt.Errorf("reading the close of draw %s: %w", s, err)
		}
		if n > 0 {
			return true, nil
		}
	}
	return false, nil
}

// DrawClosing records that saleID's close reads the draw's rows from now
// on (drawclose.Closer.Close, after its final flush of the journal and
// before its read), in a transaction under the sale's draw lock
// (lockDraws; a SQLite database serializes its writers already), so that
// it waits for a journal's flush writing at the time: that flush's rows
// are in the close's read. A flush after it leaves out the moves to
// entered that Redis lost since the flush read them (SupersedeDrawEntries'
// closing): such a move came before the close, but its journal was gone
// when the close's final flush read it, so the close drew without it. The
// entry stays pending, and its card hold is released as every pending
// entry's is after the close (listed by the close, the rebuild's restore
// or the flush's putting its rows back into Redis). Recording it again
// changes nothing but waits the same.
func (d *DB) DrawClosing(ctx context.Context, saleID string) error {
	tx, err := d.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("recording the close of draw %s: %w", saleID, err)
	}
	defer func() { _ = tx.Rollback() }()
	if err := d.lockDraws(ctx, tx, []string{saleID}); err != nil {
		return fmt.Errorf("recording the close of draw %s: %w", saleID, err)
	}
	if _, err := tx.ExecContext(ctx, d.q(`INSERT INTO draw_closes (sale_id, closing_at) VALUES (?, ?) ON CONFLICT (sale_id) DO NOTHING`),
		saleID, d.ts(nowUTC())); err != nil {
		return fmt.Errorf("recording the close of draw %s: %w", saleID, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("recording the close of draw %s: %w", saleID, err)
	}
	return nil
}

// DrawCloseBegun reports whether saleID's close recorded its read of the
// rows (DrawClosing): the rebuild of a draw sale Redis lost shuts the
// rebuilt sale's entry window then (controlplane/resync), as the close
// had shut the lost one.
func (d *DB) DrawCloseBegun(ctx context.Context, saleID string) (bool, error) {
	var n int64
	if err := d.r.QueryRowContext(ctx, d.q(`SELECT COUNT(*) FROM draw_closes WHERE sale_id = ?`), saleID).Scan(&n); err != nil {
		return false, fmt.Errorf("reading the close of draw %s: %w", saleID, err)
	}
	return n > 0, nil
}

// RecordDrawHold stores entryID's card hold (intent) with its row before
// the buyer can authorise it (controlplane/drawhold): the row takes the
// intent unless it has one (an entry holds once: the hold is keyed by the
// entry). It reports false when the table holds no row of the entry yet
// (the journal has not written it): the caller flushes the journal and
// asks again.
func (d *DB) RecordDrawHold(ctx context.Context, saleID, entryID, intent string) (bool, error) {
	if intent == "" || !flashgate.ValidID(entryID) || !flashgate.ValidSaleID(saleID) {
		return false, &flashgate.FieldError{Field: "entry", Reason: fmt.Sprintf("a hold %q of entry %q of sale %q", intent, entryID, saleID)}
	}
	if _, err := d.w.ExecContext(ctx, d.q(`UPDATE draw_entries SET payment_intent = ? WHERE entry_id = ? AND sale_id = ? AND payment_intent = ''`),
		intent, entryID, saleID); err != nil {
		return false, fmt.Errorf("recording the hold of draw entry %s: %w", entryID, err)
	}
	var pi string
	switch err := d.w.QueryRowContext(ctx, d.q(`SELECT payment_intent FROM draw_entries WHERE entry_id = ? AND sale_id = ?`), entryID, saleID).Scan(&pi); {
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("recording the hold of draw entry %s: %w", entryID, err)
	}
	return pi != "", nil
}

// supersede runs stmt (SupersedeDrawEntries' update) for the new live
// entry e, made at created and stamped updated, and returns the rows it
// withdrew.
func (d *DB) supersede(ctx context.Context, stmt *sql.Stmt, e flashgate.DrawEntry, created, updated time.Time) ([]flashgate.DrawEntry, error) {
	rows, err := stmt.QueryContext(ctx, string(flashgate.DrawWithdrawn), d.ts(updated), e.Seq, e.SaleID, e.UserID, e.ID, d.ts(created), e.ID)
	if err != nil {
		return nil, fmt.Errorf("superseding the live entry of %s before %s: %w", e.UserID, e.ID, err)
	}
	defer rows.Close()
	var out []flashgate.DrawEntry
	for rows.Next() {
		o := flashgate.DrawEntry{SaleID: e.SaleID, State: flashgate.DrawWithdrawn, UpdatedAt: updated, Seq: e.Seq}
		var created stamp
		if err := rows.Scan(&o.ID, &o.UserID, &o.Variant, &o.Quantity, &o.PaymentIntent, &o.OrderID, &created); err != nil {
			return nil, fmt.Errorf("superseding the live entry of %s before %s: %w", e.UserID, e.ID, err)
		}
		o.CreatedAt = created.T
		out = append(out, o)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("superseding the live entry of %s before %s: %w", e.UserID, e.ID, err)
	}
	return out, nil
}

// drawRank is the SQL of how far the entry of table t's row has gone
// (flashgate.DrawEntryState.Rank). Every move of an entry goes forward
// (lua.DrawSet, lua.DrawWithdraw), so a change of a lower rank than the
// row's is older whatever its stamp: the journal's stamps are Redis's
// clock and a close's own writes (Redis lost the entry) this process's,
// and a skew between the two must not take a captured or released entry
// back to won or lost.
func drawRank(t string) string {
	var b strings.Builder
	b.WriteString("(CASE " + t + ".state")
	for _, st := range []flashgate.DrawEntryState{flashgate.DrawPending, flashgate.DrawEntered, flashgate.DrawWithdrawn,
		flashgate.DrawWon, flashgate.DrawLost, flashgate.DrawCaptured, flashgate.DrawReleased} {
		fmt.Fprintf(&b, " WHEN '%s' THEN %d", st, st.Rank())
	}
	b.WriteString(" ELSE -1 END)")
	return b.String()
}

// DrawEntries returns a sale's draw entries, by entry id.
func (d *DB) DrawEntries(ctx context.Context, saleID string) ([]flashgate.DrawEntry, error) {
	var out []flashgate.DrawEntry
	err := d.EachDrawEntry(ctx, saleID, func(e flashgate.DrawEntry) error {
		out = append(out, e)
		return nil
	})
	return out, err
}

// DrawEntry reads one of a sale's draw entries; flashgate.ErrNotFound when
// the sale has none of that id.
func (d *DB) DrawEntry(ctx context.Context, saleID, entryID string) (flashgate.DrawEntry, error) {
	rows, err := d.r.QueryContext(ctx, d.q(`SELECT `+drawEntryCols+` FROM draw_entries WHERE sale_id = ? AND entry_id = ?`), saleID, entryID)
	if err != nil {
		return flashgate.DrawEntry{}, fmt.Errorf("reading draw entry %s: %w", entryID, err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return flashgate.DrawEntry{}, fmt.Errorf("reading draw entry %s: %w", entryID, err)
		}
		return flashgate.DrawEntry{}, fmt.Errorf("draw entry %s: %w", entryID, flashgate.ErrNotFound)
	}
	e, err := scanDrawEntry(rows)
	if err != nil {
		return flashgate.DrawEntry{}, fmt.Errorf("reading draw entry %s: %w", entryID, err)
	}
	return e, nil
}

// drawEntryCols are the columns scanDrawEntry reads.
const drawEntryCols = `entry_id, sale_id, user_id, variant, quantity, state, payment_intent, order_id, created_at, updated_at, seq`

// EachDrawEntry calls fn with each of a sale's draw entries, by entry id,
// from one query (the rebuild of a draw sale Redis lost reads a million
// rows this way: one sort, where pages by id would sort the sale's rows
// once a page); an error from fn stops it and is returned.
func (d *DB) EachDrawEntry(ctx context.Context, saleID string, fn func(flashgate.DrawEntry) error) error {
	rows, err := d.r.QueryContext(ctx, d.q(`SELECT `+drawEntryCols+` FROM draw_entries WHERE sale_id = ? ORDER BY entry_id`), saleID)
	if err != nil {
		return fmt.Errorf("reading draw entries of %s: %w", saleID, err)
	}
	defer rows.Close()
	for rows.Next() {
		e, err := scanDrawEntry(rows)
		if err != nil {
			return fmt.Errorf("reading draw entries of %s: %w", saleID, err)
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("reading draw entries of %s: %w", saleID, err)
	}
	return nil
}

// scanDrawEntry reads the row rows is at (drawEntryCols).
func scanDrawEntry(rows *sql.Rows) (flashgate.DrawEntry, error) {
	var e flashgate.DrawEntry
	var st string
	var created, updated stamp
	if err := rows.Scan(&e.ID, &e.SaleID, &e.UserID, &e.Variant, &e.Quantity, &st, &e.PaymentIntent, &e.OrderID, &created, &updated, &e.Seq); err != nil {
		return flashgate.DrawEntry{}, err
	}
	e.State, e.CreatedAt, e.UpdatedAt = flashgate.DrawEntryState(st), created.T, updated.T
	return e, nil
}

// PutDrawFile stores a draw's entries file once: a sale that has one keeps
// it. It returns the stored file, this body or the one stored before, so
// that two leaders closing one draw settle the same one.
func (d *DB) PutDrawFile(ctx context.Context, saleID string, body []byte) ([]byte, error) {
	if _, err := d.w.ExecContext(ctx, d.q(`INSERT INTO draw_files (sale_id, body, done, created_at) VALUES (?, ?, 0, ?)
		ON CONFLICT (sale_id) DO NOTHING`), saleID, string(body), d.ts(nowUTC())); err != nil {
		return nil, fmt.Errorf("storing the draw file of %s: %w", saleID, err)
	}
	stored, _, err := d.drawFile(ctx, d.w, saleID)
	return stored, err
}

// DrawFile returns a draw's entries file and whether its close finished;
// flashgate.ErrNotFound before the close stored it.
func (d *DB) DrawFile(ctx context.Context, saleID string) (body []byte, done bool, err error) {
	return d.drawFile(ctx, d.r, saleID)
}

func (d *DB) drawFile(ctx context.Context, db *sql.DB, saleID string) ([]byte, bool, error) {
	var body string
	var done int64
	err := db.QueryRowContext(ctx, d.q(`SELECT body, done FROM draw_files WHERE sale_id = ?`), saleID).Scan(&body, &done)
	if err != nil {
		return nil, false, notFound(err, "the draw file of "+saleID)
	}
	return []byte(body), done == 1, nil
}

// DrawDone records that a draw's close finished; a sale without a draw
// file is flashgate.ErrNotFound.
func (d *DB) DrawDone(ctx context.Context, saleID string) error {
	res, err := d.w.ExecContext(ctx, d.q(`UPDATE draw_files SET done = 1 WHERE sale_id = ?`), saleID)
	if err != nil {
		return fmt.Errorf("finishing the draw of %s: %w", saleID, err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 {
		return fmt.Errorf("finishing the draw of %s: no draw file: %w", saleID, flashgate.ErrNotFound)
	}
	return nil
}

// drawLockSpace is the first key of the advisory locks of lockDraws.
const drawLockSpace = 37

// drawIdleTimeout is how long a transaction holding lockDraws' locks may
// idle on PostgreSQL (fenceIdleTimeout's).
const drawIdleTimeout = fenceIdleTimeout

// drawSales are the sales of entries, each once.
func drawSales(entries []flashgate.DrawEntry) []string {
	sales := make([]string, 0, 1)
	for _, e := range entries {
		if !slices.Contains(sales, e.SaleID) {
			sales = append(sales, e.SaleID)
		}
	}
	return sales
}

// lockDraws takes, on PostgreSQL, a transaction-scoped advisory lock on
// each of sales (in its keys' order), held by SupersedeDrawEntries (and
// DrawClosing) until it commits: the flushes of one draw's journal by
// several processes (each gateway's holds flush it, as the leader's tick
// does) upsert the same rows, and two at once deadlocked on the table's
// unique indexes (40P01 every second of a crowd entering, each hold
// waiting out the deadlock timeout). A SQLite database serializes its
// writers already.
//
// The server ends the transaction when it idles for drawIdleTimeout, as
// the leader fence's (raiseFence): a process frozen inside it (SIGSTOP, a
// stalled VM, between two statements or in the before callback) held
// every other process's flush of the draw, each gateway's holds' and the
// close's, until it resumed.
func (d *DB) lockDraws(ctx context.Context, tx *sql.Tx, sales []string) error {
	if d.dialect != DialectPostgres {
		return nil
	}
	// One round trip: the timeout, and the locks in the order of their
	// keys (two batches of several sales whose keys collide then never
	// wait on each other crosswise).
	_, err := tx.ExecContext(ctx, `SELECT set_config('idle_in_transaction_session_timeout', `+drawIdleTimeout+`, true), count(pg_advisory_xact_lock($1, k))
		FROM (SELECT DISTINCT hashtext(s) AS k FROM unnest($2::text[]) AS s ORDER BY k) AS l`,
		drawLockSpace, sales)
	return err
}
