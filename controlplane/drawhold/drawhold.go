// Package drawhold is the card hold of a draw entry (docs/api.md,
// "Draws"): an entry authorises its amount at the provider without
// charging it (a PaymentIntent with manual capture, the entry id its
// idempotency key) and counts in the draw only once the authorisation
// succeeded, told by the provider's webhook (Event) or read by the
// leader's read path (Reconcile); a withdrawal releases the hold
// (Release). With simulated payments (no provider) an entry is entered at
// once.
//
// The hold's intent is kept with the entry in Redis (lua.DrawHoldKey,
// written by lua.DrawHold) and journaled to the database's draw_entries
// (flashgate.DrawEntry.PaymentIntent), where the draw's close reads it.
// Every step is a compare-and-set on the entry's state (lua.DrawSet, from
// pending only), so duplicated and reordered webhooks change nothing twice.
package drawhold

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/lua"
)

// Provider makes, reads and releases card holds; *payments.Stripe
// satisfies it.
type Provider interface {
	Hold(ctx context.Context, h flashgate.Hold) (flashgate.Intent, error)
	Intent(ctx context.Context, id string) (flashgate.Intent, error)
	Cancel(ctx context.Context, id string) (flashgate.Intent, error)
}

// Store is the database as the holds read it: the sale's price and
// currency.
type Store interface {
	Sale(ctx context.Context, id string) (flashgate.Sale, error)
	// RecordDrawHold stores an entry's hold with its row before the
	// buyer is given what authorises it; false when the journal has not
	// written the entry's row yet (sqldb.DB.RecordDrawHold).
	RecordDrawHold(ctx context.Context, saleID, entryID, intent string) (bool, error)
}

// Defaults of Config's fields.
const (
	// DefaultGrace is how long after a hold is made the read path first
	// asks the provider about it: time for the buyer to confirm it and
	// for its webhook to come.
	DefaultGrace = 30 * time.Second
	// DefaultRate is how many calls a second the read path makes to the
	// provider at most.
	DefaultRate = 5
	// DefaultCurrency is the currency of a sale that names none.
	DefaultCurrency = "usd"
)

// The read path's pacing: a hold that stays open is looked at again after
// checkBase doubled per look so far, up to checkCap; one pass of a sale
// reads at most checkBatch holds.
const (
	checkBase  = time.Second
	checkCap   = 5 * time.Minute
	checkBatch = 100
)

// Config configures a Holder. Redis and Store are required.
type Config struct {
	Redis redis.UniversalClient
	Store Store
	// Provider makes the holds; nil means simulated payments: an entry is
	// entered as soon as it asks for its hold.
	Provider Provider
	// Currency is the holds' currency for a sale that names none; ""
	// means DefaultCurrency.
	Currency string
	// Clock tells the time of the steps; nil means flashgate.SystemClock.
	Clock flashgate.Clock
	// Logger receives what the read path could not do; nil means
	// slog.Default().
	Logger *slog.Logger
	// Grace is how long after a hold is made the read path first looks at
	// it; zero means DefaultGrace.
	Grace time.Duration
	// Rate is how many calls a second the read path makes to the provider
	// at most; zero means DefaultRate.
	Rate float64
	// Flush writes a sale's journaled entry changes to the database
	// (drawjournal.Flush), for a hold whose entry's row the journal has
	// not written yet (record); nil writes none.
	Flush func(ctx context.Context, sale string) (int, error)
}

// Holder runs the holds of draw entries. Its methods are safe for
// concurrent use.
type Holder struct {
	rdb      redis.UniversalClient
	store    Store
	provider Provider
	currency string
	clock    flashgate.Clock
	log      *slog.Logger
	grace    time.Duration
	limit    *rate.Limiter
	flush    func(ctx context.Context, sale string) (int, error)

	// mu guards checks (how many times the read path looked at each open
	// hold, for its backoff; an entry leaves it with the check list) and
	// pausedUntil (when a 429's Retry-After ends).
	mu          sync.Mutex
	checks      map[string]int
	pausedUntil time.Time
}

