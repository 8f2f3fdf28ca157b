// Package drawjournal writes a draw sale's entry changes, which the entry
// scripts add to the sale's journal stream (lua.DrawJournalKey), to the
// database's draw_entries, and then deletes them from the stream: the
// leader runs it every tick for each live draw sale.
package drawjournal

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/lua"
)

// Store is what Flush writes (*sqldb.DB).
type Store interface {
	// PutDrawEntries stores entries by id; a change to a state the row's
	// entry has left (flashgate.DrawEntryState.Rank), or of its rank and
	// older than the row's (UpdatedAt, Seq), leaves the row as it is.
	PutDrawEntries(ctx context.Context, entries []flashgate.DrawEntry) error
	// SupersedeDrawEntries is PutDrawEntries in which a new live entry
	// (pending or entered) of a user whose live row is another entry
	// withdraws that row; the rows it withdrew go to before, in its
	// transaction, before it commits. When an entry moves to entered
	// and its sale's close has begun reading the rows
	// (sqldb.DB.DrawClosing), closing is called first, in the
	// transaction, and only the entries it returns are stored.
	SupersedeDrawEntries(ctx context.Context, entries []flashgate.DrawEntry,
		closing func(entries []flashgate.DrawEntry) ([]flashgate.DrawEntry, error), before func(superseded []flashgate.DrawEntry) error) error
	// DrawEntry reads one entry's row; flashgate.ErrNotFound when there
	// is none.
	DrawEntry(ctx context.Context, saleID, entryID string) (flashgate.DrawEntry, error)
}

// DefaultBatch is how many stream entries one Flush reads.
const DefaultBatch = 1000

// Flush writes up to batch (0 means DefaultBatch) of sale's journaled
// entry changes to store, in stream order, each stamped with its stream
// entry's id (time and sequence: Flushes may run at once, the leader's
// tick beside a close, and the store keeps each entry's latest), and
// deletes what it wrote from the stream; it returns how many it wrote. A
// stream entry of another shape is deleted unwritten and reported in the
// error, after the others are written.
//
// A buyer has one live entry (pending or entered) in the database
// (draw_entries_live). When Redis lost a buyer's live entry and the buyer
// entered again, the later entry supersedes the earlier: the earlier row
// becomes withdrawn, as Redis already has it (the buyer's entry there is
// the new one, and the close draws the database's rows), and its card
// hold, if it has one, goes on the read path's list (lua.DrawHoldKey,
// lua.DrawCheckKey) before the row's change commits: the read path
// releases the hold of an entry its buyer no longer has
// (controlplane/drawhold). So one buyer's entries never stop the journal.
//
// Redis may lose the sale between Flush's read of the journal and its
// write, and a rebuild (resync.Syncer.RestoreDraw) restore the entries
// from rows it read before the write: a withdrawn entry came back entered,
// its hold off the read path's list. So Flush reads the sale hash's
// lua.FieldDrawRestore with the journal, in one step, and its trim
// (lua.DrawTrim) compares it: when a restore began since, nothing is
// deleted and the rows written (and those superseded), read back, go into
// Redis by the restore's rule (lua.DrawReapply: an entry only goes
// forward), whichever process's flush or rebuild it was.
//
// A flush whose write comes after the draw's close began reading the rows
// (sqldb.DB.DrawClosing, recorded once the close's final flush is done)
// leaves out each move to entered whose stream entry is no longer in the
// journal (closing): Redis lost it since the read, so the close's final
// flush did not see it, and the close drew the rows without it; written
// now, the entry stood entered out of the draw, its hold the close's, and
// the close done. Left out, the entry stays pending, and its hold is
// released as every pending entry's is after the close. A move still in
// the journal was read by the close's final flush too, which wrote it
// before the close read the rows.
func Flush(ctx context.Context, rdb redis.UniversalClient, store Store, sale string, batch int64) (int, error) {
	if batch <= 0 {
		batch = DefaultBatch
	}
	mark, msgs, err := read(ctx, rdb, sale, batch)
	if err != nil {
		return 0, err
	}
	if len(msgs) == 0 {
		return 0, nil
	}
	entries := make([]flashgate.DrawEntry, 0, len(msgs))
	read := make([]redis.XMessage, 0, len(msgs)) // the stream entry of each of entries
	args := make([]any, 0, 1+len(msgs))
	args = append(args, mark)
	var bad []string
	for _, m := range msgs {
		args = append(args, m.ID)
		e, ok := parse(sale, m)
		if !ok {
			bad = append(bad, m.ID)
			continue
		}
		entries = append(entries, e)
		read = append(read, m)
	}
	var superseded []flashgate.DrawEntry
	written := entries
	if len(entries) > 0 {
		closing := func(es []flashgate.DrawEntry) ([]flashgate.DrawEntry, error) {
			kept, err := unlost(ctx, rdb, sale, es, read)
			written = kept
			return kept, err
		}
		if err := store.SupersedeDrawEntries(ctx, entries, closing, func(old []flashgate.DrawEntry) error {
			superseded = append(superseded[:0], old...)
			return listHolds(ctx, rdb, sale, old)
		}); err != nil {
			return 0, fmt.Errorf("journaling the draw of %s: %w", sale, err)
		}
	}
	n, err := lua.DrawTrim.Run(ctx, rdb, lua.DrawTrimKeys(sale), args...).Int()
	if err != nil {
		return len(entries), fmt.Errorf("trimming the draw journal of %s: %w: %w", sale, flashgate.ErrUnavailable, err)
	}
	if n == lua.DrawTrimRestored {
		if err := reapply(ctx, rdb, store, sale, superseded, written); err != nil {
			return len(entries), err
		}
	}
	if len(bad) > 0 {
		return len(entries), fmt.Errorf("the draw journal of %s: entries of another shape dropped: %v", sale, bad)
	}
	return len(entries), nil
}

