package controlplane

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/internal/fencing"
	"github.com/flashgate/flashgate/controlplane/internal/salehash"
	"github.com/flashgate/flashgate/lua"
)

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
// Only a rebuild reads every row, a page at a time (Restore).
//
// Every write carries ctx's fencing token, or one of its own (fencedCall):
// a pass of a control plane that lost its lease stops at its first write
// after a newer token's, with flashgate.ErrFenced.
func (s *Service) Resync(ctx context.Context, id string) (before, after ResyncFigures, err error) {
	defer func() { s.ops.resyncFailed(err) }() // opsmetrics.go
	if !flashgate.ValidSaleID(id) {
		return before, after, fmt.Errorf("sale %q: %w", id, flashgate.ErrNotFound)
	}
	err = s.fencedCall(ctx, func(ctx context.Context) error {
		var e error
		before, after, e = s.resync(ctx, id)
		return e
	})
	return before, after, err
}

func (s *Service) resync(ctx context.Context, id string) (before, after ResyncFigures, err error) {
	s.resyncMu.Lock()
	defer s.resyncMu.Unlock()
	sale, err := s.store.Sale(ctx, id)
	if err != nil {
		return before, after, fmt.Errorf("reading sale: %w", err)
	}
	if sale.Bucketed() {
		return s.resyncBucketed(ctx, sale)
	}
	// The sale joins fg:sales before its keys can be rebuilt: a sale with
	// orders is never missing from the set the order sinks drain. An
	// archived sale takes no orders (closed, and reopened only through
	// unarchive), so it stays out.
	if err := s.joinSalesUnlessArchived(ctx, sale, nil); err != nil {
		return before, after, fmt.Errorf("re-syncing: %w: %w", flashgate.ErrUnavailable, err)
	}
	// The snapshot comes first: every order released in it is then in the
	// pending releases read below, or was delivered by an earlier pass.
	fig, err := s.store.Figures(ctx, id)
	if err != nil {
		return before, after, fmt.Errorf("reading figures: %w", err)
	}
	delivered, err := s.deliverReleases(ctx, id)
	if err != nil {
		return before, after, err
	}
	keys := lua.SaleKeys(id)
	tok := fencing.Of(ctx)
	resync := func(restored string) ([]int64, error) {
		return lua.Resync.Run(ctx, s.rdb, keys, fig.LiveUnits, fig.PersistedUnits, sale.Total, salehash.PerUser(sale), sale.PriceCents,
			string(sale.State), strconv.FormatFloat(salehash.AdmitRatio(sale), 'f', -1, 64), delivered, restored, tok, sale.Queue).Int64Slice()
	}
	v, err := resync("0")
	if err == nil && len(v) == 1 && v[0] == lua.ResyncRestore {
		// Redis lost the sale, or is older than the database: restore its
		// released set and buyers from every row, then rebuild its stock.
		// A big sale takes longer than a pass may: the restore keeps going
		// past the pass's deadline (not past a cancellation).
		rctx, cancel := restoreContext(ctx)
		defer cancel()
		ctx = rctx
		if err := s.restore(ctx, id); err != nil {
			return before, after, err
		}
		v, err = resync("1")
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
	before = ResyncFigures{Total: total, Booked: v[1], Reserved: v[2], AdmissionCap: v[3], Admitted: v[4], Remaining: max(total-v[1], 0), Missing: v[0] == 1}
	after = ResyncFigures{Total: total, Booked: v[5], Reserved: v[6], AdmissionCap: v[7], Admitted: v[8], Remaining: max(total-v[5], 0)}
	if before.Missing {
		before.Total, before.Remaining = 0, 0
		s.log.Warn("sale rebuilt in redis from the database", "sale", id, "booked", after.Booked, "admission_cap", after.AdmissionCap)
	}
	s.metrics.resyncs.Inc()
	return before, after, nil
}

// deliverReleases gives Redis the releases the database queued for a sale
// and no pass delivered yet (ReleaseBatch: idempotent per order, so a
// release its Releaser already made changes nothing), and acknowledges them
// in the database. It returns the database's count of delivered releases.
// It stops without error when Redis refuses a batch (no sale, or behind the
// database): the Resync call that follows then asks for a restore.
func (s *Service) deliverReleases(ctx context.Context, id string) (delivered int64, err error) {
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
		args := make([]any, 0, 1+3*len(pending))
		ids := make([]string, len(pending))
		args = append(args, strconv.FormatInt(base, 10)+":"+strconv.FormatInt(tok, 10))
		for i, o := range pending {
			args = append(args, o.ID, o.UserID, o.Quantity)
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

// restoreContext is ctx without its deadline, bounded by restoreTimeout
// instead, and still ended when ctx is cancelled (the leader's term ended:
// see lead). It keeps ctx's values, the fencing token among them, and ends
// with the leadership term that token belongs to, even after ctx's deadline.
func restoreContext(ctx context.Context) (context.Context, context.CancelFunc) {
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

// restore puts every released and live row of a sale back into its
// released set and buyers hash, a page at a time, released rows first.
func (s *Service) restore(ctx context.Context, id string) error {
	keys := lua.RestoreKeys(id)
	tok := fencing.Of(ctx)
	for _, st := range []flashgate.OrderStatus{flashgate.StatusCancelled, flashgate.StatusExpired, flashgate.StatusRefunded,
		flashgate.StatusPendingPayment, flashgate.StatusPaid} {
		released := !st.Live()
		after := ""
		for {
			page, err := s.store.OrdersPage(ctx, id, st, after, salehash.ReleaseChunk)
			if err != nil {
				return fmt.Errorf("reading orders to restore: %w", err)
			}
			if len(page) == 0 {
				break
			}
			args := make([]any, 0, 2+2*len(page))
			args = append(args, tok)
			if released {
				args = append(args, len(page))
			} else {
				args = append(args, 0)
			}
			for _, o := range page {
				args = append(args, o.UserID, o.ID)
			}
			n, err := lua.Restore.Run(ctx, s.rdb, keys, args...).Int()
			if err != nil {
				return fmt.Errorf("restoring buyers: %w: %w", flashgate.ErrUnavailable, err)
			}
			if n == lua.RestoreFenced {
				return fencing.Err("restoring buyers", tok)
			}
			if len(page) < salehash.ReleaseChunk {
				break
			}
			after = page[len(page)-1].ID
		}
	}
	return nil
}
