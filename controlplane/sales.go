package controlplane

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/lua"
)

// Limits of CreateSale's validation.
const (
	maxNameLen    = 200
	maxTotal      = 1_000_000
	maxAdmitRatio = 100
)

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

// ResyncFigures are a sale's Redis figures before or after a re-sync.
type ResyncFigures struct {
	Total        int64 `json:"total"`
	Booked       int64 `json:"booked"`
	Reserved     int64 `json:"reserved"`
	Remaining    int64 `json:"remaining"`
	Admitted     int64 `json:"admitted"`
	AdmissionCap int64 `json:"admission_cap"`
	// Missing is set in the "before" figures when the sale's hash was gone
	// from Redis and the re-sync rebuilt it.
	Missing bool `json:"missing,omitempty"`
}

func validateSale(s flashgate.Sale) error {
	switch {
	case !flashgate.ValidSaleID(s.ID):
		return &flashgate.FieldError{Field: "id", Reason: "1-64 characters of [A-Za-z0-9_-]"}
	case s.Name == "" || utf8.RuneCountInString(s.Name) > maxNameLen:
		return &flashgate.FieldError{Field: "name", Reason: "1-200 characters"}
	case s.PriceCents < 0:
		return &flashgate.FieldError{Field: "price_cents", Reason: "negative"}
	case s.Total < 1 || s.Total > maxTotal:
		return &flashgate.FieldError{Field: "total", Reason: "outside 1..1000000"}
	case s.AdmitRatio != 0 && (s.AdmitRatio < 1 || s.AdmitRatio > maxAdmitRatio) || s.AdmitRatio != s.AdmitRatio:
		return &flashgate.FieldError{Field: "admit_ratio", Reason: "0 or 1..100"}
	case s.PerUser < 0 || s.PerUser > s.Total:
		return &flashgate.FieldError{Field: "per_user", Reason: "outside 0..total"}
	case s.StartsAt != nil && s.EndsAt != nil && !s.EndsAt.After(*s.StartsAt):
		return &flashgate.FieldError{Field: "ends_at", Reason: "not after starts_at"}
	}
	return nil
}

func perUser(s flashgate.Sale) int64 {
	if s.PerUser <= 0 {
		return 1
	}
	return s.PerUser
}

func admitRatio(s flashgate.Sale) float64 {
	if s.AdmitRatio <= 0 {
		return flashgate.DefaultAdmitRatio
	}
	return s.AdmitRatio
}

// CreateSale validates s, stores it as upcoming and prepares its Redis hash
// (closed, empty). An existing id is flashgate.ErrExists. The scheduler opens
// it at StartsAt; without StartsAt it waits for Start.
func (s *Service) CreateSale(ctx context.Context, sale flashgate.Sale) (flashgate.Sale, error) {
	if err := validateSale(sale); err != nil {
		return flashgate.Sale{}, err
	}
	sale.State = flashgate.StateUpcoming
	if sale.StartsAt != nil {
		t := sale.StartsAt.UTC()
		sale.StartsAt = &t
	}
	if sale.EndsAt != nil {
		t := sale.EndsAt.UTC()
		sale.EndsAt = &t
	}
	if err := s.store.CreateSale(ctx, sale); err != nil {
		return flashgate.Sale{}, fmt.Errorf("creating sale: %w", err)
	}
	if err := s.prepare(ctx, sale); err != nil {
		// The row is the record; the re-sync loop rebuilds the hash later.
		s.log.Error("preparing sale in redis", "sale", sale.ID, "err", err)
	}
	return sale, nil
}

func (s *Service) prepare(ctx context.Context, sale flashgate.Sale) error {
	return lua.Prepare.Run(ctx, s.rdb, []string{lua.SaleKey(sale.ID), lua.SalesKey()},
		sale.ID, sale.Total, flashgate.AdmitCap(sale.Total, sale.AdmitRatio), perUser(sale), sale.PriceCents).Err()
}

// Start opens a sale now.
func (s *Service) Start(ctx context.Context, id string) error {
	return s.setState(ctx, id, flashgate.StateOpen)
}

// Stop closes a sale now.
func (s *Service) Stop(ctx context.Context, id string) error {
	return s.setState(ctx, id, flashgate.StateClosed)
}

func (s *Service) setState(ctx context.Context, id string, st flashgate.SaleState) error {
	if !flashgate.ValidSaleID(id) {
		return fmt.Errorf("sale %q: %w", id, flashgate.ErrNotFound)
	}
	if _, err := s.store.Sale(ctx, id); err != nil {
		return fmt.Errorf("reading sale: %w", err)
	}
	if err := s.store.SetSaleState(ctx, id, st); err != nil {
		return fmt.Errorf("setting sale state: %w", err)
	}
	arg := "open"
	if st == flashgate.StateClosed {
		arg = "close"
	}
	n, err := lua.SetState.Run(ctx, s.rdb, []string{lua.SaleKey(id)}, arg).Int()
	if err != nil {
		return fmt.Errorf("setting sale state in redis: %w: %w", flashgate.ErrUnavailable, err)
	}
	if n == -1 {
		// Redis lost the sale: rebuild it from the row, which now has st.
		if _, _, err := s.Resync(ctx, id); err != nil {
			return err
		}
	}
	if st == flashgate.StateClosed {
		s.mu.Lock()
		delete(s.settled, id)
		s.mu.Unlock()
	}
	s.log.Info("sale state set", "sale", id, "state", st)
	return nil
}

