// Package archive archives the sales that ended and settled, and makes an
// archived sale live again when it is reopened.
package archive

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/buckets"
	"github.com/flashgate/flashgate/lua"
)

// Archiving. A sale that ended and settled is archived: the database marks
// it (sales.archived) and it leaves fg:sales, so that neither the leader's
// passes (scheduling, failover watch, re-sync and settlement, all of which
// list only live sales), the order sinks' polls nor the lookup of orders
// not yet stored spend anything on it; their cost follows the live sales,
// not every sale ever made. Its keys stay in Redis (but a fair queue's
// entrants, late list and windows, which go), so GET /api/sales/{id}
// and the admin figures answer as before; its orders are all rows, so order
// lookups, pay (of none: none is pending), expiry (of none) and refunds go
// to the database as for any stored order. A refund of an archived sale's
// order gives its units back to the closed sale's hash, which sells
// nothing; its release stays queued in the database until the sale is
// reopened (a re-sync delivers it then). Start reopens an archived sale:
// it is live again and in fg:sales before it opens (UnarchiveIfArchived).

// Store is the database as archiving uses it; the control plane's Store
// satisfies it.
type Store interface {
	Sale(ctx context.Context, id string) (flashgate.Sale, error)
	Figures(ctx context.Context, saleID string) (flashgate.SaleFigures, error)
	PendingReleases(ctx context.Context, saleID string, limit int) (queued []flashgate.Order, delivered int64, err error)
	ArchiveSale(ctx context.Context, id string) (bool, error)
	UnarchiveSale(ctx context.Context, id string) error
	// DrawFile reads a draw's file and whether its close finished
	// (flashgate.ErrNotFound before the close stored it).
	DrawFile(ctx context.Context, saleID string) (body []byte, done bool, err error)
}

// Archiver archives sales. Its methods are safe for concurrent use.
type Archiver struct {
	rdb   redis.UniversalClient
	store Store
	log   *slog.Logger
}

// New returns an Archiver.
func New(rdb redis.UniversalClient, store Store, log *slog.Logger) *Archiver {
	return &Archiver{rdb: rdb, store: store, log: log}
}

// State is what the settlement pass of a closed sale found.
type State int

const (
	Wait   State = iota // something is still to happen (orders unpaid, stream backlog, dead letters)
	Resync              // a re-sync has work to do first (releases to deliver, a difference to correct, a lost hash)
	Ready               // ended and settled: archive it
)

// Over reports whether a closed sale has ended for good: closed in the
// database and in Redis (its own hash and every bucket's, so no reserve can
// be taken), every stream empty (the sinks trim what they commit and never
// remove a pending entry, so every order is a row), no dead letter waiting
// for a replay, no order pending payment (expiry would still move it), no
// release queued for delivery, Redis' booked equal to the live rows'
// units, for a fair sale every queue entry journaled, and for a draw every
// entry change journaled, no hold left for its read path and its close
// finished.
func (s *Archiver) Over(ctx context.Context, sale flashgate.Sale) (State, error) {
	if sale.State != flashgate.StateClosed {
		return Wait, nil
	}
	if sale.Draw() {
		// A draw stopped before or during its close: archived, it leaves
		// the leader's listing, so a close not run never runs and one cut
		// short is never run again, and the entrants' holds stay on their
		// cards.
		_, done, err := s.store.DrawFile(ctx, sale.ID)
		switch {
		case errors.Is(err, flashgate.ErrNotFound):
			return Wait, nil
		case err != nil:
			return Wait, fmt.Errorf("reading the draw: %w", err)
		case !done:
			return Wait, nil
		}
	}
	fig, err := s.store.Figures(ctx, sale.ID)
	if err != nil {
		return Wait, fmt.Errorf("reading figures: %w", err)
	}
	if fig.PendingPayment > 0 {
		return Wait, nil
	}
	queued, _, err := s.store.PendingReleases(ctx, sale.ID, 1)
	if err != nil {
		return Wait, fmt.Errorf("reading pending releases: %w", err)
	}
	// Every hash tag of the sale: its own and, bucketed, each bucket's.
	tags := []string{sale.ID}
	if sale.Bucketed() {
		tags = append(tags, buckets.Layout(sale).Tags()...)
	}
	hs := make([]*redis.SliceCmd, len(tags))
	streams := make([]*redis.IntCmd, len(tags))
	dead := make([]*redis.IntCmd, len(tags))
	pipe := s.rdb.Pipeline()
	for i, t := range tags {
		hs[i] = pipe.HMGet(ctx, lua.SaleKey(t), lua.FieldTotal, lua.FieldClosed, lua.FieldBooked)
		streams[i] = pipe.XLen(ctx, lua.OrdersKey(t))
		dead[i] = pipe.XLen(ctx, lua.DeadKey(t))
	}
	// A fair queue's entries not yet journaled would go with the archive's
	// delete: the leader journals a closed sale's last entries first.
	var journal *redis.IntCmd
	if sale.Fair() {
		journal = pipe.XLen(ctx, lua.QueueJournalKey(sale.ID))
	}
	// A draw's entry changes not yet journaled, or holds its read path
	// has still to look at (authorised after the close, a withdrawal's
	// not released): archived, the leader's journal flush and read path
	// would never reach them, and a hold would stay on the buyer's card.
	var drawJournal, drawChecks *redis.IntCmd
	if sale.Draw() {
		drawJournal = pipe.XLen(ctx, lua.DrawJournalKey(sale.ID))
		drawChecks = pipe.ZCard(ctx, lua.DrawCheckKey(sale.ID))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return Wait, fmt.Errorf("reading the sale in redis: %w: %w", flashgate.ErrUnavailable, err)
	}
	if journal != nil && journal.Val() > 0 {
		return Wait, nil
	}
	if drawJournal != nil && (drawJournal.Val() > 0 || drawChecks.Val() > 0) {
		return Wait, nil
	}
	var booked int64
	missing := false
	for i := range tags {
		v := hs[i].Val()
		if len(v) != 3 || v[0] == nil {
			missing = true
			continue
		}
		if closed, _ := v[1].(string); closed != "1" {
			return Wait, nil // not closed in Redis yet: the re-sync's state follows the row
		}
		if streams[i].Val() > 0 || dead[i].Val() > 0 {
			return Wait, nil
		}
		if i > 0 || !sale.Bucketed() { // a bucketed sale's own booked stays 0
			booked += lua.Int(v[2])
		}
	}
	if missing || len(queued) > 0 || booked != fig.LiveUnits {
		return Resync, nil
	}
	return Ready, nil
}

