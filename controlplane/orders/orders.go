// Package orders is the control plane's side of an order's life after its
// reserve: look-up (stored or still only reserved in Redis), pay, cancel,
// refund, expiry of unpaid orders, and payments at a provider
// (payments.go).
package orders

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/buckets"
	"github.com/flashgate/flashgate/controlplane/internal/fencing"
	"github.com/flashgate/flashgate/lua"
)

// ExpireBatch is how many orders one ExpireDue call moves.
const ExpireBatch = 500

// Store is the database as the order actions use it; the control plane's
// Store satisfies it.
type Store interface {
	Sale(ctx context.Context, id string) (flashgate.Sale, error)
	LiveSales(ctx context.Context) ([]flashgate.Sale, error)
	Order(ctx context.Context, id string) (flashgate.Order, error)
	Transition(ctx context.Context, id string, from []flashgate.OrderStatus, to flashgate.OrderStatus, now time.Time) (flashgate.Order, error)
	ExpireDue(ctx context.Context, createdBefore, now time.Time, limit int, fence int64) ([]flashgate.Order, error)
}

// Releaser gives the units of orders that left a live status back to their
// sale in Redis, idempotently; *inventory.Service satisfies it.
type Releaser interface {
	Release(ctx context.Context, o flashgate.Order) (released bool, err error)
	// ReleaseBatch releases many orders in few script calls and returns how
	// many it released now.
	ReleaseBatch(ctx context.Context, orders []flashgate.Order) (released int, err error)
}

// Config configures a Service; the control plane fills every field in
// (its Config documents the defaults). Payments and PaymentStore are nil
// with simulated payments.
type Config struct {
	Redis         redis.UniversalClient
	Store         Store
	Releaser      Releaser
	Clock         flashgate.Clock
	Logger        *slog.Logger
	AuditLogger   *slog.Logger // nil means Logger with the attribute log=audit
	PaymentWindow time.Duration
	PersistWait   time.Duration // negative: do not wait
	PaymentGrace  time.Duration
	Currency      string
	Payments      PaymentProvider
	PaymentStore  PaymentStore
	// Metrics is where the payment counters are registered; Expired and
	// Refunds count expired and refunded orders.
	Metrics          prometheus.Registerer
	Expired, Refunds prometheus.Counter
	// Yield, when not nil, is called at named points between two steps
	// of a payment's settlement ("settle:read", "retake:done",
	// "refund:owned", "refund:nopayment", "checkout:intent"), so that a
	// test can run another actor there. Nil in production.
	Yield func(ctx context.Context, point string)
	// ReconcileRate is how many calls a second the reconciliation makes to
	// the payment provider at most; zero means DefaultReconcileRate.
	ReconcileRate float64
	// HoldEvents applies the webhook events of draw entries' holds (those
	// whose intent names an entry: controlplane/drawhold); nil: they are
	// acknowledged and ignored.
	HoldEvents func(ctx context.Context, ev flashgate.PaymentEvent) error
	// DrawHold returns the card hold whose capture paid o, when o is a
	// draw winner's order ("" otherwise): an admin refund of such an
	// order, which has no payment of its own, refunds that hold. Nil
	// means no order is a draw's.
	DrawHold func(ctx context.Context, o flashgate.Order) (string, error)
}

// Service runs the order actions. Its methods are safe for concurrent use.
type Service struct {
	rdb           redis.UniversalClient
	store         Store
	releaser      Releaser
	clock         flashgate.Clock
	log           *slog.Logger
	auditLogger   *slog.Logger
	paymentWindow time.Duration
	persistWait   time.Duration
	expired       prometheus.Counter
	refunds       prometheus.Counter

	// provider takes payments (nil: simulated); paymentStore keeps them
	// (payments.go).
	provider     PaymentProvider
	paymentStore PaymentStore
	currency     string
	paymentGrace time.Duration
	pm           *paymentMetrics
	hook         func(ctx context.Context, point string) // Config.Yield
	holdEvents   func(ctx context.Context, ev flashgate.PaymentEvent) error
	drawHold     func(ctx context.Context, o flashgate.Order) (string, error)
	// reconcileLimit paces the reconciliation's calls to the provider;
	// pausedUntil, guarded by pmu, is when a 429's Retry-After ends.
	reconcileLimit *rate.Limiter
	pmu            sync.Mutex
	pausedUntil    time.Time
}

