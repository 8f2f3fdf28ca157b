// Package drawjournal writes a draw sale's entry changes, which the entry
// scripts add to the sale's journal stream (lua.DrawJournalKey), to the
// database's draw_entries, and then deletes them from the stream: the
// leader runs it every tick for each live draw sale.
package drawjournal

import (
	"context"
	"fmt"
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
}

// DefaultBatch is how many stream entries one Flush reads.
const DefaultBatch = 1000

// Flush writes up to batch (0 means DefaultBatch) of sale's journaled
// entry changes to store, in stream order, each stamped with its stream
// entry's id (time and sequence: Flushes may run at once, the leader's tick
// beside a close, and the store keeps each entry's latest), and deletes what it wrote from the stream; it returns how
// many it wrote. A stream entry of another shape is deleted unwritten and
// reported in the error, after the others are written.
func Flush(ctx context.Context, rdb redis.UniversalClient, store Store, sale string, batch int64) (int, error) {
	if batch <= 0 {
		batch = DefaultBatch
	}
	key := lua.DrawJournalKey(sale)
	msgs, err := rdb.XRangeN(ctx, key, "-", "+", batch).Result()
	if err != nil {
		return 0, fmt.Errorf("reading the draw journal of %s: %w: %w", sale, flashgate.ErrUnavailable, err)
	}
	if len(msgs) == 0 {
		return 0, nil
	}
	entries := make([]flashgate.DrawEntry, 0, len(msgs))
	ids := make([]string, 0, len(msgs))
	var bad []string
	for _, m := range msgs {
		ids = append(ids, m.ID)
		e, ok := parse(sale, m)
		if !ok {
			bad = append(bad, m.ID)
			continue
		}
		entries = append(entries, e)
	}
	if len(entries) > 0 {
		if err := store.PutDrawEntries(ctx, entries); err != nil {
			return 0, fmt.Errorf("journaling the draw of %s: %w", sale, err)
		}
	}
	if err := rdb.XDel(ctx, key, ids...).Err(); err != nil {
		return len(entries), fmt.Errorf("trimming the draw journal of %s: %w: %w", sale, flashgate.ErrUnavailable, err)
	}
	if len(bad) > 0 {
		return len(entries), fmt.Errorf("the draw journal of %s: entries of another shape dropped: %v", sale, bad)
	}
	return len(entries), nil
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
