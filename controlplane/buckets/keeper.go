// Package buckets owns the machinery of a bucketed sale in Redis: the
// placement of its buckets (salts, shares), their state and figures, the
// re-sync and restore of each bucket from the database, the ledger of
// moves between buckets and the rebalancing it records, the recovery of a
// bucket whose primary failed over, and the settlement of stale spill
// claims. The control plane's leader decides when each runs (controlplane's
// loops); every write carries the fencing token of its context
// (controlplane/internal/fencing).
package buckets

import (
	"context"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
)

// Store is the system of record as the bucket machinery reads it;
// *sqldb.DB satisfies it (and FigureStore).
type Store interface {
	Order(ctx context.Context, id string) (flashgate.Order, error)
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
}

// FigureStore is what the re-sync of a bucketed sale needs beyond Store:
// the figures of each bucket from one snapshot. *sqldb.DB satisfies it.
type FigureStore interface {
	BucketFigures(ctx context.Context, saleID string, n int) ([]flashgate.SaleFigures, error)
	// BucketVariantFigures are BucketFigures with, per bucket, each
	// variant's figures by id: a sale sold in variants.
	BucketVariantFigures(ctx context.Context, saleID string, n int) ([]flashgate.SaleFigures, []map[string]flashgate.SaleFigures, error)
}

// Config configures a Keeper. Redis and Store are required; every other
// zero value works.
type Config struct {
	// Redis is the primary (or cluster). Required.
	Redis redis.UniversalClient
	// Store is the database. Required.
	Store Store
	// Logger receives the reports of rebuilds, moves and settlements;
	// default slog.Default().
	Logger *slog.Logger
	// Clock tells the age of spill claims; default flashgate.SystemClock.
	Clock flashgate.Clock
	// SpillClaimAge is how old a spill claim must be before SettleClaims
	// settles it; default 5s (see controlplane.Config.SpillClaimAge).
	SpillClaimAge time.Duration
}

// Keeper runs the bucket machinery of every bucketed sale. Its methods
// are safe for concurrent use; the caller serialises the re-syncs, moves
// and rebuilds of one sale.
type Keeper struct {
	rdb           redis.UniversalClient
	store         Store
	log           *slog.Logger
	clock         flashgate.Clock
	spillClaimAge time.Duration
}

// New returns a Keeper of cfg with the defaults filled in.
func New(cfg Config) *Keeper {
	k := &Keeper{rdb: cfg.Redis, store: cfg.Store, log: cfg.Logger, clock: cfg.Clock, spillClaimAge: cfg.SpillClaimAge}
	if k.log == nil {
		k.log = slog.Default()
	}
	if k.clock == nil {
		k.clock = flashgate.SystemClock{}
	}
	if k.spillClaimAge <= 0 {
		k.spillClaimAge = 5 * time.Second
	}
	return k
}
