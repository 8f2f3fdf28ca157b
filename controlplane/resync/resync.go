// Package resync sets a sale's stock in Redis from the database: the
// leader's re-sync pass, the delivery of queued releases and the restore of
// a sale Redis lost (bucketed sales through controlplane/buckets). Its
// writes carry the fencing token of their context (internal/fencing).
package resync

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/buckets"
	"github.com/flashgate/flashgate/controlplane/internal/fencing"
	"github.com/flashgate/flashgate/controlplane/internal/salehash"
	"github.com/flashgate/flashgate/lua"
)

// Figures are a sale's Redis figures before or after a re-sync.
type Figures = salehash.ResyncFigures

// Store is the database as a re-sync reads it; the control plane's Store
// satisfies it.
type Store interface {
	Sale(ctx context.Context, id string) (flashgate.Sale, error)
	Figures(ctx context.Context, saleID string) (flashgate.SaleFigures, error)
	// VariantFigures are the figures of the whole sale and of each variant
	// from one snapshot (for a sale with variants).
	VariantFigures(ctx context.Context, saleID string) (flashgate.SaleFigures, map[string]flashgate.SaleFigures, error)
	OrdersPage(ctx context.Context, saleID string, st flashgate.OrderStatus, afterID string, limit int) ([]flashgate.Order, error)
	PendingReleases(ctx context.Context, saleID string, limit int) (queued []flashgate.Order, delivered int64, err error)
	ReleasesDelivered(ctx context.Context, saleID string, orderIDs []string, fence int64) (delivered int64, err error)
	// PendingRetakes are the orders whose late payment's retake the
	// database records as pending (written before the retake in Redis,
	// not yet honoured or dropped).
	PendingRetakes(ctx context.Context, saleID string) ([]flashgate.Order, error)
	// HonouredRetakes are the orders whose late payment's retake an
	// honour step recorded, while they are still paid.
	HonouredRetakes(ctx context.Context, saleID string) ([]flashgate.Order, error)
	// Snapshot runs read with a context in which the reads of
	// PendingRetakes and of the figures (Figures, VariantFigures, and a
	// bucketed sale's) see one database snapshot.
	Snapshot(ctx context.Context, read func(ctx context.Context) error) error
	// OwedRetakes are a sale's orders whose honoured retake a refund
	// marked as owed back (flashgate.PaymentStep.OweRetake) and no give-back
	// has been recorded for yet; RetakeGivenBack records one.
	OwedRetakes(ctx context.Context, saleID string) ([]flashgate.Order, error)
	RetakeGivenBack(ctx context.Context, orderID string) error
	// EachDrawEntry calls fn with each of a draw sale's entries, by id,
	// from one query (the rebuild of a draw sale).
	EachDrawEntry(ctx context.Context, saleID string, fn func(flashgate.DrawEntry) error) error
	// DrawCloseBegun reports whether a draw sale's close recorded its
	// read of the rows (sqldb.DB.DrawClosing): the rebuild shuts the
	// entry window of such a sale (lua.FieldDrawShut).
	DrawCloseBegun(ctx context.Context, saleID string) (bool, error)
}

// Syncer re-syncs sales. Its methods are safe for concurrent use.
type Syncer struct {
	rdb     redis.UniversalClient
	store   Store
	buckets *buckets.Keeper
	log     *slog.Logger
	resyncs prometheus.Counter // counts the re-syncs done
	// mu serialises re-syncs (and the moves and rebuilds of buckets) in
	// this process, so that two of them (the loop and an admin call) never
	// deliver the same releases at once.
	mu sync.Mutex
}

// New returns a Syncer; resyncs counts the re-syncs it does.
func New(rdb redis.UniversalClient, store Store, keeper *buckets.Keeper, log *slog.Logger, resyncs prometheus.Counter) *Syncer {
	return &Syncer{rdb: rdb, store: store, buckets: keeper, log: log, resyncs: resyncs}
}