// New returns a Holder with cfg's defaults filled in.
func New(cfg Config) *Holder {
	if cfg.Currency == "" {
		cfg.Currency = DefaultCurrency
	}
	if cfg.Clock == nil {
		cfg.Clock = flashgate.SystemClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultGrace
	}
	if cfg.Rate <= 0 {
		cfg.Rate = DefaultRate
	}
	return &Holder{rdb: cfg.Redis, store: cfg.Store, provider: cfg.Provider, currency: cfg.Currency, clock: cfg.Clock,
		log: cfg.Logger, grace: cfg.Grace, limit: rate.NewLimiter(rate.Limit(cfg.Rate), max(int(cfg.Rate), 1)), flush: cfg.Flush,
		checks: map[string]int{}}
}

// Paying reports whether entries hold at a provider (not simulated).
func (h *Holder) Paying() bool { return h.provider != nil }

// entry is a buyer's entry as the entries hash holds it.
type entry struct {
	st      flashgate.DrawEntryState
	id      string
	qty     int64
	variant string
}

// readEntry reads userID's entry in saleID; ok is false without one.
func (h *Holder) readEntry(ctx context.Context, saleID, userID string) (e entry, ok bool, err error) {
	v, err := h.rdb.HGet(ctx, lua.DrawKey(saleID), userID).Result()
	if errors.Is(err, redis.Nil) {
		return entry{}, false, nil
	}
	if err != nil {
		return entry{}, false, fmt.Errorf("reading the entry: %w: %w", flashgate.ErrUnavailable, err)
	}
	st, id, qty, variant, ok := lua.ParseDrawEntry(v)
	if !ok {
		return entry{}, false, fmt.Errorf("draw: an entry of another shape: %q", v)
	}
	return entry{st: st, id: id, qty: qty, variant: variant}, true, nil
}

// answer is e of userID in saleID as the entry routes answer it.
func answer(saleID, userID string, e entry, intent string) flashgate.DrawEntry {
	return flashgate.DrawEntry{ID: e.id, SaleID: saleID, UserID: userID, Variant: e.variant, Quantity: e.qty,
		State: e.st, PaymentIntent: intent}
}

// ownEntry reads userID's entry in saleID and the hold recorded for it
// (held false without one): what Hold and Release start from. No entry, or
// a sale id or user that cannot name one, is flashgate.ErrNotFound.
func (h *Holder) ownEntry(ctx context.Context, saleID, userID string) (e entry, intent string, held bool, err error) {
	if !flashgate.ValidSaleID(saleID) || userID == "" {
		return entry{}, "", false, fmt.Errorf("draw entry: %w", flashgate.ErrNotFound)
	}
	e, ok, err := h.readEntry(ctx, saleID, userID)
	if err != nil {
		return entry{}, "", false, err
	}
	if !ok {
		return entry{}, "", false, fmt.Errorf("draw entry of %s: %w", saleID, flashgate.ErrNotFound)
	}
	intent, _, held, err = h.readHold(ctx, saleID, e.id)
	return e, intent, held, err
}

// readHold reads the hold recorded for entryID; ok is false without one.
func (h *Holder) readHold(ctx context.Context, saleID, entryID string) (intent, user string, ok bool, err error) {
	v, err := h.rdb.HGet(ctx, lua.DrawHoldKey(saleID), entryID).Result()
	if errors.Is(err, redis.Nil) {
		return "", "", false, nil
	}
	if err != nil {
		return "", "", false, fmt.Errorf("reading the hold: %w: %w", flashgate.ErrUnavailable, err)
	}
	intent, user, ok = lua.ParseDrawHold(v)
	if !ok {
		return "", "", false, fmt.Errorf("draw: a hold of another shape: %q", v)
	}
	return intent, user, true, nil
}