// Sales lists the sales in the database.
func (s *Service) Sales(ctx context.Context) ([]flashgate.Sale, error) {
	list, err := s.store.Sales(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing sales: %w", err)
	}
	if list == nil {
		list = []flashgate.Sale{}
	}
	return list, nil
}

// SaleStatus reports a sale's live figures from Redis and the database.
func (s *Service) SaleStatus(ctx context.Context, id string) (Status, error) {
	if !flashgate.ValidSaleID(id) {
		return Status{}, fmt.Errorf("sale %q: %w", id, flashgate.ErrNotFound)
	}
	sale, err := s.store.Sale(ctx, id)
	if err != nil {
		return Status{}, fmt.Errorf("reading sale: %w", err)
	}
	fig, err := s.store.Figures(ctx, id)
	if err != nil {
		return Status{}, fmt.Errorf("reading figures: %w", err)
	}
	rf, err := s.redisFigures(ctx, id)
	if err != nil {
		return Status{}, err
	}
	st := Status{
		ID:            sale.ID,
		Name:          sale.Name,
		State:         sale.State,
		Total:         sale.Total,
		Booked:        rf.booked,
		Admitted:      rf.access,
		Remaining:     sale.Total - rf.booked,
		Orders:        fig,
		StreamBacklog: rf.backlog,
		Rejected:      rf.rejected,
		Reserved:      rf.reserved,
		AdmissionCap:  rf.count,
	}
	if st.Remaining < 0 {
		st.Remaining = 0
	}
	if st.State == flashgate.StateOpen && st.Remaining == 0 {
		st.State = flashgate.StateSoldOut
	}
	if sale.State == flashgate.StateClosed {
		st.Settlement = settlement(rf, fig)
	}
	return st, nil
}

func settlement(rf redisFigures, fig flashgate.SaleFigures) *Settlement {
	return &Settlement{
		Settled:     rf.backlog == 0,
		RedisBooked: rf.booked,
		DBLiveUnits: fig.LiveUnits,
		Difference:  rf.booked - fig.LiveUnits - rf.backlog,
	}
}

type redisFigures struct {
	exists                                             bool
	booked, reserved, count, access, rejected, backlog int64
}

// redisFigures reads a sale's hash and stream length in one round trip.
func (s *Service) redisFigures(ctx context.Context, id string) (redisFigures, error) {
	pipe := s.rdb.Pipeline()
	h := pipe.HMGet(ctx, lua.SaleKey(id), lua.FieldBooked, lua.FieldReserved, lua.FieldCount, lua.FieldAccess, lua.FieldRejected, lua.FieldTotal)
	x := pipe.XLen(ctx, lua.OrdersKey(id))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return redisFigures{}, fmt.Errorf("reading redis figures: %w: %w", flashgate.ErrUnavailable, err)
	}
	v := h.Val()
	num := func(i int) int64 {
		if i >= len(v) || v[i] == nil {
			return 0
		}
		str, _ := v[i].(string)
		n, _ := strconv.ParseInt(str, 10, 64)
		return n
	}
	return redisFigures{
		exists:   len(v) > 5 && v[5] != nil,
		booked:   num(0),
		reserved: num(1),
		count:    num(2),
		access:   num(3),
		rejected: num(4),
		backlog:  x.Val(),
	}, nil
}

// Resync sets a sale's stock in Redis from one database snapshot (see
// lua/resync.lua) and raises the admission cap while units remain. It
// rebuilds the sale's hash when Redis lost it.
func (s *Service) Resync(ctx context.Context, id string) (before, after ResyncFigures, err error) {
	defer func() { s.ops.resyncFailed(err) }() // opsmetrics.go
	if !flashgate.ValidSaleID(id) {
		return before, after, fmt.Errorf("sale %q: %w", id, flashgate.ErrNotFound)
	}
	sale, err := s.store.Sale(ctx, id)
	if err != nil {
		return before, after, fmt.Errorf("reading sale: %w", err)
	}
	fig, err := s.store.Figures(ctx, id)
	if err != nil {
		return before, after, fmt.Errorf("reading figures: %w", err)
	}
	// Released rows are read after the snapshot: a row released in between
	// is counted live (booked errs high), and joining the released set keeps
	// its late Release from subtracting it a second time.
	released, err := s.store.ReleasedOrders(ctx, id)
	if err != nil {
		return before, after, fmt.Errorf("reading released orders: %w", err)
	}
	keys := []string{lua.SaleKey(id), lua.BuyersKey(id), lua.ReleasedKey(id), lua.SalesKey()}
	resync := func(live []flashgate.Order, withLive string) ([]int64, error) {
		args := make([]any, 0, 10+2*len(released)+2*len(live))
		args = append(args, id, fig.LiveUnits, fig.PersistedUnits, sale.Total, perUser(sale), sale.PriceCents,
			string(sale.State), strconv.FormatFloat(admitRatio(sale), 'f', -1, 64), len(released), withLive)
		for _, o := range released {
			args = append(args, o.UserID, o.ID)
		}
		for _, o := range live {
			args = append(args, o.UserID, o.ID)
		}
		return lua.Resync.Run(ctx, s.rdb, keys, args...).Int64Slice()
	}
	v, err := resync(nil, "0")
	if err == nil && len(v) == 1 && v[0] == -1 {
		// Redis lost the sale, or is older than the database: rebuild it,
		// buyers included, from the live rows.
		live, lerr := s.store.LiveOrders(ctx, id)
		if lerr != nil {
			return before, after, fmt.Errorf("reading live orders: %w", lerr)
		}
		v, err = resync(live, "1")
	}
	if err != nil {
		return before, after, fmt.Errorf("re-syncing: %w: %w", flashgate.ErrUnavailable, err)
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