// Lock serialises a move or rebuild of buckets with the re-syncs.
func (s *Syncer) Lock() { s.mu.Lock() }

// Unlock undoes Lock.
func (s *Syncer) Unlock() { s.mu.Unlock() }

// deliverBudget bounds the time one re-sync pass spends delivering a sale's
// pending releases (after a storm of expiries); the rest waits for the next
// pass, which goes on from there.
const deliverBudget = time.Second

// Resync sets a sale's stock in Redis from one database snapshot (see
// lua/resync.lua) and raises the admission cap while units remain. It
// rebuilds the sale's hash when Redis lost it.
//
// A pass costs O(changes since the last pass): the figures are counters
// kept with the rows, and only the releases the database queued since the
// last pass go to Redis (ReleaseBatch, then Resync with O(1) arguments).
// Only a rebuild reads every row, a page at a time (restore).
//
// Every write carries ctx's fencing token: a pass of a control plane that
// lost its lease stops at its first write after a newer token's, with
// flashgate.ErrFenced.
func (s *Syncer) Resync(ctx context.Context, id string) (before, after Figures, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sale, err := s.store.Sale(ctx, id)
	if err != nil {
		return before, after, fmt.Errorf("reading sale: %w", err)
	}
	if sale.Bucketed() {
		return s.Bucketed(ctx, sale)
	}
	// The sale joins fg:sales before its keys can be rebuilt: a sale with
	// orders is never missing from the set the order sinks drain. An
	// archived sale takes no orders (closed, and reopened only through
	// unarchive), so it stays out.
	if err := s.joinSalesUnlessArchived(ctx, sale, nil); err != nil {
		return before, after, fmt.Errorf("re-syncing: %w: %w", flashgate.ErrUnavailable, err)
	}
	// The hash's releases counter comes before the snapshot: a release that
	// reaches Redis after it changes the counter by the script, which then
	// never sets booked above the hash's own (the release may be missing
	// from the snapshot; see lua/resync.lua's ARGV[13]). So does its
	// rebuild mark: a sale rebuilt after this read (by another pass, from
	// its own snapshot) is reopened by a later pass, whose snapshot counts
	// every row stored before Redis lost the sale, not by this one
	// (explorer seed 20261678: two rebuilds at once, each from a snapshot
	// taken before an order's row was stored and Redis lost the sale; the
	// second one reopened the sale with that order's unit free).
	marks, err := salehash.ResyncMarks(ctx, s.rdb, []string{id})
	if err != nil {
		return before, after, fmt.Errorf("re-syncing: %w", err)
	}
	// The pending retakes (held if the pass rebuilds the sale) and the
	// figures are read in one database snapshot (Store.Snapshot): a late
	// payment's honour falls before both reads (counted by the figures,
	// not pending) or after both (pending, held by a rebuild, not counted).
	// Read before the snapshot, an honour between was counted twice (a
	// unit hidden until the next rebuild, which may never come); read
	// after it, in neither (a concurrent rebuild reopened the sale without
	// it: explorer seed 1849). The pending read is one indexed query,
	// empty but for late payments under way. Every order released in the
	// snapshot is in the pending releases read below, or was delivered by
	// an earlier pass.
	var pending []flashgate.Order
	var fig flashgate.SaleFigures
	var per map[string]flashgate.SaleFigures
	err = s.store.Snapshot(ctx, func(ctx context.Context) error {
		var err error
		if pending, err = s.store.PendingRetakes(ctx, id); err != nil {
			return fmt.Errorf("reading pending retakes: %w", err)
		}
		if fig, per, err = s.figures(ctx, sale); err != nil {
			return fmt.Errorf("reading figures: %w", err)
		}
		return nil
	})
	if err != nil {
		return before, after, err
	}
	delivered, err := s.deliverReleases(ctx, id)
	if err != nil {
		return before, after, err
	}
	if err := salehash.DeliverOwed(ctx, s.rdb, s.store, sale); err != nil {
		return before, after, err
	}
	keys := lua.SaleKeys(id)
	tok := fencing.Of(ctx)
	resync := func(restored string, held []flashgate.Order) ([]int64, error) {
		spec := ""
		if sale.HasVariants() {
			spec = salehash.VariantSpec(sale.Variants, nil, per)
		}
		args := []any{fig.LiveUnits, fig.PersistedUnits, sale.Total, salehash.PerUser(sale), sale.PriceCents,
			string(sale.State), strconv.FormatFloat(salehash.AdmitRatio(sale), 'f', -1, 64), delivered, restored, tok, lua.DrawQueueArg(sale), spec, marks[0]}
		k, args := salehash.HeldArgs(id, keys, args, held)
		return lua.Resync.Run(ctx, s.rdb, k, args...).Int64Slice()
	}
	v, err := resync("0", nil)
	if err == nil && len(v) == 1 && v[0] == lua.ResyncRestore {
		// Redis lost the sale, or is older than the database: restore its
		// released set and buyers from every row, then rebuild its stock.
		// A big sale takes longer than a pass may: the restore keeps going
		// past the pass's deadline (not past a cancellation).
		rctx, cancel := RestoreContext(ctx)
		defer cancel()
		ctx = rctx
		// A draw sale's restore is marked first (lua.DrawRestoreMark),
		// before the orders' pages and the rows are read, and the mark
		// must still be there once the restore's id is (checkDrawMark):
		// Redis lost the sale again in between otherwise, the pages with
		// it, and a journal's flush could no longer tell that the rows
		// were read before its write.
		var drawMark string
		if sale.Draw() {
			if drawMark, err = markDrawRestore(ctx, s.rdb, id, fencing.Of(ctx)); err != nil {
				return before, after, err
			}
		}
		var restoring *salehash.Restoring
		if restoring, err = s.Restore(ctx, id); err != nil {
			return before, after, err
		}
		if sale.Draw() {
			if err := s.restoreDraw(ctx, sale, drawMark); err != nil {
				return before, after, err
			}
			// An empty page after the entries' pages: the page count
			// lua.Restored checks then covers them too (replication is
			// ordered), so a failover to a replica that lacks one of them
			// lacks this page and refuses the rest of the rebuild.
			if err := s.restorePage(ctx, id, restoring, []any{0}); err != nil {
				return before, after, err
			}
		}
		var restored string
		if restored, err = salehash.MarkRestored(ctx, s.rdb, id, restoring); err != nil {
			return before, after, err
		}
		if sale.Draw() {
			if err := checkDrawMark(ctx, s.rdb, id, drawMark); err != nil {
				return before, after, err
			}
		}
		// The pending retakes again, after the restore: a row written
		// after the first read may belong to a retake the lost Redis made
		// (explorer seed 102466: the rebuild held nothing, the pass that
		// reopened the sale sold the unit again before the honour). A row
		// written after the restore began is no such retake: Redis had
		// lost the sale (the retake answered "no sale" or, once rebuilt
		// and paused, "retry", taking nothing). Of the first read's, those
		// honoured since are held too (the snapshot may have missed the
		// honour), those refunded since are not (their units were given
		// back: holding them hid a unit until the next rebuild).
		var late, honoured []flashgate.Order
		if late, err = s.store.PendingRetakes(ctx, id); err != nil {
			return before, after, fmt.Errorf("reading pending retakes: %w", err)
		}
		if honoured, err = s.store.HonouredRetakes(ctx, id); err != nil {
			return before, after, fmt.Errorf("reading honoured retakes: %w", err)
		}
		// The final script holds them and counts their units as live and
		// persisted in the rebuild's figures, in one step: it sets
		// reserved := P + held and booked := L + held, so they stay taken
		// (reserved and not yet persisted) until the honour step's row
		// counts them, or the refund's unretake gives them back. It holds
		// no order whose refusal an unretake recorded (its units given
		// back; explorer seed 1200), and a hold is never left uncounted
		// (a rebuild stopped between a hold and its count let the refund
		// give back a unit no hash had taken: a reviewer's window).
		held := salehash.RetakesToHold(pending, late, honoured)
		v, err = resync(restored, held)
		if err == nil && len(v) == 1 && v[0] == lua.ResyncRestore {
			// Redis lost the restored pages since (a second loss): a hash
			// rebuilt over them would let a release still queued give a
			// unit back twice.
			return before, after, salehash.ErrLostAgain("sale " + id)
		}
	}
	if err != nil {
		return before, after, fmt.Errorf("re-syncing: %w: %w", flashgate.ErrUnavailable, err)
	}
	if len(v) == 1 && v[0] == lua.ResyncFenced {
		return before, after, fencing.Err("re-syncing sale "+id, tok)
	}
	if len(v) != 10 {
		return before, after, fmt.Errorf("re-syncing: script returned %d values", len(v))
	}
	total := v[9]
	before = Figures{Total: total, Booked: v[1], Reserved: v[2], AdmissionCap: v[3], Admitted: v[4], Remaining: max(total-v[1], 0), Missing: v[0] == 1}
	after = Figures{Total: total, Booked: v[5], Reserved: v[6], AdmissionCap: v[7], Admitted: v[8], Remaining: max(total-v[5], 0)}
	if before.Missing {
		before.Total, before.Remaining = 0, 0
		s.log.Warn("sale rebuilt in redis from the database", "sale", id, "booked", after.Booked, "admission_cap", after.AdmissionCap)
	}
	s.resyncs.Inc()
	return before, after, nil
}