// unlost returns entries (read from the journal as the stream entries
// read, one each) without their moves to entered whose stream entry is no
// longer in sale's journal, as it is now (the same id and change): Redis
// lost it since the flush's read (or another flush wrote it and deleted
// it, when leaving it out changes nothing). Flush calls it, through
// Store.SupersedeDrawEntries, once the draw's close began reading the
// rows.
func unlost(ctx context.Context, rdb redis.UniversalClient, sale string, entries []flashgate.DrawEntry, read []redis.XMessage) ([]flashgate.DrawEntry, error) {
	var lo, hi string
	for i, e := range entries {
		if e.State != flashgate.DrawEntered {
			continue
		}
		if lo == "" {
			lo = read[i].ID
		}
		hi = read[i].ID
	}
	if lo == "" {
		return entries, nil
	}
	// The journal's ids only grow, so the range holds the entries read
	// between lo and hi that are still there (and no other, but for a
	// stream Redis made again with ids of the same milliseconds: the
	// change is compared too).
	now, err := rdb.XRange(ctx, lua.DrawJournalKey(sale), lo, hi).Result()
	if err != nil {
		return nil, fmt.Errorf("reading the draw journal of %s again: %w: %w", sale, flashgate.ErrUnavailable, err)
	}
	there := make(map[string]any, len(now))
	for _, m := range now {
		there[m.ID] = m.Values["e"]
	}
	kept := make([]flashgate.DrawEntry, 0, len(entries))
	for i, e := range entries {
		if e.State == flashgate.DrawEntered {
			if v, ok := there[read[i].ID]; !ok || v != read[i].Values["e"] {
				continue
			}
		}
		kept = append(kept, e)
	}
	return kept, nil
}

// read returns the sale hash's lua.FieldDrawRestore ("" when it has none)
// and up to batch entries of sale's journal, read in one MULTI.
func read(ctx context.Context, rdb redis.UniversalClient, sale string, batch int64) (string, []redis.XMessage, error) {
	var mark *redis.StringCmd
	var rng *redis.XMessageSliceCmd
	_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		mark = p.HGet(ctx, lua.SaleKey(sale), lua.FieldDrawRestore)
		rng = p.XRangeN(ctx, lua.DrawJournalKey(sale), "-", "+", batch)
		return nil
	})
	if err == nil || errors.Is(err, redis.Nil) {
		err = rng.Err()
	}
	if err == nil {
		if err = mark.Err(); errors.Is(err, redis.Nil) {
			err = nil
		}
	}
	if err != nil {
		return "", nil, fmt.Errorf("reading the draw journal of %s: %w: %w", sale, flashgate.ErrUnavailable, err)
	}
	return mark.Val(), rng.Val(), nil
}

// reapplyPage is how many rows one DrawReapply call takes.
const reapplyPage = 1000

// reapply reads back the rows of the entries a Flush superseded and wrote
// and puts them into sale's Redis entries (lua.DrawReapply), withdrawn
// rows first: a buyer's live row replaces the buyer's withdrawn entry of
// another id, never the other way round, and only an entry the database
// holds a row of: the user's rows read back, and the user's entry in
// Redis when it has a row, found before the rows are read back
// (overridable).
func reapply(ctx context.Context, rdb redis.UniversalClient, store Store, sale string, superseded, written []flashgate.DrawEntry) error {
	over, err := overridable(ctx, rdb, store, sale, slices.Concat(superseded, written))
	if err != nil {
		return err
	}
	seen := make(map[string]bool, len(superseded)+len(written))
	var rows []flashgate.DrawEntry
	for _, e := range slices.Concat(superseded, written) {
		if seen[e.ID] {
			continue
		}
		seen[e.ID] = true
		r, err := store.DrawEntry(ctx, sale, e.ID)
		switch {
		case errors.Is(err, flashgate.ErrNotFound):
			continue
		case err != nil:
			return fmt.Errorf("reading back the draw entries of %s after a restore: %w", sale, err)
		}
		rows = append(rows, r)
	}
	slices.SortStableFunc(rows, func(a, b flashgate.DrawEntry) int {
		aw, bw := a.State == flashgate.DrawWithdrawn, b.State == flashgate.DrawWithdrawn
		switch {
		case aw && !bw:
			return -1
		case bw && !aw:
			return 1
		}
		return 0
	})
	// known lists, for each user, the entries of the user the database
	// holds rows of: a live row may replace those, once withdrawn.
	known := make(map[string]string, len(over))
	for u, id := range over {
		known[u] = id
	}
	for _, r := range rows {
		known[r.UserID] = strings.TrimSpace(known[r.UserID] + " " + r.ID)
	}
	for page := range slices.Chunk(rows, reapplyPage) {
		args := make([]any, 0, 1+7*len(page))
		args = append(args, 0)
		for _, r := range page {
			args = append(args, r.UserID, string(r.State), r.ID, r.Quantity, r.Variant, r.PaymentIntent, known[r.UserID])
		}
		n, err := lua.DrawReapply.Run(ctx, rdb, lua.DrawRestoreKeys(sale), args...).Int()
		if err != nil {
			return fmt.Errorf("putting the draw entries of %s back after a restore: %w: %w", sale, flashgate.ErrUnavailable, err)
		}
		if n == lua.DrawReapplyLost {
			return nil // Redis lost the sale again: its next rebuild reads the rows
		}
	}
	return nil
}