// Hold gives userID's pending entry in saleID its card hold and answers
// the entry with what the buyer's page confirms it with (PaymentIntent,
// ClientSecret); asking again answers the same hold. With simulated
// payments it enters the entry at once. An entry already entered is
// answered as it is; no entry is flashgate.ErrNotFound, one withdrawn or
// drawn flashgate.ErrNotPayable, a pending one past the close (no hold
// made) flashgate.ErrClosed, a provider that cannot be reached
// flashgate.ErrUnavailable (the entry stays pending: ask again).
func (h *Holder) Hold(ctx context.Context, saleID, userID string) (flashgate.DrawEntry, error) {
	e, intent, held, err := h.ownEntry(ctx, saleID, userID)
	if err != nil {
		return flashgate.DrawEntry{}, err
	}
	switch {
	case e.st == flashgate.DrawEntered:
		return answer(saleID, userID, e, intent), nil
	case e.st != flashgate.DrawPending:
		return answer(saleID, userID, e, intent), fmt.Errorf("draw entry %s is %s: %w", e.id, e.st, flashgate.ErrNotPayable)
	case h.provider == nil:
		return h.enter(ctx, saleID, userID, e.id)
	case held:
		in, err := h.provider.Intent(ctx, intent)
		if err != nil {
			return flashgate.DrawEntry{}, fmt.Errorf("reading the hold of %s: %w", e.id, err)
		}
		if in.Status == flashgate.IntentRequiresCapture {
			// Authorised, its webhook not here yet: count it now.
			if d, err := h.enter(ctx, saleID, userID, e.id); err == nil {
				return d, nil
			}
		}
		d := answer(saleID, userID, e, intent)
		if err := h.record(ctx, d); err != nil {
			return d, err
		}
		d.ClientSecret = in.ClientSecret
		return d, nil
	}
	// A hold made after the close would never count.
	if closed, err := h.closed(ctx, saleID); err != nil || closed {
		if err == nil {
			err = fmt.Errorf("holding for %s: %w", e.id, flashgate.ErrClosed)
		}
		return answer(saleID, userID, e, ""), err
	}
	sale, err := h.store.Sale(ctx, saleID)
	if err != nil {
		return flashgate.DrawEntry{}, fmt.Errorf("reading sale: %w", err)
	}
	amount, err := flashgate.OrderAmount(sale.PriceCents, e.qty)
	if err != nil {
		return flashgate.DrawEntry{}, fmt.Errorf("draw entry %s: %w", e.id, err)
	}
	currency := sale.Currency
	if currency == "" {
		currency = h.currency
	}
	in, err := h.provider.Hold(ctx, flashgate.Hold{EntryID: e.id, SaleID: saleID, AmountCents: amount, Currency: currency})
	if err != nil {
		return flashgate.DrawEntry{}, fmt.Errorf("holding for %s: %w", e.id, err)
	}
	now := h.clock.Now()
	v, err := lua.DrawHold.Run(ctx, h.rdb, lua.DrawHoldKeys(saleID), userID, e.id, in.ID, now.Add(h.grace).UnixMilli()).Slice()
	if err != nil || len(v) < 3 {
		return flashgate.DrawEntry{}, fmt.Errorf("recording the hold of %s: %w: %w", e.id, flashgate.ErrUnavailable, err)
	}
	code, _ := v[0].(int64)
	cur, _ := v[1].(string)
	recorded, _ := v[2].(string)
	if code != lua.DrawOK {
		// The entry went (withdrawn and replaced, or Redis lost it) while
		// the hold was made: nobody will confirm it.
		h.cancelQuietly(ctx, in.ID)
		if err := lua.DrawError(code); err != nil {
			return flashgate.DrawEntry{}, fmt.Errorf("recording the hold of %s: %w", e.id, err)
		}
	}
	st, _, _, _, _ := lua.ParseDrawEntry(cur)
	e.st = st
	d := answer(saleID, userID, e, recorded)
	if st == flashgate.DrawPending {
		if err := h.record(ctx, d); err != nil {
			return d, err
		}
	}
	if recorded == in.ID {
		d.ClientSecret = in.ClientSecret
	}
	if st != flashgate.DrawPending {
		// Withdrawn while the hold was made: the read path, which has it
		// on its list now, releases it if this cancel does not.
		if st == flashgate.DrawWithdrawn {
			h.cancelQuietly(ctx, recorded)
		}
		d.ClientSecret = ""
		return d, fmt.Errorf("draw entry %s is %s: %w", e.id, st, flashgate.ErrNotPayable)
	}
	return d, nil
}