// figures reads a sale's figures from one database snapshot and, for a sale
// with variants, each variant's from the same snapshot (nil for a sale of
// one stock).
func (s *Syncer) figures(ctx context.Context, sale flashgate.Sale) (flashgate.SaleFigures, map[string]flashgate.SaleFigures, error) {
	if !sale.HasVariants() {
		fig, err := s.store.Figures(ctx, sale.ID)
		return fig, nil, err
	}
	fig, per, err := s.store.VariantFigures(ctx, sale.ID)
	if err != nil {
		return fig, nil, err
	}
	if per == nil {
		per = map[string]flashgate.SaleFigures{}
	}
	return fig, per, nil
}

// deliverReleases gives Redis the releases the database queued for a sale
// and no pass delivered yet (ReleaseBatch: idempotent per order, so a
// release its Releaser already made changes nothing), and acknowledges them
// in the database. It returns the database's count of delivered releases.
// It stops without error when Redis refuses a batch (no sale, or behind the
// database): the Resync call that follows then asks for a restore.
func (s *Syncer) deliverReleases(ctx context.Context, id string) (delivered int64, err error) {
	keys := lua.ReleaseKeys(id)
	tok := fencing.Of(ctx)
	deadline := time.Now().Add(deliverBudget)
	for {
		pending, base, err := s.store.PendingReleases(ctx, id, salehash.ReleaseChunk)
		if err != nil {
			return 0, fmt.Errorf("reading pending releases: %w", err)
		}
		if len(pending) == 0 {
			return base, nil
		}
		args := make([]any, 0, 1+4*len(pending))
		ids := make([]string, len(pending))
		args = append(args, strconv.FormatInt(base, 10)+":"+strconv.FormatInt(tok, 10))
		for i, o := range pending {
			args = append(args, o.ID, o.UserID, o.Quantity, o.Variant)
			ids[i] = o.ID
		}
		res, err := lua.ReleaseBatch.Run(ctx, s.rdb, keys, args...).Int64Slice()
		if err != nil {
			return 0, fmt.Errorf("delivering releases: %w: %w", flashgate.ErrUnavailable, err)
		}
		if len(res) == 3 && res[0] == lua.ReleaseBatchFenced {
			return 0, fencing.Err("delivering releases", tok)
		}
		if len(res) != 3 || res[0] != lua.ReleaseBatchDone {
			return base, nil
		}
		if delivered, err = s.store.ReleasesDelivered(ctx, id, ids, tok); err != nil {
			return 0, fmt.Errorf("acknowledging releases: %w", err)
		}
		if len(pending) < salehash.ReleaseChunk {
			return delivered, nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("re-syncing sale %s: %w", id, salehash.ErrReleaseBacklog)
		}
	}
}

