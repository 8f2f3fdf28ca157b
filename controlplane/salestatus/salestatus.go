// Package salestatus owns a sale's live figures, the body of GET
// /admin/sales/{id}: what Redis counts (the sale's hash, its buckets', its
// variants'), what the database counts, and the settlement of the two once
// the sale is closed. It reads; it changes nothing in Redis or the
// database, and may not import the control plane's root (which reads
// through it) nor the rooms that write (orders, resync, failover).
package salestatus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/buckets"
	"github.com/flashgate/flashgate/controlplane/internal/salehash"
	"github.com/flashgate/flashgate/controlplane/queueleader"
	"github.com/flashgate/flashgate/lua"
)

// Store is what Read reads of the database.
type Store interface {
	Sale(ctx context.Context, id string) (flashgate.Sale, error)
	Figures(ctx context.Context, saleID string) (flashgate.SaleFigures, error)
	VariantFigures(ctx context.Context, saleID string) (flashgate.SaleFigures, map[string]flashgate.SaleFigures, error)
}

// Folder adds a bucketed sale's buckets into its figures
// (*buckets.Keeper).
type Folder interface {
	Fold(ctx context.Context, sale flashgate.Sale, rf *salehash.Figures) ([]buckets.Status, error)
}

// Queues reports a fair queue's figures (*queueleader.Leader).
type Queues interface {
	Status(ctx context.Context, id string) (*queueleader.Status, error)
}

// Reader reads sales' live figures.
type Reader struct {
	Redis   redis.UniversalClient
	Store   Store
	Buckets Folder
	Queues  Queues
	// Paused, when not nil, says why an open sale is paused (the root's
	// failover watch owns the pauses); nil reports none.
	Paused func(ctx context.Context, sale flashgate.Sale) (*PauseStatus, error)
}

// PauseStatus says why an open sale is paused: the "paused" object of GET
// /admin/sales/{id}, absent while it sells.
type PauseStatus struct {
	// Since is when the leading control plane's failover watch first saw
	// it paused, and Seconds how long ago; both absent on a control plane
	// that does not lead (the leader's watch owns the pause).
	Since   *time.Time `json:"since,omitempty"`
	Seconds float64    `json:"seconds,omitempty"`
	// Reason is where its recovery stands.
	Reason string `json:"reason"`
}

// Status is a sale's live figures, the body of GET /admin/sales/{id}.
type Status struct {
	ID    string              `json:"id"`
	Name  string              `json:"name"`
	State flashgate.SaleState `json:"state"`
	Total int64               `json:"total"`
	// Booked is the units held by live orders, as Redis counts them.
	Booked int64 `json:"booked"`
	// Admitted is the requests the gateways let through (the access field).
	Admitted int64 `json:"admitted"`
	// Remaining is Total - Booked.
	Remaining int64 `json:"remaining"`
	// Orders are the database's counts by status.
	Orders flashgate.SaleFigures `json:"orders"`
	// StreamBacklog is the reserved orders not yet in the database.
	StreamBacklog int64 `json:"stream_backlog"`
	// Rejected is the requests the gateways turned away.
	Rejected int64 `json:"rejected"`
	// Reserved is the units ever reserved in Redis (monotonic).
	Reserved int64 `json:"reserved"`
	// AdmissionCap is the gateways' cut-off for Admitted (the count field).
	AdmissionCap int64 `json:"admission_cap"`
	// Settlement compares Redis with the database once a sale is closed.
	Settlement *Settlement `json:"settlement,omitempty"`
	// Buckets is the number of buckets of a bucketed sale (absent: one);
	// BucketSalts their hash tags' salts and BucketFigures each bucket's
	// figures, which Booked, Reserved and StreamBacklog add up.
	Buckets       int              `json:"buckets,omitempty"`
	BucketSalts   []int            `json:"bucket_salts,omitempty"`
	BucketFigures []buckets.Status `json:"bucket_figures,omitempty"`
	// Archived is set once the sale ended and settled (controlplane/archive).
	Archived bool `json:"archived,omitempty"`
	// Queue is a fair queue's figures (controlplane/queueleader); absent first come.
	Queue *queueleader.Status `json:"queue,omitempty"`
	// Draw is a draw sale's window and entries (ReadDraw); absent for
	// other sales.
	Draw *DrawStatus `json:"draw,omitempty"`
	// Variants are each variant's figures, in the sale's order, for a sale
	// sold in several; Total, Booked and Reserved are their sums.
	Variants []VariantStatus `json:"variants,omitempty"`
	// Paused says why an open sale is paused (Reader.Paused); absent while
	// it sells.
	Paused *PauseStatus `json:"paused,omitempty"`
}