// record stores pending entry d's hold with its row before the buyer is
// given its client secret, the journal flushed first when it has not
// written the row yet: Redis keeps the hold (lua.DrawHold) and the journal
// writes it to the row on the leader's next tick, but a loss of Redis
// before that tick lost the only record of a hold the buyer could still
// authorise, and nothing released it (the rebuild and the close list only
// the holds the rows name): it stayed on the card for the hold's life (the
// interleaving explorer's draw seed 48). A hold not recorded is
// flashgate.ErrUnavailable, answered without its secret: asking again
// records it.
//
// A flush writes one batch of the journal (drawjournal.DefaultBatch), and
// a crowd entering at once puts more than that ahead of the entry's
// change: record flushes again while the flush wrote some (n > 0: the
// journal, read after the entry was made, may hold the entry's change
// further on) and the row is still not written, up to maxRecordFlushes.
// A flush that wrote none read the journal empty: the change was written
// (by this flush or another process's) or lost with Redis. Flushing once
// refused the hold of an entry a batch back, and since a process's holds
// share the next flush (controlplane's flushGroup), a crowd's holds got
// one batch between them.
func (h *Holder) record(ctx context.Context, d flashgate.DrawEntry) error {
	ok, err := h.store.RecordDrawHold(ctx, d.SaleID, d.ID, d.PaymentIntent)
	for i := 0; err == nil && !ok && h.flush != nil && i < maxRecordFlushes; i++ {
		var n int
		if n, err = h.flush(ctx, d.SaleID); err != nil {
			break
		}
		if ok, err = h.store.RecordDrawHold(ctx, d.SaleID, d.ID, d.PaymentIntent); n == 0 {
			break
		}
	}
	switch {
	case err != nil:
		return fmt.Errorf("recording the hold of %s: %w: %w", d.ID, flashgate.ErrUnavailable, err)
	case !ok:
		return fmt.Errorf("recording the hold of %s: its row not written yet: %w", d.ID, flashgate.ErrUnavailable)
	}
	return h.recheck(ctx, d)
}

// maxRecordFlushes bounds the journal's flushes of one record: at the
// default batch, a hundred thousand changes ahead of the entry's.
const maxRecordFlushes = 100

// recheck reads d's entry, its hold's record and the window in Redis
// again once record stored the hold: a flush whose journal read predated
// a loss of Redis may have written the entry's row after the rebuild (and
// after a close that ran meanwhile), so that the rows name a hold the
// rebuilt Redis, the close and the read path know nothing of (the
// interleaving explorer's draw seed 4833). A hold whose entry is no longer
// its buyer's pending entry, or asked for from the close on, is released
// (nobody will confirm it: flashgate.ErrNotPayable, flashgate.ErrClosed);
// one whose record Redis lost is answered flashgate.ErrUnavailable (the
// rebuild records it again from the row; asking again answers it).
func (h *Holder) recheck(ctx context.Context, d flashgate.DrawEntry) error {
	e, ok, err := h.readEntry(ctx, d.SaleID, d.UserID)
	if err != nil {
		return err
	}
	if !ok || e.id != d.ID || e.st != flashgate.DrawPending {
		h.cancelQuietly(ctx, d.PaymentIntent)
		return fmt.Errorf("the hold of %s: the entry is no longer pending: %w", d.ID, flashgate.ErrNotPayable)
	}
	if closed, err := h.closed(ctx, d.SaleID); err != nil || closed {
		if err == nil {
			h.cancelQuietly(ctx, d.PaymentIntent)
			err = fmt.Errorf("the hold of %s: %w", d.ID, flashgate.ErrClosed)
		}
		return err
	}
	intent, _, held, err := h.readHold(ctx, d.SaleID, d.ID)
	switch {
	case err != nil:
		return err
	case !held || intent != d.PaymentIntent:
		return fmt.Errorf("the hold of %s: not recorded in Redis: %w", d.ID, flashgate.ErrUnavailable)
	}
	return nil
}