// restoreTimeout bounds a restore of a sale from every row of it.
const restoreTimeout = 2 * time.Minute

// RestoreContext is ctx without its deadline, bounded by restoreTimeout
// instead, and still ended when ctx is cancelled (the leader's term ended:
// see lead). It keeps ctx's values, the fencing token among them, and ends
// with the leadership term that token belongs to, even after ctx's deadline.
func RestoreContext(ctx context.Context) (context.Context, context.CancelFunc) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), restoreTimeout)
	stop := context.AfterFunc(ctx, func() {
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			cancel()
		}
	})
	stopTerm := func() bool { return true }
	if t := fencing.TermOf(ctx); t != nil {
		stopTerm = context.AfterFunc(t, cancel)
	}
	return rctx, func() { stop(); stopTerm(); cancel() }
}

// Restore puts every released and live row of a sale back into its
// released set and buyers hash, a page at a time, released rows first, and
// returns the restore (salehash.BeginRestore: its id and this rebuild's
// page count), opened after the first
// page's read and before its write (with no page, at the end), so that it
// raises the hash's fence where the first page did before (a rebuild of
// an older token that ends before it is not fenced by it). Every page
// carries the id and is refused once the sale hash holds another or none
// (Redis lost the sale again, the pages before with it): Restore then
// returns the error of salehash.ErrLostAgain; so is a page when the hash
// counts fewer of this rebuild's pages than it wrote (a failover to a
// lagging replica lost them). The caller's salehash.MarkRestored carries
// it too.
func (s *Syncer) Restore(ctx context.Context, id string) (*salehash.Restoring, error) {
	var restoring *salehash.Restoring
	begin := func() error {
		if restoring != nil {
			return nil
		}
		var err error
		restoring, err = salehash.BeginRestore(ctx, s.rdb, id)
		return err
	}
	for _, st := range []flashgate.OrderStatus{flashgate.StatusCancelled, flashgate.StatusExpired, flashgate.StatusRefunded,
		flashgate.StatusPendingPayment, flashgate.StatusPaid} {
		released := !st.Live()
		after := ""
		for {
			page, err := s.store.OrdersPage(ctx, id, st, after, salehash.ReleaseChunk)
			if err != nil {
				return nil, fmt.Errorf("reading orders to restore: %w", err)
			}
			if len(page) == 0 {
				break
			}
			if err := begin(); err != nil {
				return nil, err
			}
			args := make([]any, 0, 1+2*len(page))
			if released {
				args = append(args, len(page))
			} else {
				args = append(args, 0)
			}
			for _, o := range page {
				args = append(args, o.UserID, o.ID)
			}
			if err := s.restorePage(ctx, id, restoring, args); err != nil {
				return nil, err
			}
			if len(page) < salehash.ReleaseChunk {
				break
			}
			after = page[len(page)-1].ID
		}
	}
	if err := begin(); err != nil {
		return nil, err
	}
	return restoring, nil
}