// New returns a Service and registers its payment counters.
func New(cfg Config) (*Service, error) {
	s := &Service{rdb: cfg.Redis, store: cfg.Store, releaser: cfg.Releaser, clock: cfg.Clock, log: cfg.Logger,
		auditLogger: cfg.AuditLogger, paymentWindow: cfg.PaymentWindow, persistWait: cfg.PersistWait,
		expired: cfg.Expired, refunds: cfg.Refunds, provider: cfg.Payments, paymentStore: cfg.PaymentStore,
		currency: cfg.Currency, paymentGrace: cfg.PaymentGrace, hook: cfg.Yield, holdEvents: cfg.HoldEvents,
		drawHold: cfg.DrawHold}
	r := cfg.ReconcileRate
	if r <= 0 {
		r = DefaultReconcileRate
	}
	s.reconcileLimit = rate.NewLimiter(rate.Limit(r), max(int(r), 1))
	var err error
	if s.pm, err = newPaymentMetrics(cfg.Metrics); err != nil {
		return nil, err
	}
	return s, nil
}

// Order returns the order orderID of userID. An order of another user is
// flashgate.ErrNotFound. An order reserved in Redis but not yet in the
// database is reported with status reserved (and Quantity 0: only the
// stream entry knows it).
func (s *Service) Order(ctx context.Context, orderID, userID string) (flashgate.Order, error) {
	if !flashgate.ValidOrderID(orderID) || userID == "" {
		return flashgate.Order{}, fmt.Errorf("order %q: %w", orderID, flashgate.ErrNotFound)
	}
	o, err := s.store.Order(ctx, orderID)
	if err == nil {
		if o.UserID != userID {
			return flashgate.Order{}, fmt.Errorf("order %q: %w", orderID, flashgate.ErrNotFound)
		}
		if s.provider != nil {
			p, err := s.paymentStore.Payment(ctx, orderID)
			if err == nil {
				return s.withPayment(o, p), nil
			}
			if !errors.Is(err, flashgate.ErrNotFound) {
				return flashgate.Order{}, fmt.Errorf("reading payment: %w", err)
			}
		}
		return o, nil
	}
	if !errors.Is(err, flashgate.ErrNotFound) {
		return flashgate.Order{}, fmt.Errorf("reading order: %w", err)
	}
	return s.reservedOrder(ctx, orderID, userID)
}

// reservedOrder looks for orderID, reserved in Redis and not yet stored, in
// the buyers hash of userID's home bucket of every live (not archived) sale,
// in one pipelined round trip (per node, on a cluster). An archived sale's
// streams are drained, so each of its orders is a row: its reserved orders
// are never looked for, and the lookup costs the live sales, not every sale
// ever made. On a bucketed sale the home bucket holds the order itself, the
// final marker of an order spilled to another bucket, or the claim of a
// spill in flight, whose order counts once another bucket's buyers hash
// names it (README, "Buckets").
func (s *Service) reservedOrder(ctx context.Context, orderID, userID string) (flashgate.Order, error) {
	sales, err := s.store.LiveSales(ctx)
	if err != nil {
		return flashgate.Order{}, fmt.Errorf("listing sales: %w", err)
	}
	if len(sales) == 0 {
		return flashgate.Order{}, fmt.Errorf("order %q: %w", orderID, flashgate.ErrNotFound)
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(sales))
	hashes := make([]*redis.SliceCmd, len(sales))
	for i, sale := range sales {
		l := buckets.Layout(sale)
		tag := l.Tag(l.Home(userID))
		cmds[i] = pipe.HGet(ctx, lua.BuyersKey(tag), userID)
		hashes[i] = pipe.HMGet(ctx, lua.SaleKey(tag), lua.FieldTotal, lua.FieldStart, lua.FieldResume)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return flashgate.Order{}, fmt.Errorf("reading buyers: %w: %w", flashgate.ErrUnavailable, err)
	}
	reserved := func(sale flashgate.Sale) flashgate.Order {
		return flashgate.Order{ID: orderID, SaleID: sale.ID, UserID: userID,
			PriceCents: sale.PriceCents, Status: flashgate.StatusReserved}
	}
	var claimed []flashgate.Sale // sales whose home bucket holds a claim of orderID
	for i, c := range cmds {
		v := c.Val()
		if v == orderID {
			return reserved(sales[i]), nil
		}
		if o, _, final, ok := lua.ParseMarker(v); ok && o == orderID {
			if final {
				return reserved(sales[i]), nil
			}
			claimed = append(claimed, sales[i])
		}
	}
	if len(claimed) > 0 {
		return s.claimedOrder(ctx, claimed, orderID, userID, reserved)
	}
	for i, h := range hashes {
		if rebuilding(h.Val()) {
			// Redis lost this sale (or a failover paused it) and the
			// leader is rebuilding it: an order sink may still hold an
			// order it read before the loss and store it in a moment, so
			// "not found" may be false; the buyer retries a 503.
			return flashgate.Order{}, fmt.Errorf("order %q: sale %s is being rebuilt: %w", orderID, sales[i].ID, flashgate.ErrUnavailable)
		}
	}
	return flashgate.Order{}, fmt.Errorf("order %q: %w", orderID, flashgate.ErrNotFound)
}