// VariantStatus is one variant's live figures in GET /admin/sales/{id}.
type VariantStatus struct {
	ID    string `json:"id"`
	Name  string `json:"name"`
	Total int64  `json:"total"`
	// Booked and Reserved are the variant's, as Redis counts them.
	Booked   int64 `json:"booked"`
	Reserved int64 `json:"reserved"`
	// Remaining is Total - Booked, never below 0.
	Remaining int64 `json:"remaining"`
	// Orders are the database's counts of the variant's orders by status,
	// from the same snapshot as the sale's.
	Orders flashgate.SaleFigures `json:"orders"`
	// Settlement is the variant's share of the sale's, once it is closed:
	// its booked in Redis against its live units in the database. The
	// stream's backlog is not counted per variant, so Difference is
	// final once the sale's settlement is settled.
	Settlement *Settlement `json:"settlement,omitempty"`
}

// Settlement is the end-of-sale comparison of Redis and the database.
type Settlement struct {
	// Settled is true once the stream backlog has drained, so the figures
	// below are final until orders are cancelled, expired or refunded.
	Settled bool `json:"settled"`
	// RedisBooked is booked in Redis; DBLiveUnits the units of live rows.
	RedisBooked int64 `json:"redis_booked"`
	DBLiveUnits int64 `json:"db_live_units"`
	// Difference is RedisBooked - DBLiveUnits - StreamBacklog units; a
	// settled sale should show 0 (the re-sync loop corrects any other value).
	Difference int64 `json:"difference"`
}

// Read reports a sale's live figures from Redis and the database.
func (s Reader) Read(ctx context.Context, id string) (Status, error) {
	if !flashgate.ValidSaleID(id) {
		return Status{}, fmt.Errorf("sale %q: %w", id, flashgate.ErrNotFound)
	}
	sale, err := s.Store.Sale(ctx, id)
	if err != nil {
		return Status{}, fmt.Errorf("reading sale: %w", err)
	}
	// Redis first, then the database: a sink commits an order before it
	// removes its stream entry, so a stream read empty here means every
	// order it held is in the database read next (the other order could
	// report an empty backlog with figures from before the last commit).
	rf, err := RedisFigures(ctx, s.Redis, id)
	if err != nil {
		return Status{}, err
	}
	// Stock lives in the buckets of a bucketed sale; admission in its own hash.
	bfig, err := s.Buckets.Fold(ctx, sale, &rf)
	if err != nil {
		return Status{}, err
	}
	var (
		vs  []VariantStatus
		fig flashgate.SaleFigures
	)
	if sale.HasVariants() {
		if vs, err = Variants(ctx, s.Redis, sale); err != nil {
			return Status{}, err
		}
		var per map[string]flashgate.SaleFigures
		if fig, per, err = s.Store.VariantFigures(ctx, id); err != nil {
			return Status{}, fmt.Errorf("reading figures: %w", err)
		}
		for i := range vs {
			vs[i].Orders = per[vs[i].ID]
		}
	} else if fig, err = s.Store.Figures(ctx, id); err != nil {
		return Status{}, fmt.Errorf("reading figures: %w", err)
	}
	st := Status{
		ID:            sale.ID,
		Name:          sale.Name,
		State:         sale.State,
		Total:         sale.Total,
		Booked:        rf.Booked,
		Admitted:      rf.Access,
		Remaining:     sale.Total - rf.Booked,
		Orders:        fig,
		StreamBacklog: rf.Backlog,
		Rejected:      rf.Rejected,
		Reserved:      rf.Reserved,
		AdmissionCap:  rf.Count,
		Buckets:       sale.Buckets,
		BucketSalts:   sale.BucketSalts,
		BucketFigures: bfig,
		Archived:      sale.Archived,
		Variants:      vs,
	}
	if st.Remaining < 0 {
		st.Remaining = 0
	}
	if st.State == flashgate.StateOpen && st.Remaining == 0 {
		st.State = flashgate.StateSoldOut
	}
	if sale.State == flashgate.StateClosed {
		st.Settlement = Settle(rf, fig)
		for i := range st.Variants {
			v := &st.Variants[i]
			v.Settlement = &Settlement{Settled: rf.Backlog == 0, RedisBooked: v.Booked, DBLiveUnits: v.Orders.LiveUnits,
				Difference: v.Booked - v.Orders.LiveUnits}
		}
	}
	if sale.Fair() {
		if st.Queue, err = s.Queues.Status(ctx, id); err != nil {
			return Status{}, err
		}
	}
	if st.Draw, err = ReadDraw(ctx, s.Redis, sale); err != nil {
		return Status{}, err
	}
	if s.Paused != nil {
		if st.Paused, err = s.Paused(ctx, sale); err != nil {
			return Status{}, err
		}
	}
	return st, nil
}