// restorePage writes one page of restoring into sale id (lua.Restore),
// rest being its arguments after the token and the page's ARGV[2].
func (s *Syncer) restorePage(ctx context.Context, id string, restoring *salehash.Restoring, rest []any) error {
	tok := fencing.Of(ctx)
	args := append([]any{tok, restoring.Page()}, rest...)
	n, err := lua.Restore.Run(ctx, s.rdb, lua.RestoreKeys(id), args...).Int()
	if err != nil {
		return fmt.Errorf("restoring buyers: %w: %w", flashgate.ErrUnavailable, err)
	}
	switch n {
	case lua.RestoreFenced:
		return fencing.Err("restoring buyers", tok)
	case lua.RestoreLost:
		return salehash.ErrLostAgain("sale " + id)
	}
	return nil
}

// RestoreDraw puts a draw sale's entries back into Redis from every row of
// draw_entries, read in one query and sent a page at a time
// (lua.DrawRestore), before the rebuild's final Resync writes the sale
// hash: a buyer whose entry the database holds pending or entered is
// answered that entry by lua.DrawEnter, as before the loss, not entered a
// second time; the entries' holds go back to their records, and the holds
// of pending and withdrawn entries onto the read path's list, due at once.
// The last call raises the sale's counts of entries made to the rows' (it
// knows them only then). Entries whose changes were still in the journal
// Redis lost come back as the database last stored them.
//
// Before it reads the rows it marks the sale hash with a fresh id of this
// restore (lua.DrawRestoreMark): a journal's flush that read the journal
// before Redis lost the sale and writes the rows after this read (a flush
// of another process, or of this one: the flush's lock is not taken here)
// finds the mark changed at its trim and puts its rows into Redis itself
// (drawjournal.Flush); the pages sent after it never take an entry back.
//
// Every page carries the mark's id and is refused once the sale hash holds
// another or none (Redis lost the sale again, the mark with it): then it
// returns the error of salehash.ErrLostAgain, and the next pass rebuilds
// the sale.
func (s *Syncer) RestoreDraw(ctx context.Context, sale flashgate.Sale) error {
	mark, err := markDrawRestore(ctx, s.rdb, sale.ID, fencing.Of(ctx))
	if err != nil {
		return err
	}
	return s.restoreDraw(ctx, sale, mark)
}