// rebuilding reports whether a sale hash's total, start and resume fields
// say Redis lost the sale (no total) or holds it paused for a rebuild or a
// failover (resume set while not started): the moments an order can be
// neither in Redis nor yet in the database.
func rebuilding(v []any) bool {
	if len(v) != 3 || v[0] == nil {
		return true
	}
	return v[1] != "1" && v[2] == "1"
}

// claimedOrder looks for orderID in the buckets other than userID's home of
// each sale in claimed, where a spill in flight may have reserved it before
// finalising its claim.
func (s *Service) claimedOrder(ctx context.Context, claimed []flashgate.Sale, orderID, userID string,
	reserved func(flashgate.Sale) flashgate.Order) (flashgate.Order, error) {
	pipe := s.rdb.Pipeline()
	cmds := make([][]*redis.StringCmd, len(claimed))
	for i, sale := range claimed {
		l := buckets.Layout(sale)
		home := l.Home(userID)
		for b := range l.N() {
			if b != home {
				cmds[i] = append(cmds[i], pipe.HGet(ctx, lua.BuyersKey(l.Tag(b)), userID))
			}
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return flashgate.Order{}, fmt.Errorf("reading buyers: %w: %w", flashgate.ErrUnavailable, err)
	}
	for i, cs := range cmds {
		for _, c := range cs {
			if c.Val() == orderID {
				return reserved(claimed[i]), nil
			}
		}
	}
	return flashgate.Order{}, fmt.Errorf("order %q: %w", orderID, flashgate.ErrNotFound)
}

// Pay marks userID's order paid when payments are simulated (no provider).
// Paying a paid order again returns it; a cancelled, expired or refunded
// one is flashgate.ErrNotPayable. An order not yet in the database is
// waited for up to Config.PersistWait, then is flashgate.ErrNotPayable.
// With a provider, Pay starts the order's checkout instead (payments.go):
// the order is answered paying, with its intent and client secret, and
// paying again answers the same intent.
func (s *Service) Pay(ctx context.Context, orderID, userID string) (flashgate.Order, error) {
	if s.provider != nil {
		o, err := s.checkout(ctx, orderID, userID)
		if err == nil && o.ClientSecret == "" && o.Status == flashgate.StatusPaying {
			o = s.clientSecret(ctx, o)
		}
		return o, err
	}
	return s.transition(ctx, orderID, userID, []flashgate.OrderStatus{flashgate.StatusPendingPayment}, flashgate.StatusPaid)
}

// Cancel cancels userID's unpaid order and gives its units back. Cancelling
// a cancelled order again returns it; a paid, expired or refunded one is
// flashgate.ErrNotPayable. With a provider, a payment in flight is canceled
// at the provider first (refund.go, cancelIntent), so that the buyer's page
// can no longer confirm it.
func (s *Service) Cancel(ctx context.Context, orderID, userID string) (flashgate.Order, error) {
	if err := s.notDrawOrder(ctx, orderID, userID); err != nil {
		return flashgate.Order{}, err
	}
	if s.provider != nil && flashgate.ValidOrderID(orderID) {
		o, err := s.persistedOrder(ctx, orderID, userID)
		if err != nil {
			return flashgate.Order{}, err
		}
		if o.UserID != userID {
			return flashgate.Order{}, fmt.Errorf("order %q: %w", orderID, flashgate.ErrNotFound)
		}
		if o.Status == flashgate.StatusPendingPayment {
			if err := s.cancelIntent(ctx, orderID); err != nil {
				return o, err
			}
		}
		s.yield(ctx, "cancel:intent")
	}
	o, err := s.transition(ctx, orderID, userID, []flashgate.OrderStatus{flashgate.StatusPendingPayment}, flashgate.StatusCancelled)
	if err != nil || s.provider == nil {
		return o, err
	}
	// A checkout between the payment read and the cancel may have stored
	// an intent and found the order still pending: cancel it now, so that
	// the buyer's page cannot confirm it (a success that landed first
	// settles as a late payment).
	if p, perr := s.paymentStore.Payment(ctx, orderID); perr == nil && p.InFlight() {
		if _, cerr := s.orphanIntent(ctx, o, p); !errors.Is(cerr, flashgate.ErrNotPayable) {
			s.log.Warn("canceling the payment of a cancelled order failed; the reconciliation cancels it", "order", orderID, "err", cerr)
		}
	}
	return o, nil
}

// notDrawOrder is flashgate.ErrNotPayable for userID's order of a draw
// sale: the close made it for a winner whose hold it captured (or is
// capturing), and marks it paid itself, so its buyer may not cancel it
// (the units would go back while the card stays charged). An order it
// cannot read is that error (not found, or unavailable), so that no later
// read of the caller finds a draw order this one missed; any other order
// is nil.
func (s *Service) notDrawOrder(ctx context.Context, orderID, userID string) error {
	if !flashgate.ValidOrderID(orderID) {
		return fmt.Errorf("order %q: %w", orderID, flashgate.ErrNotFound)
	}
	o, err := s.persistedOrder(ctx, orderID, userID)
	if err != nil {
		return err
	}
	if o.UserID != userID {
		return fmt.Errorf("order %q: %w", orderID, flashgate.ErrNotFound)
	}
	sale, err := s.store.Sale(ctx, o.SaleID)
	if errors.Is(err, flashgate.ErrNotFound) {
		return nil // No sale row: no draw (the sink never waits for one).
	}
	if err != nil {
		return fmt.Errorf("reading sale: %w", err)
	}
	if sale.Queue != flashgate.QueueDraw {
		return nil
	}
	return fmt.Errorf("order %q is a draw's, paid by its close: %w", orderID, flashgate.ErrNotPayable)
}

// transition moves an order from one of from to to in one conditional
// UPDATE, so that of two racing transitions (pay and expiry) exactly one
// wins; userID "" skips the owner check.
func (s *Service) transition(ctx context.Context, orderID, userID string, from []flashgate.OrderStatus, to flashgate.OrderStatus) (flashgate.Order, error) {
	if !flashgate.ValidOrderID(orderID) {
		return flashgate.Order{}, fmt.Errorf("order %q: %w", orderID, flashgate.ErrNotFound)
	}
	o, err := s.persistedOrder(ctx, orderID, userID)
	if err != nil {
		return flashgate.Order{}, err
	}
	if userID != "" && o.UserID != userID {
		return flashgate.Order{}, fmt.Errorf("order %q: %w", orderID, flashgate.ErrNotFound)
	}
	if o.Status == to {
		return o, nil
	}
	got, err := s.store.Transition(ctx, orderID, from, to, s.clock.Now())
	if errors.Is(err, flashgate.ErrNotPayable) && got.Status == to {
		return got, nil // a concurrent identical request won: same answer
	}
	if err != nil {
		return got, fmt.Errorf("order %q to %s: %w", orderID, to, err)
	}
	if !to.Live() {
		s.release(ctx, got)
		if to == flashgate.StatusRefunded {
			s.refunds.Inc()
		}
	}
	return got, nil
}

// persistedOrder reads an order from the database, waiting up to
// persistWait for one that is still only reserved in Redis.
func (s *Service) persistedOrder(ctx context.Context, orderID, userID string) (flashgate.Order, error) {
	o, err := s.store.Order(ctx, orderID)
	if err == nil {
		return o, nil
	}
	if !errors.Is(err, flashgate.ErrNotFound) {
		return o, fmt.Errorf("reading order: %w", err)
	}
	if userID == "" {
		// Admin refunds name any order; look it up by id alone.
		return o, fmt.Errorf("order %q: %w", orderID, flashgate.ErrNotFound)
	}
	if _, rerr := s.reservedOrder(ctx, orderID, userID); rerr != nil {
		return o, rerr
	}
	if s.persistWait > 0 {
		deadline := time.NewTimer(s.persistWait)
		defer deadline.Stop()
		poll := time.NewTicker(50 * time.Millisecond)
		defer poll.Stop()
		for {
			select {
			case <-ctx.Done():
				return o, fmt.Errorf("waiting for order: %w", ctx.Err())
			case <-deadline.C:
				return o, fmt.Errorf("order %q not yet persisted: %w", orderID, flashgate.ErrNotPayable)
			case <-poll.C:
			}
			o, err = s.store.Order(ctx, orderID)
			if err == nil {
				return o, nil
			}
			if !errors.Is(err, flashgate.ErrNotFound) {
				return o, fmt.Errorf("reading order: %w", err)
			}
		}
	}
	return o, fmt.Errorf("order %q not yet persisted: %w", orderID, flashgate.ErrNotPayable)
}

// release gives an order's units back. A failure is only logged: the
// database already holds the new status, and the next re-sync fixes Redis.
func (s *Service) release(ctx context.Context, o flashgate.Order) {
	if _, err := s.releaser.Release(ctx, o); err != nil {
		s.log.Warn("release failed; the next re-sync gives the units back", "order", o.ID, "sale", o.SaleID, "err", err)
	}
}

// expireBudget bounds the time one ExpireDue call spends: a storm of
// expiries is worked off over several ticks, and the other loops run in
// between.
const expireBudget = time.Second

// ExpireDue expires the orders unpaid for longer than the payment window
// and gives their units back, a batch of rows and one batch release at a
// time, until none is due or its time budget is spent; it returns how many
// it expired. One pass logs one line, whatever the number of orders;
// releases that failed are given back by the next re-sync (the database
// queued them with the status change). Its expiries carry ctx's fencing
// token.
func (s *Service) ExpireDue(ctx context.Context) (int, error) {
	now := s.clock.Now()
	start := time.Now()
	var (
		n, released, failed int // failed counts batches whose release erred
		firstErr            error
		err                 error
	)
	for {
		var moved []flashgate.Order
		moved, err = s.store.ExpireDue(ctx, now.Add(-s.paymentWindow), now, ExpireBatch, fencing.Of(ctx))
		if err != nil {
			err = fmt.Errorf("expiring orders: %w", err)
			break
		}
		if len(moved) > 0 {
			r, rerr := s.releaser.ReleaseBatch(ctx, moved)
			released += r
			if rerr != nil {
				failed++
				if firstErr == nil {
					firstErr = rerr
				}
			}
		}
		n += len(moved)
		s.expired.Add(float64(len(moved)))
		if len(moved) < ExpireBatch || time.Since(start) > expireBudget || ctx.Err() != nil {
			break
		}
	}
	switch {
	case failed > 0:
		s.log.Warn("expired unpaid orders; some releases failed and the next re-sync gives those units back",
			"expired", n, "released", released, "failed_batches", failed, "took", time.Since(start).Round(time.Millisecond), "err", firstErr)
	case n > 0:
		s.log.Info("expired unpaid orders", "expired", n, "released", released, "took", time.Since(start).Round(time.Millisecond))
	}
	return n, err
}
