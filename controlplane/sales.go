package controlplane

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/buckets"
	"github.com/flashgate/flashgate/controlplane/internal/fencing"
	"github.com/flashgate/flashgate/controlplane/internal/salehash"
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
	// Buckets is the number of buckets of a bucketed sale (absent: one);
	// BucketSalts their hash tags' salts and BucketFigures each bucket's
	// figures, which Booked, Reserved and StreamBacklog add up.
	Buckets       int            `json:"buckets,omitempty"`
	BucketSalts   []int          `json:"bucket_salts,omitempty"`
	BucketFigures []BucketStatus `json:"bucket_figures,omitempty"`
	// Archived is set once the sale ended and settled (archive.go).
	Archived bool `json:"archived,omitempty"`
	// Queue is a fair queue's figures (queue.go); absent first come.
	Queue *QueueStatus `json:"queue,omitempty"`
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
type ResyncFigures = salehash.ResyncFigures

// BucketStatus is one bucket's live figures in GET /admin/sales/{id}.
type BucketStatus = buckets.Status

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
	case s.Buckets < 0 || s.Buckets > flashgate.MaxBuckets:
		return &flashgate.FieldError{Field: "buckets", Reason: "outside 1..64"}
	case int64(s.Buckets) > s.Total:
		return &flashgate.FieldError{Field: "buckets", Reason: "more buckets than units"}
	case s.StartsAt != nil && s.EndsAt != nil && !s.EndsAt.After(*s.StartsAt):
		return &flashgate.FieldError{Field: "ends_at", Reason: "not after starts_at"}
	}
	return validateQueue(s) // queue.go
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
	sale.BucketSalts = nil
	if sale.Buckets <= 1 {
		sale.Buckets = 0
	} else {
		// The placement is fixed here, for the sale's life.
		sale.BucketSalts = s.buckets.ChooseSalts(ctx, sale.ID, sale.Buckets)
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

// prepare adds the sale (and, bucketed, its buckets) to fg:sales, then
// creates each bucket's hash with its share of the stock, then the sale's own
// hash (with the layout when bucketed): in that order, so that the order
// sinks know every sale that can have orders and a reader that sees the
// layout finds every bucket (a script touches one sale's keys only, for Redis
// Cluster).
func (s *Service) prepare(ctx context.Context, sale flashgate.Sale) error {
	l := buckets.Layout(sale)
	var tags []string
	if sale.Bucketed() {
		tags = l.Tags()
	}
	if err := s.joinSales(ctx, sale.ID, tags); err != nil {
		return err
	}
	for b, t := range tags {
		if err := lua.Prepare.Run(ctx, s.rdb, lua.SaleKeys(t),
			buckets.Share(sale.Total, l.N(), b), 0, salehash.PerUser(sale), sale.PriceCents).Err(); err != nil {
			return err
		}
	}
	args := []any{sale.Total, flashgate.AdmitCap(sale.Total, sale.AdmitRatio), salehash.PerUser(sale), sale.PriceCents}
	if sale.Bucketed() {
		args = append(args, l.String())
	} else if sale.Fair() {
		args = append(args, "", flashgate.QueueFair)
	}
	return lua.Prepare.Run(ctx, s.rdb, lua.SaleKeys(sale.ID), args...).Err()
}

// joinSales adds a sale and its bucket tags (none when unbucketed) to
// fg:sales, the set the order sinks drain, in one SADD.
func (s *Service) joinSales(ctx context.Context, id string, tags []string) error {
	members := make([]any, 0, 1+len(tags))
	members = append(members, id)
	for _, t := range tags {
		members = append(members, t)
	}
	return s.rdb.SAdd(ctx, lua.SalesKey(), members...).Err()
}

// Start opens a sale now. Start and Stop carry ctx's fencing token, or one
// of their own (fencedCall).
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
	return s.fencedCall(ctx, func(ctx context.Context) error { return s.setStateFenced(ctx, id, st) })
}

func (s *Service) setStateFenced(ctx context.Context, id string, st flashgate.SaleState) error {
	tok := fencing.Of(ctx)
	sale, err := s.store.Sale(ctx, id)
	if err != nil {
		return fmt.Errorf("reading sale: %w", err)
	}
	if err := s.store.SetSaleState(ctx, id, st, tok); err != nil {
		return fmt.Errorf("setting sale state: %w", err)
	}
	if st != flashgate.StateClosed {
		// An archived sale is live again before it opens (archive.go).
		if err := s.unarchiveIfArchived(ctx, id); err != nil {
			return err
		}
	}
	arg := salehash.StateArg(st)
	missing := false
	if sale.Bucketed() {
		// Every bucket first, the sale's own hash (the gateways' view) last.
		if missing, err = s.buckets.SetState(ctx, sale, arg); err != nil {
			return fmt.Errorf("setting sale state in redis: %w: %w", flashgate.ErrUnavailable, err)
		}
	}
	n, err := lua.SetState.Run(ctx, s.rdb, lua.SaleKeys(id), arg, tok).Int()
	if err != nil {
		return fmt.Errorf("setting sale state in redis: %w: %w", flashgate.ErrUnavailable, err)
	}
	if n == lua.SetStateFenced {
		return fencing.Err("setting sale state in redis", tok)
	}
	if n == -1 || missing {
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
	// Stock lives in the buckets of a bucketed sale; admission in its own hash.
	buckets, err := s.buckets.Fold(ctx, sale, &rf)
	if err != nil {
		return Status{}, err
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
		BucketFigures: buckets,
		Archived:      sale.Archived,
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
	if sale.Fair() {
		if st.Queue, err = s.queueStatus(ctx, id); err != nil {
			return Status{}, err
		}
	}
	return st, nil
}

// redisFigures reads a sale's hash and stream length in one round trip.
func (s *Service) redisFigures(ctx context.Context, id string) (salehash.Figures, error) {
	rfs, err := salehash.Read(ctx, s.rdb, []string{id})
	if err != nil {
		return salehash.Figures{}, err
	}
	return rfs[0], nil
}

func settlement(rf salehash.Figures, fig flashgate.SaleFigures) *Settlement {
	return &Settlement{
		Settled:     rf.Backlog == 0,
		RedisBooked: rf.Booked,
		DBLiveUnits: fig.LiveUnits,
		Difference:  rf.Booked - fig.LiveUnits - rf.Backlog,
	}
}

// deliverBudget bounds the time one re-sync pass spends delivering a sale's
// release queue (after a storm of expiries); the rest waits for the next
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
	// release queue read below, or was delivered by an earlier pass.
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
			string(sale.State), strconv.FormatFloat(salehash.AdmitRatio(sale), 'f', -1, 64), delivered, restored, tok).Int64Slice()
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
		queue, base, err := s.store.ReleaseQueue(ctx, id, salehash.ReleaseChunk)
		if err != nil {
			return 0, fmt.Errorf("reading release queue: %w", err)
		}
		if len(queue) == 0 {
			return base, nil
		}
		args := make([]any, 0, 1+3*len(queue))
		ids := make([]string, len(queue))
		args = append(args, strconv.FormatInt(base, 10)+":"+strconv.FormatInt(tok, 10))
		for i, o := range queue {
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
		if len(queue) < salehash.ReleaseChunk {
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