// restoreDraw is RestoreDraw after its mark, mark.
func (s *Syncer) restoreDraw(ctx context.Context, sale flashgate.Sale, mark string) error {
	keys := lua.DrawRestoreKeys(sale.ID)
	tok := fencing.Of(ctx)
	var err error
	made := int64(0)
	perVariant := map[string]int64{}
	page := make([]flashgate.DrawEntry, 0, salehash.ReleaseChunk)
	// send sends the page; the last also sets the counts and, with shut,
	// shuts the entry window (a flag only raised, as the counts).
	send := func(last, shut bool) error {
		args := make([]any, 0, 8+2*len(perVariant)+6*len(page))
		args = append(args, tok, mark, 0)
		if last {
			pairs := 1 + len(perVariant)
			if shut {
				pairs++
			}
			args = append(args, pairs, lua.FieldDrawEntries, made)
			for v, n := range perVariant {
				args = append(args, lua.VariantField(v, lua.FieldDrawEntries), n)
			}
			if shut {
				args = append(args, lua.FieldDrawShut, 1)
			}
		} else {
			args = append(args, 0)
		}
		for _, e := range page {
			args = append(args, e.UserID, string(e.State), e.ID, e.Quantity, e.Variant, e.PaymentIntent)
		}
		page = page[:0]
		n, err := lua.DrawRestore.Run(ctx, s.rdb, keys, args...).Int()
		if err != nil {
			return fmt.Errorf("restoring draw entries: %w: %w", flashgate.ErrUnavailable, err)
		}
		switch n {
		case lua.DrawRestoreFenced:
			return fencing.Err("restoring draw entries", tok)
		case lua.DrawRestoreLost:
			return salehash.ErrLostAgain("the draw entries of sale " + sale.ID)
		}
		return nil
	}
	err = s.store.EachDrawEntry(ctx, sale.ID, func(e flashgate.DrawEntry) error {
		made++
		if e.Variant != "" {
			perVariant[e.Variant]++
		}
		page = append(page, e)
		if len(page) < salehash.ReleaseChunk {
			return nil
		}
		return send(false, false)
	})
	if err != nil {
		return fmt.Errorf("restoring draw entries of %s: %w", sale.ID, err)
	}
	// The close's shut (lua.FieldDrawShut) was lost with the sale: a
	// gateway whose clock is behind the leader's entered (or withdrew) an
	// entry on the rebuilt sale after the close had read the rows, the
	// entry entered out of the draw and its hold on the card for good. So
	// the last page shuts the window again once the close recorded its
	// read (sqldb.DB.DrawClosing), before the rebuild's final Resync lets
	// the entry scripts act; a close that records after this read shuts
	// the rebuilt sale itself after its record (drawclose.Closer.Close).
	shut, err := s.store.DrawCloseBegun(ctx, sale.ID)
	if err != nil {
		return fmt.Errorf("restoring draw entries of %s: %w", sale.ID, err)
	}
	return send(true, shut)
}

