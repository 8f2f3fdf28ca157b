package controlplane

import (
	"context"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/queueleader"
)

// The fair queues' wiring: the leader side lives in controlplane/queueleader,
// the rules it shares with the gateway in fairqueue.

// QueueStatus is a fair queue's figures for GET /admin/sales/{id}.
type QueueStatus = queueleader.Status

// DeriveQueueSeedSecret is the seed secret used when
// Config.QueueSeedSecret is empty (queueleader.DeriveSeedSecret).
func DeriveQueueSeedSecret(adminToken string) []byte { return queueleader.DeriveSeedSecret(adminToken) }

// newQueueLeader is the fair queues' leader of a Service being built.
func newQueueLeader(s *Service, cfg Config) *queueleader.Leader {
	seed := cfg.QueueSeedSecret
	if len(seed) == 0 {
		seed = DeriveQueueSeedSecret(cfg.AdminToken)
	}
	return queueleader.New(queueleader.Config{
		Redis: s.rdb, Store: s.store, Clock: s.clock, Logger: s.log,
		Backlog: cfg.QueueBacklog, Latency: cfg.QueueLatency, SeedSecret: seed, Detach: restoreContext,
	})
}

// queueTick runs one step of every fair sale's queue among the live sales
// the tick read; the leader calls it every tick.
func (s *Service) queueTick(ctx context.Context, sales []flashgate.Sale) {
	s.queues.Tick(ctx, sales, s.fence.Load())
}

// QueueStep moves one fair sale's queue on (queueleader.Leader.Step). The
// leader loop steps every queue each tick with its lease's fencing token;
// tests call it with their clock and a token of their own.
func (s *Service) QueueStep(ctx context.Context, sale flashgate.Sale, fence int64) error {
	return s.queues.Step(ctx, sale, fence)
}
