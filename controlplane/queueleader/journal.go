package queueleader

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/fairqueue"
	"github.com/flashgate/flashgate/lua"
)

// The fair queue's journal. Every new entry joins the sale's journal
// stream in the entry script (lua.QueueJournalKey); the leader writes the
// stream's entries and the queue's mark (epoch, seed commitment,
// frontiers, open windows) to the database at every step, and deletes what
// it wrote from the stream. When Redis holds less than the journal (a
// FLUSHALL rebuilt the sale without its queue, a failover promoted a
// replica that lags), the leader restores the queue from the journal
// before it does anything else: the same epoch (so the same seed and
// commitment), every journaled entrant with the entry it was given, and
// the frontiers, which only grow.

// queueJournalBatch is how many stream entries one journal write takes.
const queueJournalBatch = 10_000

// journalQueue writes the queue's new entrants and its mark to the
// database, unless nothing changed since the last write, and then deletes
// the journaled entries from the stream.
func (l *Leader) journalQueue(ctx context.Context, id string, run *queueRun) error {
	pipe := l.rdb.Pipeline()
	h := pipe.HMGet(ctx, lua.SaleKey(id), fairqueue.Fields...)
	w := pipe.LRange(ctx, lua.QueueWindowsKey(id), 0, -1)
	x := pipe.XRangeN(ctx, lua.QueueJournalKey(id), "-", "+", queueJournalBatch)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("reading the queue's journal stream: %w: %w", flashgate.ErrUnavailable, err)
	}
	v, ok := fairqueue.Read(h.Val())
	if !ok || v.Epoch == "" {
		return nil // not open (or lost): nothing to journal
	}
	m := flashgate.QueueMark{Epoch: v.Epoch, SeedSHA: v.SeedSHA, K: v.Admitted, E: v.Expired, Windows: strings.Join(w.Val(), "\n")}
	msgs := x.Val()
	if len(msgs) == 0 && m == run.journaled {
		return nil
	}
	entrants := make([]flashgate.QueueEntrant, 0, len(msgs))
	ids := make([]string, 0, len(msgs))
	for _, msg := range msgs {
		ids = append(ids, msg.ID)
		e, _ := msg.Values["e"].(string)
		entry, user, ok := strings.Cut(e, " ")
		if !ok {
			l.log.Warn("fair queue journal: malformed entry", "sale", id, "id", msg.ID)
			continue
		}
		entrants = append(entrants, flashgate.QueueEntrant{User: user, Entry: entry})
	}
	if err := l.store.JournalQueue(ctx, id, m, entrants); err != nil {
		return fmt.Errorf("journaling the queue: %w", err)
	}
	run.journaled = m
	if len(ids) > 0 {
		if err := l.rdb.XDel(ctx, lua.QueueJournalKey(id), ids...).Err(); err != nil {
			return fmt.Errorf("trimming the queue's journal stream: %w: %w", flashgate.ErrUnavailable, err)
		}
	}
	return nil
}

// journalClosed journals what a closed sale's queue took since the last
// step (the entries made between that step and the close), so that the
// archive, which waits for the journal stream to be empty, deletes no
// entry the database lacks. Of what the leader remembers of the queue it
// keeps only the mark last journaled: a reopened sale's first step
// compares Redis with the journal again and ranks afresh, as in a new
// process.
func (l *Leader) journalClosed(ctx context.Context, id string) error {
	run := l.runs.run(id)
	if run.ranked || run.journalRead {
		*run = queueRun{journaled: run.journaled}
	}
	return l.journalQueue(ctx, id, run)
}

// restoreQueueIfBehind compares Redis' queue with the journal the first
// time this process steps the sale, and whenever Redis holds an older
// frontier than the one last journaled or no open queue: if the journal
// holds more (another epoch, a greater frontier, more entrants), or the
// queue's counters count entrants its hash does not hold (an archived
// sale, reopened: the archive deleted the queue and kept the hash), it
// restores the queue from it (lua.QueueRestore). It reports whether it
// did.
func (l *Leader) restoreQueueIfBehind(ctx context.Context, sale flashgate.Sale, run *queueRun, f queueFigures, fence int64, now time.Time) (bool, error) {
	if run.journalRead && f.Open && f.Admitted >= run.journaled.K && f.Expired >= run.journaled.E && f.Epoch == run.journaled.Epoch {
		return false, nil
	}
	m, entrants, ok, err := l.store.QueueJournal(ctx, sale.ID)
	if err != nil {
		return false, fmt.Errorf("reading the queue's journal: %w", err)
	}
	run.journalRead = true
	if !ok {
		return false, nil
	}
	if f.Open && f.Epoch != "" && f.Epoch != m.Epoch {
		// Redis holds a queue opened anew: its journal replaces this one.
		return false, nil
	}
	if f.Open && f.Epoch == m.Epoch && f.Admitted >= m.K && f.Expired >= m.E && f.Prequeued+f.Late >= int64(len(entrants)) &&
		f.entries >= f.Prequeued+f.Late {
		run.journaled = m
		return false, nil
	}
	seed := l.queueSeed(sale.ID, m.Epoch)
	if sum := sha256.Sum256(seed[:]); hex.EncodeToString(sum[:]) != m.SeedSHA {
		return false, fmt.Errorf("restoring the queue: the seed derived from the journaled epoch %q does not hash to the journaled commitment (was the queue seed secret changed?)", m.Epoch)
	}
	revealed := ""
	if !now.Before(*sale.StartsAt) {
		revealed = hex.EncodeToString(seed[:])
	}
	// Late entrants in arrival order, after the pre-start ones.
	slices.SortFunc(entrants, func(a, b flashgate.QueueEntrant) int {
		return int(lateNumber(a.Entry) - lateNumber(b.Entry))
	})
	args := make([]any, 0, 9+2*len(entrants))
	args = append(args, fence, m.Epoch, m.SeedSHA, sale.ChallengeMaxNumber, fairqueue.AdmitWindow(sale), revealed, m.K, m.E, m.Windows)
	for _, e := range entrants {
		args = append(args, e.User, e.Entry)
	}
	v, err := lua.QueueRestore.Run(ctx, l.rdb, lua.QueueRestoreKeys(sale.ID), args...).Int64Slice()
	if err != nil {
		return false, fmt.Errorf("restoring the queue: %w: %w", flashgate.ErrUnavailable, err)
	}
	if len(v) != 4 {
		return false, fmt.Errorf("restoring the queue: refused (%v)", v)
	}
	*run = queueRun{journalRead: true, journaled: m}
	l.log.Warn("fair queue restored from its journal", "sale", sale.ID, "epoch", m.Epoch, "pre_start_added", v[0],
		"late_added", v[1], "late_not_restored", v[2], "admitted", v[3])
	return true, nil
}

// lateNumber is the arrival number of a late entry ("l<n>"), 0 for a
// pre-start one.
func lateNumber(entry string) int64 {
	if !strings.HasPrefix(entry, "l") {
		return 0
	}
	n, _ := strconv.ParseInt(entry[1:], 10, 64)
	return n
}