// cancelQuietly releases a hold nobody will use, logging a failure (the
// read path releases it later when the entry is on its list).
func (h *Holder) cancelQuietly(ctx context.Context, intent string) {
	if _, err := h.provider.Cancel(ctx, intent); err != nil {
		h.log.Warn("draw hold: releasing an unused hold", "intent", intent, "err", err)
	}
}

// enter moves userID's entry entryID of saleID from pending to entered
// and answers it; after the close it is flashgate.ErrClosed.
func (h *Holder) enter(ctx context.Context, saleID, userID, entryID string) (flashgate.DrawEntry, error) {
	code, cur, err := h.set(ctx, saleID, userID, entryID, flashgate.DrawEntered, flashgate.DrawPending)
	if err != nil {
		return flashgate.DrawEntry{}, err
	}
	st, id, qty, variant, _ := lua.ParseDrawEntry(cur)
	intent, _, _, _ := h.readHold(ctx, saleID, entryID)
	d := answer(saleID, userID, entry{st: st, id: id, qty: qty, variant: variant}, intent)
	if code != lua.DrawOK {
		return d, fmt.Errorf("entering %s: %w", entryID, lua.DrawError(code))
	}
	h.done(ctx, saleID, entryID)
	return d, nil
}

// set runs lua.DrawSet: entryID of userID to state to, from one of from.
func (h *Holder) set(ctx context.Context, saleID, userID, entryID string, to flashgate.DrawEntryState, from ...flashgate.DrawEntryState) (int64, string, error) {
	args := []any{userID, entryID, string(to), h.clock.Now().UnixMilli()}
	for _, f := range from {
		args = append(args, string(f))
	}
	v, err := lua.DrawSet.Run(ctx, h.rdb, lua.DrawChangeKeys(saleID), args...).Slice()
	if err != nil || len(v) < 2 {
		return 0, "", fmt.Errorf("moving %s to %s: %w: %w", entryID, to, flashgate.ErrUnavailable, err)
	}
	code, _ := v[0].(int64)
	cur, _ := v[1].(string)
	return code, cur, nil
}

// done takes entryID off the read path's list: its hold is authorised or
// released.
func (h *Holder) done(ctx context.Context, saleID, entryID string) {
	if err := h.rdb.ZRem(ctx, lua.DrawCheckKey(saleID), entryID).Err(); err != nil {
		h.log.Warn("draw hold: leaving the check list", "entry", entryID, "err", err)
	}
	h.mu.Lock()
	delete(h.checks, entryID)
	h.mu.Unlock()
}

// checkAt puts entryID on the read path's list, due at at (moving it
// sooner or later if it is there).
func (h *Holder) checkAt(ctx context.Context, saleID, entryID string, at time.Time) error {
	if err := h.rdb.ZAdd(ctx, lua.DrawCheckKey(saleID), redis.Z{Score: float64(at.UnixMilli()), Member: entryID}).Err(); err != nil {
		return fmt.Errorf("listing the hold of %s: %w: %w", entryID, flashgate.ErrUnavailable, err)
	}
	return nil
}

// Release releases the hold of userID's withdrawn entry in saleID (the
// gateway calls it after the withdrawal) and answers the entry: calling it
// again is harmless, and asks the provider nothing once the hold is
// released (lua.DrawWithdraw lists a withdrawn entry's hold on the read
// path's list, and a release takes it off: an entry off the list holds
// nothing to release). An entry that is not withdrawn, or holds nothing,
// is answered as it is. A provider that cannot be reached is
// flashgate.ErrUnavailable; the read path releases the hold later, and
// calling Release again tries now.
func (h *Holder) Release(ctx context.Context, saleID, userID string) (flashgate.DrawEntry, error) {
	e, intent, held, err := h.ownEntry(ctx, saleID, userID)
	if err != nil {
		return flashgate.DrawEntry{}, err
	}
	d := answer(saleID, userID, e, intent)
	if e.st != flashgate.DrawWithdrawn || !held || h.provider == nil {
		return d, nil
	}
	switch _, err := h.rdb.ZScore(ctx, lua.DrawCheckKey(saleID), e.id).Result(); {
	case errors.Is(err, redis.Nil):
		return d, nil // released already
	case err != nil:
		return d, fmt.Errorf("reading the holds to check of %s: %w: %w", saleID, flashgate.ErrUnavailable, err)
	}
	if _, err := h.provider.Cancel(ctx, intent); err != nil {
		// Due now: the read path tries again, as a DELETE again does.
		if lerr := h.checkAt(ctx, saleID, e.id, h.clock.Now()); lerr != nil {
			h.log.Warn("draw hold: listing a hold not released", "entry", e.id, "err", lerr)
		}
		return d, fmt.Errorf("releasing the hold of %s: %w", e.id, err)
	}
	h.done(ctx, saleID, e.id)
	return d, nil
}

