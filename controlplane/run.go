package controlplane

import (
	"context"
	"errors"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/archive"
	"github.com/flashgate/flashgate/controlplane/internal/fencing"
	"github.com/flashgate/flashgate/controlplane/internal/salehash"
	"github.com/flashgate/flashgate/controlplane/salestatus"
)

// Run runs the lifecycle loops until ctx ends, and returns nil then. Every
// TickEvery it renews or takes the leader lease; while it leads it opens
// sales at starts_at, closes them at ends_at, expires unpaid orders, and
// every ResyncEvery re-syncs every upcoming, open and not yet settled closed
// sale, and archives the settled ones that are over (archive.go). Errors are
// logged, never fatal. Close ends it too (lifecycle.go); after Close it
// returns nil at once.
func (s *Service) Run(ctx context.Context) error {
	ctx, cancel := s.runContext(ctx)
	if ctx == nil {
		return nil
	}
	defer s.wg.Done()
	defer cancel()
	defer s.resign()
	tick := time.NewTicker(s.tickEvery)
	defer tick.Stop()
	var lastResync time.Time
	for {
		s.tick(ctx, &lastResync)
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// tick is one round of the loops; lastResync is when the last re-sync round
// ran (wall time, not the sale clock). Each loop runs under its own deadline
// (LeaderTTL), so that one slow loop (a storm of expiries) never leaves the
// next without time; expiry and deliveries also bound their own work. Every
// loop runs in the leadership term (lead): it stops when the term ends, and
// its writes carry the term's fencing token.
func (s *Service) tick(ctx context.Context, lastResync *time.Time) {
	tctx, ok := s.leadFor(ctx)
	if !ok {
		s.failover.Forget() // the leader's watch owns the pauses now
		return
	}
	ctx = tctx
	// One read of the live sales serves the failover watch, the scheduler
	// and the fair queues (archived sales are closed: nothing to run).
	lctx, cancel := context.WithTimeout(ctx, s.leaderTTL)
	sales, err := s.store.LiveSales(lctx)
	cancel()
	if err != nil {
		if ctx.Err() == nil { // not shutting down
			s.log.Warn("tick: listing sales", "err", err)
		}
	} else {
		lctx, cancel = context.WithTimeout(ctx, s.leaderTTL)
		s.failover.Watch(lctx, sales) // controlplane/failover
		cancel()
		lctx, cancel = context.WithTimeout(ctx, s.leaderTTL)
		s.schedule(lctx, sales)
		cancel()
		lctx, cancel = context.WithTimeout(ctx, s.leaderTTL)
		s.queueTick(lctx, sales) // queue.go
		cancel()
		lctx, cancel = context.WithTimeout(ctx, s.leaderTTL)
		s.drawTick(lctx, ctx, sales) // draws.go
		cancel()
		lctx, cancel = context.WithTimeout(ctx, s.leaderTTL)
		s.holdTick(lctx, sales) // drawholds.go
		cancel()
	}
	lctx, cancel = context.WithTimeout(ctx, s.leaderTTL)
	if _, err := s.ReconcilePayments(lctx); err != nil && ctx.Err() == nil { // payments.go
		s.log.Warn("payment reconciliation", "err", err)
	}
	cancel()
	lctx, cancel = context.WithTimeout(ctx, s.leaderTTL)
	if _, err := s.ExpireDue(lctx); err != nil && ctx.Err() == nil {
		s.loopFailed("expiry", err)
	}
	cancel()
	if time.Since(*lastResync) >= s.resyncEvery {
		*lastResync = time.Now()
		// Renew the lease first: the loops above may have taken a while.
		if tctx, ok := s.leadFor(ctx); ok {
			s.resyncAll(tctx)
		}
	}
}

// loopFailed logs the failure of one of the leader's loops. A write that a
// newer fencing token refused (an admin call's, taken while this term was
// live: fencedCall) is expected once after such a call, and the next
// renewal takes a newer token (refreshFence), so it is said at info; any
// other failure is a warning.
func (s *Service) loopFailed(loop string, err error) {
	if errors.Is(err, flashgate.ErrFenced) {
		s.log.Info(loop+": a newer fencing token refused this term's write; the next tick takes a newer one", "err", err)
		return
	}
	s.log.Warn(loop, "err", err)
}

// leadFor renews or takes the leader lease and reports whether this
// process leads, with the context of its term.
func (s *Service) leadFor(ctx context.Context) (context.Context, bool) {
	tctx, err := s.lead(ctx)
	if err != nil {
		if ctx.Err() == nil { // not shutting down
			s.log.Warn("leader lease", "err", err)
		}
		return nil, false
	}
	return tctx, tctx != nil
}

// schedule opens upcoming sales (of the live sales the tick read) whose
// start time came and closes sales whose end time came; it sets the state
// it moved a sale to in sales, for the loops after it.
func (s *Service) schedule(ctx context.Context, sales []flashgate.Sale) {
	now := s.clock.Now()
	for i, sale := range sales {
		ended := sale.EndsAt != nil && !now.Before(*sale.EndsAt)
		if ended && sale.State != flashgate.StateClosed && !s.drawFinished(ctx, sale) {
			continue // a draw's sale stays open until its close made the winners' orders
		}
		switch {
		case sale.State != flashgate.StateClosed && ended:
			if err := s.Stop(ctx, sale.ID); err != nil {
				s.log.Warn("scheduler: closing sale", "sale", sale.ID, "err", err)
			} else {
				sales[i].State = flashgate.StateClosed
				s.log.Info("scheduler closed sale at ends_at", "sale", sale.ID)
			}
		case sale.State == flashgate.StateUpcoming && sale.StartsAt != nil && !now.Before(*sale.StartsAt):
			if err := s.Start(ctx, sale.ID); err != nil {
				s.log.Warn("scheduler: opening sale", "sale", sale.ID, "err", err)
			} else {
				sales[i].State = flashgate.StateOpen
				s.log.Info("scheduler opened sale at starts_at", "sale", sale.ID)
			}
		}
	}
}

// resyncAll re-syncs every sale still in play and settles closed ones,
// each sale under its own deadline (LeaderTTL).
func (s *Service) resyncAll(ctx context.Context) {
	lctx, cancel := context.WithTimeout(ctx, s.leaderTTL)
	sales, err := s.store.LiveSales(lctx)
	cancel()
	if ctx.Err() != nil {
		return // shutting down
	}
	if err != nil {
		s.log.Warn("re-sync: listing sales", "err", err)
		return
	}
	for _, sale := range sales {
		if ctx.Err() != nil {
			return
		}
		sctx, cancel := context.WithTimeout(ctx, s.leaderTTL)
		if sale.State == flashgate.StateClosed {
			s.settle(sctx, sale)
			cancel()
			continue
		}
		s.mu.Lock()
		delete(s.settled, sale.ID) // reopened: settle again at the next close
		s.mu.Unlock()
		err := s.resyncOnly(sctx, sale.ID)
		if fence := fencing.Of(ctx); sale.Bucketed() && fence > 0 && ctx.Err() == nil {
			if _, rerr := s.Rebalance(sctx, sale.ID, fence); rerr != nil && ctx.Err() == nil {
				s.log.Warn("rebalancing buckets", "sale", sale.ID, "err", rerr)
			}
		}
		cancel()
		if ctx.Err() != nil {
			return // shutting down: an interrupted pass is no failure
		}
		s.logResync(sale.ID, err)
	}
}

func (s *Service) resyncOnly(ctx context.Context, id string) error {
	_, _, err := s.Resync(ctx, id)
	return err
}

// logResync logs a failed re-sync; a pass cut short by a backlog of
// releases is progress, not a failure, and a pass a newer fencing token
// refused (an admin call's or the failover watch's re-sync, which took a
// newer token while this term was live) is expected, as in loopFailed.
func (s *Service) logResync(id string, err error) {
	switch {
	case err == nil:
	case errors.Is(err, salehash.ErrReleaseBacklog):
		s.log.Info("re-sync: delivering a backlog of releases", "sale", id)
	case errors.Is(err, flashgate.ErrFenced):
		s.log.Info("re-sync: a newer fencing token refused this term's write; the next tick takes a newer one", "sale", id, "err", err)
	default:
		s.log.Warn("re-sync", "sale", id, "err", err)
	}
}

// settle reports, once per close, the difference between Redis and the
// database for a closed sale whose stream has drained, then re-syncs it.
// Until the backlog drains it only re-syncs; once reported, it archives the
// sale when it is over.
func (s *Service) settle(ctx context.Context, sale flashgate.Sale) {
	s.mu.Lock()
	done := s.settled[sale.ID]
	s.mu.Unlock()
	if done {
		s.archiveIfOver(ctx, sale)
		return
	}
	rf, err := salestatus.RedisFigures(ctx, s.rdb, sale.ID)
	if err == nil {
		_, err = s.buckets.Fold(ctx, sale, &rf)
	}
	if err != nil {
		s.log.Warn("settlement", "sale", sale.ID, "err", err)
		return
	}
	if rf.Backlog == 0 {
		fig, err := s.store.Figures(ctx, sale.ID)
		if err != nil {
			s.log.Warn("settlement", "sale", sale.ID, "err", err)
			return
		}
		st := salestatus.Settle(rf, fig)
		level := "settlement: redis and database agree"
		if st.Difference != 0 {
			level = "settlement: redis and database differ; re-sync corrects redis"
		}
		s.log.Info(level, "sale", sale.ID, "redis_booked", st.RedisBooked, "db_live_units", st.DBLiveUnits,
			"difference", st.Difference, "paid", fig.Paid, "pending_payment", fig.PendingPayment, "persisted", fig.Persisted)
		s.mu.Lock()
		s.settled[sale.ID] = true
		s.mu.Unlock()
	}
	s.logResync(sale.ID, s.resyncOnly(ctx, sale.ID))
}

// archiveIfOver archives a closed sale whose settlement was reported once
// it has ended for good (archive.Archiver.Over); when a re-sync has work to
// do first it runs one. It runs on the leader at each re-sync pass of the
// sale.
func (s *Service) archiveIfOver(ctx context.Context, sale flashgate.Sale) {
	st, err := s.archive.Over(ctx, sale)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("archiving: checking the sale", "sale", sale.ID, "err", err)
		}
		return
	}
	switch st {
	case archive.Wait:
		return
	case archive.Resync:
		s.logResync(sale.ID, s.resyncOnly(ctx, sale.ID))
		return
	}
	archived, err := s.archive.Archive(ctx, sale)
	if archived {
		s.mu.Lock()
		delete(s.settled, sale.ID)
		s.mu.Unlock()
		s.queues.Drop(sale.ID)
	}
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("archiving", "sale", sale.ID, "err", err)
		}
		return
	}
	s.log.Info("sale archived: ended and settled", "sale", sale.ID)
}