// overridable returns, for each user of entries, the id of the user's
// entry in sale's Redis entries when the database holds a row of it: the
// one entry of another id that lua.DrawReapply lets a live row of the user
// replace (once withdrawn). An entry with no row was made on the rebuilt
// sale, after its buyer withdrew every entry of a row (its journal not
// flushed yet): a row read back, of an older entry whose withdrawal is in
// that journal too, must not replace it. Read before the rows are: an
// entry that has a row by then had its buyer's older entries' withdrawals
// written before it (the journal's order), so the rows read after it show
// them.
func overridable(ctx context.Context, rdb redis.UniversalClient, store Store, sale string, entries []flashgate.DrawEntry) (map[string]string, error) {
	var users []string
	for _, e := range entries {
		if !slices.Contains(users, e.UserID) {
			users = append(users, e.UserID)
		}
	}
	over := make(map[string]string, len(users))
	if len(users) == 0 {
		return over, nil
	}
	cur, err := rdb.HMGet(ctx, lua.DrawKey(sale), users...).Result()
	if err != nil {
		return nil, fmt.Errorf("reading the draw entries of %s after a restore: %w: %w", sale, flashgate.ErrUnavailable, err)
	}
	for i, u := range users {
		v, _ := cur[i].(string)
		_, id, _, _, ok := lua.ParseDrawEntry(v)
		if !ok {
			continue
		}
		switch _, err := store.DrawEntry(ctx, sale, id); {
		case err == nil:
			over[u] = id
		case !errors.Is(err, flashgate.ErrNotFound):
			return nil, fmt.Errorf("reading back the draw entries of %s after a restore: %w", sale, err)
		}
	}
	return over, nil
}

// parse reads one journal entry: "e" = "<state> <entry id> <quantity>
// <variant> <user id>", stamped with its stream id (milliseconds and
// sequence, so that a flush running beside another never writes an
// entry's older change over its newer one), and
// "pi" = the entry's hold when lua.DrawHold recorded it.
func parse(sale string, m redis.XMessage) (flashgate.DrawEntry, bool) {
	v, _ := m.Values["e"].(string)
	st, v, ok1 := strings.Cut(v, " ")
	id, v, ok2 := strings.Cut(v, " ")
	q, v, ok3 := strings.Cut(v, " ")
	variant, user, ok4 := strings.Cut(v, " ")
	qty, err := strconv.ParseInt(q, 10, 64)
	ms, seq, _ := strings.Cut(m.ID, "-")
	at, err2 := strconv.ParseInt(ms, 10, 64)
	n, err3 := strconv.ParseInt(seq, 10, 64)
	e := flashgate.DrawEntry{ID: id, SaleID: sale, UserID: user, Variant: variant, Quantity: qty, State: flashgate.DrawEntryState(st)}
	if !ok1 || !ok2 || !ok3 || !ok4 || err != nil || err2 != nil || err3 != nil || !e.State.Valid() || !flashgate.ValidID(id) || user == "" {
		return flashgate.DrawEntry{}, false
	}
	e.CreatedAt = time.UnixMilli(at).UTC()
	e.UpdatedAt, e.Seq = e.CreatedAt, n
	e.PaymentIntent, _ = m.Values[lua.DrawJournalIntent].(string)
	return e, true
}

// listHolds puts the holds of superseded entries (those with an intent) on
// sale's read path's list, due at once: the hold's record keeps the one
// there, if any, and the list an earlier due time.
func listHolds(ctx context.Context, rdb redis.UniversalClient, sale string, superseded []flashgate.DrawEntry) error {
	_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for _, e := range superseded {
			if e.PaymentIntent == "" {
				continue
			}
			p.HSetNX(ctx, lua.DrawHoldKey(sale), e.ID, e.PaymentIntent+" "+e.UserID)
			p.ZAddLT(ctx, lua.DrawCheckKey(sale), redis.Z{Score: float64(e.UpdatedAt.UnixMilli()), Member: e.ID})
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("listing the holds of superseded entries: %w: %w", flashgate.ErrUnavailable, err)
	}
	return nil
}