// Archive marks the sale archived in the database, takes it and its
// buckets out of fg:sales, and then checks again: a sale reopened since it
// was checked (and perhaps closed again, with orders taken meanwhile) is
// no longer archived, or no longer over, and goes back into fg:sales. The
// update is conditional on the closed state, so a reopened sale is never
// marked; setState clears a mark that landed between its read and its
// update (UnarchiveIfArchived), and its UPDATE comes before its SADD, so
// whichever of the two SADDs and this SREM comes last, a live sale ends in
// fg:sales. It reports whether the sale is archived (then the caller
// forgets it), which it may be with an error: a fair sale's queue keys not
// deleted.
func (s *Archiver) Archive(ctx context.Context, sale flashgate.Sale) (archived bool, err error) {
	ok, err := s.store.ArchiveSale(ctx, sale.ID)
	if err != nil {
		return false, err
	}
	if !ok {
		return false, nil // reopened, or archived by another pass
	}
	members := saleMembers(sale)
	if err := s.rdb.SRem(ctx, lua.SalesKey(), members...).Err(); err != nil {
		// Archived all the same: an extra member of fg:sales costs the
		// sinks one poll a second, nothing else.
		return false, fmt.Errorf("leaving fg:sales: %w: %w", flashgate.ErrUnavailable, err)
	}
	row, err := s.store.Sale(ctx, sale.ID)
	st := Wait
	if err == nil && row.Archived {
		st, err = s.Over(ctx, row)
	}
	if err != nil || st != Ready {
		// Not over after all (or not known): live again.
		if uerr := s.store.UnarchiveSale(ctx, sale.ID); uerr != nil {
			err = errors.Join(err, uerr)
		}
		if jerr := s.rdb.SAdd(ctx, lua.SalesKey(), members...).Err(); jerr != nil {
			err = errors.Join(err, jerr)
		}
		if err == nil {
			err = errors.New("the sale was reopened while it was archived; it stays live")
		}
		return false, fmt.Errorf("archiving: %w", err)
	}
	if sale.Fair() {
		// The queue's entrants, late list, windows and journal stream go
		// (about 90 bytes an entrant; the database keeps the journal); the sale hash keeps the queue's published fields (the
		// seed and its SHA-256, the frontiers). Proof-of-work markers expire
		// on their own.
		if err := s.rdb.Del(ctx, lua.QueueKey(sale.ID), lua.QueueLateKey(sale.ID), lua.QueueWindowsKey(sale.ID), lua.QueueJournalKey(sale.ID)).Err(); err != nil {
			return true, fmt.Errorf("archived, but deleting the queue's keys: %w: %w", flashgate.ErrUnavailable, err)
		}
	}
	return true, nil
}

// saleMembers are the sale's members of fg:sales: its id and, bucketed,
// its buckets' tags.
func saleMembers(sale flashgate.Sale) []any {
	members := []any{sale.ID}
	if sale.Bucketed() {
		for _, t := range buckets.Layout(sale).Tags() {
			members = append(members, t)
		}
	}
	return members
}

// UnarchiveIfArchived makes a sale that setState is opening live again if
// it is archived: it reads the row again after setState's update, since
// the leader may have archived the sale between setState's first read and
// its update (after which it no longer can: it archives closed rows only).
func (s *Archiver) UnarchiveIfArchived(ctx context.Context, id string) error {
	sale, err := s.store.Sale(ctx, id)
	if err != nil {
		return fmt.Errorf("reading sale: %w", err)
	}
	if !sale.Archived {
		return nil
	}
	return s.unarchive(ctx, sale)
}

// unarchive makes an archived sale live again before it is reopened: the
// database forgets the mark, then the sale joins fg:sales (so the sinks
// drain every order it takes once it opens; and a concurrent archive's
// SREM, which comes before its own re-check of the mark, cannot have the
// last word).
func (s *Archiver) unarchive(ctx context.Context, sale flashgate.Sale) error {
	if err := s.store.UnarchiveSale(ctx, sale.ID); err != nil {
		return fmt.Errorf("reopening an archived sale: %w", err)
	}
	if err := s.rdb.SAdd(ctx, lua.SalesKey(), saleMembers(sale)...).Err(); err != nil {
		return fmt.Errorf("reopening an archived sale: %w: %w", flashgate.ErrUnavailable, err)
	}
	s.log.Info("archived sale made live again", "sale", sale.ID)
	return nil
}
