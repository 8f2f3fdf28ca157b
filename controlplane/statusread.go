package controlplane

import (
	"context"

	"github.com/flashgate/flashgate/controlplane/salestatus"
)

// Status is a sale's live figures, the body of GET /admin/sales/{id}
// (controlplane/salestatus reads them).
type Status = salestatus.Status

// VariantStatus is one variant's live figures in GET /admin/sales/{id}.
type VariantStatus = salestatus.VariantStatus

// PauseStatus says why an open sale is paused (controlplane/failover).
type PauseStatus = salestatus.PauseStatus

// Settlement is the end-of-sale comparison of Redis and the database.
type Settlement = salestatus.Settlement

// SaleStatus reports a sale's live figures from Redis and the database.
func (s *Service) SaleStatus(ctx context.Context, id string) (Status, error) {
	return s.statusReader().Read(ctx, id)
}

// statusReader reads sales' live figures through s's clients.
func (s *Service) statusReader() salestatus.Reader {
	return salestatus.Reader{Redis: s.rdb, Store: s.store, Buckets: s.buckets, Queues: s.queues, Paused: s.failover.PauseStatus}
}