// markDrawRestore writes a fresh id into sale's lua.FieldDrawRestore
// under token tok (lua.DrawRestoreMark) and returns it.
func markDrawRestore(ctx context.Context, rdb redis.Scripter, sale string, tok int64) (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("marking the restore of draw entries: %w", err)
	}
	id := hex.EncodeToString(b[:])
	n, err := lua.DrawRestoreMark.Run(ctx, rdb, []string{lua.SaleKey(sale)}, tok, id).Int()
	if err != nil {
		return "", fmt.Errorf("marking the restore of draw entries: %w: %w", flashgate.ErrUnavailable, err)
	}
	if n == lua.DrawRestoreMarkFenced {
		return "", fencing.Err("marking the restore of draw entries", tok)
	}
	return id, nil
}

// checkDrawMark is the error of salehash.ErrLostAgain unless sale's
// lua.FieldDrawRestore is still mark, read after salehash.MarkRestored: a
// loss before that call took the mark (and the pages) and the call wrote
// the restore's id into an empty hash; a loss after this read takes the
// restore's id too, which the final Resync then misses.
func checkDrawMark(ctx context.Context, rdb redis.UniversalClient, sale, mark string) error {
	got, err := rdb.HGet(ctx, lua.SaleKey(sale), lua.FieldDrawRestore).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("reading the restore's mark: %w: %w", flashgate.ErrUnavailable, err)
	}
	if got != mark {
		return salehash.ErrLostAgain("the draw entries of sale " + sale)
	}
	return nil
}

// Bucketed is Resync for a bucketed sale: the sale and its bucket tags
// join the set the order sinks drain (unless archived), then every bucket
// is re-synced (buckets.Keeper.Resync). The caller holds the lock (Lock).
func (s *Syncer) Bucketed(ctx context.Context, sale flashgate.Sale) (before, after Figures, err error) {
	if err := s.joinSalesUnlessArchived(ctx, sale, buckets.Layout(sale).Tags()); err != nil {
		return before, after, fmt.Errorf("re-syncing: %w: %w", flashgate.ErrUnavailable, err)
	}
	if before, after, err = s.buckets.Resync(ctx, sale); err != nil {
		return before, after, err
	}
	s.resyncs.Inc()
	return before, after, nil
}

// joinSalesUnlessArchived is JoinSales for a re-sync: an archived sale
// takes no orders (it is closed, and reopened only through unarchive), so
// a re-sync of it (an admin's, or the rebuild of its hash) leaves it out of
// fg:sales.
func (s *Syncer) joinSalesUnlessArchived(ctx context.Context, sale flashgate.Sale, tags []string) error {
	if sale.Archived {
		return nil
	}
	return JoinSales(ctx, s.rdb, sale.ID, tags)
}

// JoinSales adds a sale and its bucket tags (none when unbucketed) to
// fg:sales, the set the order sinks drain, in one SADD.
func JoinSales(ctx context.Context, rdb redis.UniversalClient, id string, tags []string) error {
	members := make([]any, 0, 1+len(tags))
	members = append(members, id)
	for _, t := range tags {
		members = append(members, t)
	}
	return rdb.SAdd(ctx, lua.SalesKey(), members...).Err()
}
