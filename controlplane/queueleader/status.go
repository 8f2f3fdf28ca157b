package queueleader

import (
	"context"
	"fmt"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/fairqueue"
	"github.com/flashgate/flashgate/lua"
)

// Status is a fair queue's figures for GET /admin/sales/{id}.
type Status struct {
	Open             bool   `json:"open"`
	Started          bool   `json:"started"`
	Entrants         int64  `json:"entrants"`
	PrequeueEntrants int64  `json:"prequeue_entrants"`
	AdmittedPosition int64  `json:"admitted_position"`
	ExpiredPosition  int64  `json:"expired_position"`
	RatePerMinute    int64  `json:"rate_per_minute"`
	ETASeconds       *int64 `json:"eta_seconds"`
	MaxNumber        int64  `json:"challenge_maxnumber"`
	SeedSHA256       string `json:"seed_sha256,omitempty"`
}

// Status reads a fair sale's queue figures; ETASeconds is the time the
// last entrant waits at the recent rate.
func (l *Leader) Status(ctx context.Context, id string) (*Status, error) {
	vals, err := l.rdb.HMGet(ctx, lua.SaleKey(id), fairqueue.Fields...).Result()
	if err != nil {
		return nil, fmt.Errorf("reading the queue: %w: %w", flashgate.ErrUnavailable, err)
	}
	v, _ := fairqueue.Read(vals)
	q := &Status{Open: v.Open, Started: v.Started, Entrants: v.Entrants(), PrequeueEntrants: v.Prequeued,
		AdmittedPosition: v.Admitted, ExpiredPosition: v.Expired, RatePerMinute: v.Rate, MaxNumber: v.MaxNumber, SeedSHA256: v.SeedSHA}
	if q.RatePerMinute > 0 {
		eta := max(q.Entrants-q.AdmittedPosition, 0) * 60 / q.RatePerMinute
		q.ETASeconds = &eta
	}
	return q, nil
}