// Event applies a webhook event about a hold (ev.EntryID set): an
// authorised hold (payment_intent.amount_capturable_updated) enters its
// pending entry; a canceled one takes its pending entry out of the draw
// (withdrawn, before the close). Each step is from pending only, so a
// duplicate or an event older than the entry's state changes nothing. An
// event of a hold not recorded (or of another intent than the entry's) is
// ignored; the other types (a failed confirm: the buyer may try again) are
// the close's or nobody's.
func (h *Holder) Event(ctx context.Context, ev flashgate.PaymentEvent) error {
	if ev.EntryID == "" || !flashgate.ValidSaleID(ev.SaleID) {
		return nil
	}
	intent, user, ok, err := h.readHold(ctx, ev.SaleID, ev.EntryID)
	if err != nil {
		return err
	}
	if !ok || intent != ev.IntentID {
		h.log.Info("draw hold: an event of a hold not recorded, ignored", "event", ev.ID, "entry", ev.EntryID, "intent", ev.IntentID)
		return nil
	}
	switch ev.Type {
	case flashgate.EventIntentHeld:
		return h.authorised(ctx, ev.SaleID, user, ev.EntryID)
	case flashgate.EventIntentCanceled:
		return h.canceled(ctx, ev.SaleID, user, ev.EntryID)
	}
	return nil
}

// authorised applies an authorised hold to entryID: pending → entered.
// Any other outcome leaves the hold to the read path (due now), which
// releases it when the entry no longer wants it (withdrawn, replaced,
// authorised after the close).
func (h *Holder) authorised(ctx context.Context, saleID, userID, entryID string) error {
	code, cur, err := h.set(ctx, saleID, userID, entryID, flashgate.DrawEntered, flashgate.DrawPending)
	if err != nil {
		return err
	}
	st, _, _, _, _ := lua.ParseDrawEntry(cur)
	switch {
	case code == lua.DrawOK, code == lua.DrawWrongState && st != flashgate.DrawWithdrawn:
		h.doneUnlessWithdrawn(ctx, saleID, userID, entryID)
		return nil
	}
	return h.checkAt(ctx, saleID, entryID, h.clock.Now())
}

// doneUnlessWithdrawn is done for an entry its hold entered (the webhook's
// or the read path's move, or the read path finding it entered), unless its
// buyer withdrew (or replaced) it since the move: the withdrawal lists the hold for its
// release (lua.DrawWithdraw), and a done after it unlisted the hold, which
// then stayed on the card (TestReleaseOnce, about once in 80 runs). The
// entry is read and the hold unlisted in one transaction under WATCH; a
// change meanwhile leaves the hold listed, which the read path settles.
func (h *Holder) doneUnlessWithdrawn(ctx context.Context, saleID, userID, entryID string) {
	key := lua.DrawKey(saleID)
	err := h.rdb.Watch(ctx, func(tx *redis.Tx) error {
		cur, err := tx.HGet(ctx, key, userID).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		if st, id, _, _, _ := lua.ParseDrawEntry(cur); id != entryID || st == flashgate.DrawWithdrawn {
			return nil // withdrawn (or replaced) since: listed for its release
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.ZRem(ctx, lua.DrawCheckKey(saleID), entryID)
			return nil
		})
		return err
	}, key)
	if err != nil {
		if !errors.Is(err, redis.TxFailedErr) {
			h.log.Warn("draw hold: leaving the check list", "entry", entryID, "err", err)
		}
		return
	}
	h.mu.Lock()
	delete(h.checks, entryID)
	h.mu.Unlock()
}