// RedisFigures reads a sale's hash and stream length in one round trip.
func RedisFigures(ctx context.Context, rdb redis.UniversalClient, id string) (salehash.Figures, error) {
	rfs, err := salehash.Read(ctx, rdb, []string{id})
	if err != nil {
		return salehash.Figures{}, err
	}
	return rfs[0], nil
}

// Variants reads each variant's booked and reserved from the sale's
// hash in one HMGET; a bucketed sale's are the sums over its buckets, read
// in one pipeline.
func Variants(ctx context.Context, rdb redis.UniversalClient, sale flashgate.Sale) ([]VariantStatus, error) {
	fields := make([]string, 0, 2*len(sale.Variants))
	for _, v := range sale.Variants {
		fields = append(fields, lua.VariantField(v.ID, lua.FieldBooked), lua.VariantField(v.ID, lua.FieldReserved))
	}
	tags := buckets.Layout(sale).Tags()
	cmds := make([]*redis.SliceCmd, len(tags))
	pipe := rdb.Pipeline()
	for b, t := range tags {
		cmds[b] = pipe.HMGet(ctx, lua.SaleKey(t), fields...)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("reading variants: %w: %w", flashgate.ErrUnavailable, err)
	}
	out := make([]VariantStatus, len(sale.Variants))
	for i, v := range sale.Variants {
		out[i] = VariantStatus{ID: v.ID, Name: v.Name, Total: v.Total}
	}
	for _, cmd := range cmds {
		h, ok := lua.ReadHash(fields, cmd.Val())
		if !ok {
			return nil, fmt.Errorf("reading variants: %w: %d values for %d fields", flashgate.ErrUnavailable, len(cmd.Val()), len(fields))
		}
		for i, v := range sale.Variants {
			out[i].Booked += h.Int(lua.VariantField(v.ID, lua.FieldBooked))
			out[i].Reserved += h.Int(lua.VariantField(v.ID, lua.FieldReserved))
		}
	}
	for i := range out {
		out[i].Remaining = max(out[i].Total-out[i].Booked, 0)
	}
	return out, nil
}

// Settle compares a closed sale's Redis figures with the database's.
func Settle(rf salehash.Figures, fig flashgate.SaleFigures) *Settlement {
	return &Settlement{
		Settled:     rf.Backlog == 0,
		RedisBooked: rf.Booked,
		DBLiveUnits: fig.LiveUnits,
		Difference:  rf.Booked - fig.LiveUnits - rf.Backlog,
	}
}
