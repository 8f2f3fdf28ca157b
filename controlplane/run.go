package controlplane

import (
	"context"
	"time"

	"github.com/flashgate/flashgate"
)

// Run runs the lifecycle loops until ctx ends, and returns nil then. Every
// TickEvery it renews or takes the leader lease; while it leads it opens
// sales at starts_at, closes them at ends_at, expires unpaid orders, and
// every ResyncEvery re-syncs every upcoming, open and not yet settled closed
// sale. Errors are logged, never fatal.
func (s *Service) Run(ctx context.Context) error {
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
// ran (wall time, not the sale clock).
func (s *Service) tick(ctx context.Context, lastResync *time.Time) {
	tctx, cancel := context.WithTimeout(ctx, s.leaderTTL)
	defer cancel()
	leading, err := s.lead(tctx)
	if err != nil {
		s.log.Warn("leader lease", "err", err)
		return
	}
	if !leading {
		return
	}
	s.watchFailover(tctx) // see failover.go
	s.schedule(tctx)
	if _, err := s.ExpireDue(tctx); err != nil {
		s.log.Warn("expiry", "err", err)
	}
	if time.Since(*lastResync) >= s.resyncEvery {
		*lastResync = time.Now()
		s.resyncAll(tctx)
	}
}

// schedule opens upcoming sales whose start time came and closes sales whose
// end time came.
func (s *Service) schedule(ctx context.Context) {
	sales, err := s.store.Sales(ctx)
	if err != nil {
		s.log.Warn("scheduler: listing sales", "err", err)
		return
	}
	now := s.clock.Now()
	for _, sale := range sales {
		ended := sale.EndsAt != nil && !now.Before(*sale.EndsAt)
		switch {
		case sale.State != flashgate.StateClosed && ended:
			if err := s.Stop(ctx, sale.ID); err != nil {
				s.log.Warn("scheduler: closing sale", "sale", sale.ID, "err", err)
			} else {
				s.log.Info("scheduler closed sale at ends_at", "sale", sale.ID)
			}
		case sale.State == flashgate.StateUpcoming && sale.StartsAt != nil && !now.Before(*sale.StartsAt):
			if err := s.Start(ctx, sale.ID); err != nil {
				s.log.Warn("scheduler: opening sale", "sale", sale.ID, "err", err)
			} else {
				s.log.Info("scheduler opened sale at starts_at", "sale", sale.ID)
			}
		}
	}
}

// resyncAll re-syncs every sale still in play and settles closed ones.
func (s *Service) resyncAll(ctx context.Context) {
	sales, err := s.store.Sales(ctx)
	if err != nil {
		s.log.Warn("re-sync: listing sales", "err", err)
		return
	}
	for _, sale := range sales {
		if sale.State == flashgate.StateClosed {
			s.settle(ctx, sale)
			continue
		}
		s.mu.Lock()
		delete(s.settled, sale.ID) // reopened: settle again at the next close
		s.mu.Unlock()
		if _, _, err := s.Resync(ctx, sale.ID); err != nil {
			s.log.Warn("re-sync", "sale", sale.ID, "err", err)
		}
	}
}

// settle reports, once per close, the difference between Redis and the
// database for a closed sale whose stream has drained, then re-syncs it.
// Until the backlog drains it only re-syncs.
func (s *Service) settle(ctx context.Context, sale flashgate.Sale) {
	s.mu.Lock()
	done := s.settled[sale.ID]
	s.mu.Unlock()
	if done {
		return
	}
	rf, err := s.redisFigures(ctx, sale.ID)
	if err != nil {
		s.log.Warn("settlement", "sale", sale.ID, "err", err)
		return
	}
	if rf.backlog == 0 {
		fig, err := s.store.Figures(ctx, sale.ID)
		if err != nil {
			s.log.Warn("settlement", "sale", sale.ID, "err", err)
			return
		}
		st := settlement(rf, fig)
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
	if _, _, err := s.Resync(ctx, sale.ID); err != nil {
		s.log.Warn("re-sync", "sale", sale.ID, "err", err)
	}
}