// canceled applies a released hold to entryID: a pending entry, whose
// hold can no longer be authorised, leaves the draw (withdrawn: the buyer
// may enter again) while entries are taken; after the close it is the
// close's. An entered one stays: the close's capture fails and promotes
// the next entrant.
func (h *Holder) canceled(ctx context.Context, saleID, userID, entryID string) error {
	closed, err := h.closed(ctx, saleID)
	if err != nil {
		return err
	}
	if !closed {
		if _, _, err := h.set(ctx, saleID, userID, entryID, flashgate.DrawWithdrawn, flashgate.DrawPending); err != nil {
			return err
		}
	}
	h.done(ctx, saleID, entryID)
	return nil
}

// closed reports whether saleID's entry window has closed (or the sale
// has, or the draw's close began: lua.FieldDrawShut), as the entry
// scripts read it.
func (h *Holder) closed(ctx context.Context, saleID string) (bool, error) {
	f, err := h.rdb.HMGet(ctx, lua.SaleKey(saleID), lua.FieldDrawClose, "closed", lua.FieldDrawShut).Result()
	if err != nil {
		return false, fmt.Errorf("reading the draw's close: %w: %w", flashgate.ErrUnavailable, err)
	}
	if s, _ := f[1].(string); s == "1" {
		return true, nil
	}
	if s, _ := f[2].(string); s == "1" {
		return true, nil
	}
	s, _ := f[0].(string)
	at, err := strconv.ParseInt(s, 10, 64)
	return err != nil || h.clock.Now().UnixMilli() >= at, nil
}

// retryAfter is what a provider's rate-limited error tells (payments'
// RateLimitedError).
type retryAfter interface{ RetryAfter() time.Duration }

// Reconcile is the read path: for each draw sale among sales, it asks the
// provider about the holds on its list that are due (made more than Grace
// ago and neither authorised nor released since: a lost webhook), at most
// Rate a second, and applies what it reads: an authorised hold enters its
// pending entry; a hold whose entry was withdrawn or replaced, or that
// was authorised too late, is released; one still waiting for its buyer
// is looked at again later (backoff). A 429 pauses it for the Retry-After
// asked. It returns how many holds it looked at; the leader calls it every
// tick.
func (h *Holder) Reconcile(ctx context.Context, sales []flashgate.Sale) (int, error) {
	if h.provider == nil {
		return 0, nil
	}
	now := h.clock.Now()
	h.mu.Lock()
	paused := now.Before(h.pausedUntil)
	h.mu.Unlock()
	if paused {
		return 0, nil
	}
	n := 0
	var first error
	for _, sale := range sales {
		if !sale.Draw() {
			continue
		}
		ids, err := h.rdb.ZRangeArgs(ctx, redis.ZRangeArgs{Key: lua.DrawCheckKey(sale.ID), ByScore: true,
			Start: "-inf", Stop: strconv.FormatInt(now.UnixMilli(), 10), Count: checkBatch}).Result()
		if err != nil {
			if first == nil {
				first = fmt.Errorf("reading the holds to check of %s: %w: %w", sale.ID, flashgate.ErrUnavailable, err)
			}
			continue
		}
		for _, id := range ids {
			if ctx.Err() != nil || !h.limit.Allow() {
				return n, first
			}
			n++
			err := h.look(ctx, sale.ID, id)
			var ra retryAfter
			if errors.As(err, &ra) {
				h.mu.Lock()
				h.pausedUntil = now.Add(ra.RetryAfter())
				h.mu.Unlock()
				h.log.Info("draw hold reads paused: the provider asked to wait", "retry_after", ra.RetryAfter())
				return n, first
			}
			if err != nil {
				if first == nil {
					first = err
				}
				h.log.Warn("draw hold read", "sale", sale.ID, "entry", id, "err", err)
			}
		}
	}
	return n, first
}

// look reads the hold of entryID at the provider and applies it; a hold
// still open (or one it could not read) is looked at again later.
func (h *Holder) look(ctx context.Context, saleID, entryID string) error {
	intent, user, ok, err := h.readHold(ctx, saleID, entryID)
	if err != nil {
		return err
	}
	if !ok {
		h.done(ctx, saleID, entryID)
		return nil
	}
	err = h.apply(ctx, saleID, user, entryID, intent)
	if err != nil {
		h.mu.Lock()
		k := h.checks[entryID]
		h.checks[entryID] = k + 1
		h.mu.Unlock()
		if lerr := h.checkAt(ctx, saleID, entryID, h.clock.Now().Add(backoff(k))); lerr != nil && err == nil {
			return lerr
		}
	}
	if errors.Is(err, errOpen) {
		return nil
	}
	return err
}

// errOpen is apply's word for a hold that stays open: look at it later.
var errOpen = errors.New("draw hold: still open")

// backoff is how long after its checks-th look a hold is looked at again.
func backoff(checks int) time.Duration {
	if checks >= 16 {
		return checkCap
	}
	return min(checkBase<<checks, checkCap)
}

// apply acts on the hold intent of entryID (userID's) as the provider
// tells it and as the entry stands.
func (h *Holder) apply(ctx context.Context, saleID, userID, entryID, intent string) error {
	e, ok, err := h.readEntry(ctx, saleID, userID)
	if err != nil {
		return err
	}
	if ok && e.id == entryID && e.st != flashgate.DrawPending && e.st != flashgate.DrawWithdrawn {
		// Entered (or drawn): the hold is the close's now, unless its
		// buyer withdraws it meanwhile (doneUnlessWithdrawn: a plain
		// unlisting after the withdrawal listed the hold for its release
		// took it off, and the gateway's release then asked the provider
		// nothing: explorer seed 20263362).
		h.doneUnlessWithdrawn(ctx, saleID, userID, entryID)
		return nil
	}
	if !ok || e.id != entryID || e.st == flashgate.DrawWithdrawn {
		// Withdrawn, or replaced by a new entry: release the hold.
		if _, err := h.provider.Cancel(ctx, intent); err != nil {
			return fmt.Errorf("releasing the hold of %s: %w", entryID, err)
		}
		h.done(ctx, saleID, entryID)
		return nil
	}
	in, err := h.provider.Intent(ctx, intent)
	if err != nil {
		return fmt.Errorf("reading the hold of %s: %w", entryID, err)
	}
	closed, err := h.closed(ctx, saleID)
	if err != nil {
		return err
	}
	switch {
	case in.Status == flashgate.IntentCanceled:
		return h.canceled(ctx, saleID, userID, entryID)
	case in.Status == flashgate.IntentRequiresCapture && !closed:
		code, _, err := h.set(ctx, saleID, userID, entryID, flashgate.DrawEntered, flashgate.DrawPending)
		if err != nil {
			return err
		}
		if code == lua.DrawOK {
			h.doneUnlessWithdrawn(ctx, saleID, userID, entryID)
			return nil
		}
		return errOpen // moved meanwhile: the next look sees how
	case closed:
		// Never authorised in time (or authorised after the close): it
		// does not count, and nobody should confirm it now. Unless its
		// webhook entered it while the provider was asked (in time, before
		// the close): read again, an entered entry's hold is the close's.
		if e, ok, err := h.readEntry(ctx, saleID, userID); err != nil {
			return err
		} else if ok && e.id == entryID && e.st != flashgate.DrawPending && e.st != flashgate.DrawWithdrawn {
			h.doneUnlessWithdrawn(ctx, saleID, userID, entryID)
			return nil
		}
		if _, err := h.provider.Cancel(ctx, intent); err != nil {
			return fmt.Errorf("releasing the late hold of %s: %w", entryID, err)
		}
		h.done(ctx, saleID, entryID)
		return nil
	}
	return errOpen
}
