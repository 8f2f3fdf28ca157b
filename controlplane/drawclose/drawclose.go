// Package drawclose runs a draw sale's close on the leader: it commits the
// draw's seed when entries open, and at entries_close_at it takes the
// entries whose hold was authorised, draws the winners of each variant
// (draw.Winners), stores the draw's entries file before any entry moves,
// marks the entries won or lost, captures the winners' holds and releases
// everyone else's (draw.Settle: a capture that fails promotes the next
// entrant of its variant), makes each charged entrant's order through the
// one reserve path of every sale (the inventory tier's ReserveWinner: the
// order stream, the order sink, the orders rows) and marks it paid.
//
// Every step is idempotent, so a close cut short (the leader killed, Redis
// or the provider failing) is finished by running Close again, on any
// leader: the stored file fixes the draw, captures are keyed by entry
// (draw.CaptureKey), orders by an id derived from the entry (OrderID), and
// an entry's moves (lua.DrawSet) change nothing when made twice.
package drawclose

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/draw"
	"github.com/flashgate/flashgate/fairqueue"
	"github.com/flashgate/flashgate/lua"
)

// Store is the database as the close uses it (*sqldb.DB).
type Store interface {
	// DrawEntries returns a sale's entries; PutDrawEntries stores entries
	// by id (controlplane/drawjournal).
	DrawEntries(ctx context.Context, saleID string) ([]flashgate.DrawEntry, error)
	PutDrawEntries(ctx context.Context, entries []flashgate.DrawEntry) error
	// PutDrawFile stores a draw's entries file unless one is stored, and
	// returns the stored one; DrawFile reads it (flashgate.ErrNotFound
	// without one) and whether the close finished; DrawDone records that.
	PutDrawFile(ctx context.Context, saleID string, body []byte) ([]byte, error)
	DrawFile(ctx context.Context, saleID string) (body []byte, done bool, err error)
	DrawDone(ctx context.Context, saleID string) error
	// DrawClosing records that the close reads the draw's rows from now
	// on, once every journal flush writing at the time has committed
	// (sqldb.DB.DrawClosing): a flush after it leaves out the moves to
	// entered that Redis lost since the flush read them
	// (controlplane/drawjournal).
	DrawClosing(ctx context.Context, saleID string) error
	// Transition moves an order's row from one of from to to.
	Transition(ctx context.Context, id string, from []flashgate.OrderStatus, to flashgate.OrderStatus, now time.Time) (flashgate.Order, error)
}

// Reserver makes a draw winner's order (inventory.Service.ReserveWinner):
// orderID is the caller's, and a call again with it finds the first
// call's order.
type Reserver interface {
	ReserveWinner(ctx context.Context, orderID, saleID, userID, variant string, qty int64) (string, error)
}

// Config configures a Closer. Redis, Store, Reserver and SeedSecret are
// required.
type Config struct {
	Redis    redis.UniversalClient
	Store    Store
	Reserver Reserver
	// Capturer captures and releases the entries' holds at the provider
	// (payments.Pacer around payments.Stripe); nil means simulated
	// payments (Instant): entries have no hold, captures succeed at once.
	Capturer draw.Capturer
	// SeedSecret keys the draws' seeds (Seed). Never give it to gateways.
	SeedSecret []byte
	// Flush writes a sale's journaled entry changes to the database
	// (drawjournal.Flush with the caller's Redis and store), returning
	// how many it wrote; nil writes none.
	Flush func(ctx context.Context, sale string) (int, error)
	// Workers is draw.SettleConfig.Workers; 0 means draw.DefaultWorkers.
	Workers int
	// Clock tells the time of the window; nil means flashgate.SystemClock.
	Clock flashgate.Clock
	// Logger receives the close's reports; nil means slog.Default().
	Logger *slog.Logger
}

// Closer closes draws. Its methods are safe for concurrent use.
type Closer struct {
	cfg Config

	mu       sync.Mutex
	progress map[string]*draw.Progress // by sale: the settlement under way or last run
	// settled holds, by sale, a settlement done here whose orders' rows
	// the order sink had not all written yet (finish).
	settled map[string]*settlement
}

// settlement is a settlement done, for finish: its draw, how many it
// promoted, and the orders not yet marked paid.
type settlement struct {
	f        *draw.File
	promoted int
	left     []string
}

// New returns a Closer of cfg.
func New(cfg Config) *Closer {
	if cfg.Capturer == nil {
		cfg.Capturer = Instant{}
	}
	if cfg.Clock == nil {
		cfg.Clock = flashgate.SystemClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Closer{cfg: cfg, progress: map[string]*draw.Progress{}, settled: map[string]*settlement{}}
}

// Instant is the Capturer of simulated payments: every capture succeeds and
// every release is done, at once, without a provider.
type Instant struct{}

// Capture answers a succeeded intent.
func (Instant) Capture(_ context.Context, intentID, _ string) (flashgate.Intent, error) {
	return flashgate.Intent{ID: intentID, Status: flashgate.IntentSucceeded}, nil
}

// Cancel answers a canceled intent.
func (Instant) Cancel(_ context.Context, intentID string) (flashgate.Intent, error) {
	return flashgate.Intent{ID: intentID, Status: flashgate.IntentCanceled}, nil
}

// simulated reports whether the Closer captures without a provider.
func (c *Closer) simulated() bool { _, ok := c.cfg.Capturer.(Instant); return ok }

// Seed is a draw's seed: HMAC-SHA256(secret, "draw seed/<sale id>/<entries
// open, unix ms>"). Only the control plane can derive it, the same after a
// restart, on any leader, or after Redis lost the sale; its SHA-256 is
// published when entries open and the seed itself at the close.
func Seed(secret []byte, sale flashgate.Sale) []byte {
	var open int64
	if sale.EntriesOpenAt != nil {
		open = sale.EntriesOpenAt.UnixMilli()
	}
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("draw seed/" + sale.ID + "/" + strconv.FormatInt(open, 10)))
	return m.Sum(nil)
}

// OrderID is the order a won entry becomes (flashgate.DrawOrderID).
func OrderID(entryID string) string { return flashgate.DrawOrderID(entryID) }

// Commit publishes the seed's commitment in the sale's hash
// (lua.FieldDrawSeedSHA) once entries are open; before that it does
// nothing. Writing it again writes the same value. A commitment already
// published that is not this seed's (the seed secret changed) is an error:
// the close would not verify.
func (c *Closer) Commit(ctx context.Context, sale flashgate.Sale) error {
	if !sale.Draw() || sale.EntriesOpenAt == nil || c.cfg.Clock.Now().Before(*sale.EntriesOpenAt) {
		return nil
	}
	sum := fairqueue.Commitment(Seed(c.cfg.SeedSecret, sale))
	key := lua.SaleKey(sale.ID)
	cur, err := c.cfg.Redis.HGet(ctx, key, lua.FieldDrawSeedSHA).Result()
	switch {
	case errors.Is(err, redis.Nil):
	case err != nil:
		return fmt.Errorf("committing the draw's seed: %w: %w", flashgate.ErrUnavailable, err)
	case cur == sum:
		return nil
	default:
		return fmt.Errorf("committing the draw's seed: the sale published %s, the seed derived now hashes to %s (was the seed secret changed?)", cur, sum)
	}
	// Only a sale Redis holds gets the field (HSET on a lost sale would
	// make a hash of one field).
	if n, err := c.cfg.Redis.Exists(ctx, key).Result(); err != nil || n == 0 {
		return err
	}
	if err := c.cfg.Redis.HSet(ctx, key, lua.FieldDrawSeedSHA, sum).Err(); err != nil {
		return fmt.Errorf("committing the draw's seed: %w: %w", flashgate.ErrUnavailable, err)
	}
	c.cfg.Logger.Info("draw entries open: seed committed", "sale", sale.ID, "seed_sha256", sum)
	return nil
}

// Due reports whether sale's close is due at now: a draw whose entries
// closed.
func Due(sale flashgate.Sale, now time.Time) bool {
	return sale.Draw() && sale.EntriesCloseAt != nil && !now.Before(*sale.EntriesCloseAt)
}

// Progress returns the settlement under way, or last run by this Closer,
// of sale; nil when none ran here.
func (c *Closer) Progress(sale string) *draw.Progress {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.progress[sale]
}

// Stock is the units of each variant of a draw ("" on a sale of one
// stock).
func Stock(sale flashgate.Sale) map[string]int {
	if !sale.HasVariants() {
		return map[string]int{"": int(sale.Total)}
	}
	out := make(map[string]int, len(sale.Variants))
	for _, v := range sale.Variants {
		out[v.ID] = int(v.Total)
	}
	return out
}

// maxFlushes bounds the journal's flushes of one close: at the default
// batch, a million changes.
const maxFlushes = 1000

// flush writes the whole journal to the database (bounded).
func (c *Closer) flush(ctx context.Context, sale string) error {
	if c.cfg.Flush == nil {
		return nil
	}
	for range maxFlushes {
		n, err := c.cfg.Flush(ctx, sale)
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
	}
	return fmt.Errorf("flushing the draw journal of %s: still entries after %d batches", sale, maxFlushes)
}

// Close closes sale's draw, or goes on with a close cut short; it reports
// whether the close has finished. Before entries_close_at it does nothing.
// It returns an error when a step failed: running it again goes on from
// there. done false without an error means a step waits for another
// tier (an order not yet in the database): run it again later.
func (c *Closer) Close(ctx context.Context, sale flashgate.Sale) (done bool, err error) {
	if !Due(sale, c.cfg.Clock.Now()) {
		return false, nil
	}
	if err := c.shut(ctx, sale.ID); err != nil {
		return false, err
	}
	body, finished, err := c.cfg.Store.DrawFile(ctx, sale.ID)
	switch {
	case err == nil && finished:
		return true, c.republish(ctx, sale, body)
	case err == nil:
		c.mu.Lock()
		_, settled := c.settled[sale.ID]
		c.mu.Unlock()
		if settled {
			return c.finish(ctx, sale)
		}
	case errors.Is(err, flashgate.ErrNotFound):
		body = nil
	default:
		return false, err
	}
	// Entries authorised until the close, and every move since, reach
	// the database first: the draw is of the database's rows.
	if err := c.flush(ctx, sale.ID); err != nil {
		return false, err
	}
	// A flush of another process (or of this one, begun before the
	// close's) may have read an entry's move to entered before Redis lost
	// the journal, and write it after the rows are read: the entry stood
	// entered out of the draw, its hold on the card for good. From this
	// record on, such a flush leaves the move out; one writing now is
	// waited for, its rows read below. Every run records it again, after
	// its own final flush.
	if err := c.cfg.Store.DrawClosing(ctx, sale.ID); err != nil {
		return false, err
	}
	// The shut above found no sale when Redis had lost it, and a rebuild
	// that read no record yet made the sale again unshut: a gateway whose
	// clock is behind this one's could still enter (or withdraw) an entry
	// there, after the final flush. A rebuild that reads the record shuts
	// the sale itself (resync); for one before it, shut again now and
	// write what such a gateway changed meanwhile (still in the journal,
	// so written) before the rows are read.
	if err := c.shut(ctx, sale.ID); err != nil {
		return false, err
	}
	if err := c.flush(ctx, sale.ID); err != nil {
		return false, err
	}
	rows, err := c.cfg.Store.DrawEntries(ctx, sale.ID)
	if err != nil {
		return false, err
	}
	if err := c.listUndrawn(ctx, sale.ID, rows); err != nil {
		return false, err
	}
	if body == nil {
		if body, err = c.draw(ctx, sale, rows); err != nil {
			return false, err
		}
	}
	f, err := draw.Read(bytes.NewReader(body))
	if err != nil {
		return false, fmt.Errorf("reading the stored draw of %s: %w", sale.ID, err)
	}
	if err := c.publish(ctx, sale, f, -1, false); err != nil {
		return false, err
	}
	return c.settle(ctx, sale, f, rows)
}

// listUndrawn puts the holds of sale's pending rows with an intent (out of
// the draw: never authorised in time, or authorised without the entry's
// move) on the read path's list (lua.DrawHoldKey, lua.DrawCheckKey), due
// now, unless they are there: the read path releases them (an entry not
// entered by the close does not count). A pending entry's hold is on the
// list until it is authorised or released, but the list lives in Redis
// only, and after Redis lost it nothing else released such a hold: it
// stayed on the card until the provider let it lapse.
func (c *Closer) listUndrawn(ctx context.Context, sale string, rows []flashgate.DrawEntry) error {
	now := float64(c.cfg.Clock.Now().UnixMilli())
	var n int
	_, err := c.cfg.Redis.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for _, r := range rows {
			if r.State != flashgate.DrawPending || r.PaymentIntent == "" {
				continue
			}
			n++
			p.HSetNX(ctx, lua.DrawHoldKey(sale), r.ID, r.PaymentIntent+" "+r.UserID)
			p.ZAddNX(ctx, lua.DrawCheckKey(sale), redis.Z{Score: now, Member: r.ID})
		}
		return nil
	})
	if err != nil && n > 0 {
		return fmt.Errorf("listing the holds of %s's entries not drawn: %w: %w", sale, flashgate.ErrUnavailable, err)
	}
	return nil
}

// shut marks sale's entry window shut in Redis (lua.FieldDrawShut) before
// the close reads the journal: a withdrawal or an authorisation whose
// caller's clock was still before entries_close_at (or whose script was
// sent just before it) runs either before the final flush, and the draw
// sees it, or after this, and is refused. Without it such a change lands
// after the draw read the entries: a withdrawn winner is charged, a hold
// authorised then is never released.
func (c *Closer) shut(ctx context.Context, sale string) error {
	key := lua.SaleKey(sale)
	// Only a sale Redis holds gets the field (a lost sale has no entries
	// to change).
	n, err := c.cfg.Redis.Exists(ctx, key).Result()
	if err == nil && n > 0 {
		err = c.cfg.Redis.HSet(ctx, key, lua.FieldDrawShut, 1).Err()
	}
	if err != nil {
		return fmt.Errorf("shutting the entries of %s: %w: %w", sale, flashgate.ErrUnavailable, err)
	}
	return nil
}

// draw draws sale's winners among its entered entries and stores the
// draw's file; it returns the stored file (another leader's, if it stored
// one first).
func (c *Closer) draw(ctx context.Context, sale flashgate.Sale, rows []flashgate.DrawEntry) ([]byte, error) {
	seed := Seed(c.cfg.SeedSecret, sale)
	sum := fairqueue.Commitment(seed)
	if cur, err := c.cfg.Redis.HGet(ctx, lua.SaleKey(sale.ID), lua.FieldDrawSeedSHA).Result(); err == nil && cur != sum {
		return nil, fmt.Errorf("drawing %s: the published commitment %s is not the seed's %s (was the seed secret changed?)", sale.ID, cur, sum)
	}
	var entries []draw.Entry
	for _, r := range rows {
		if r.State == flashgate.DrawEntered {
			entries = append(entries, draw.Entry{ID: r.ID, Variant: r.Variant, Quantity: int(r.Quantity)})
		}
	}
	f, err := draw.New(sale.ID, seed, Stock(sale), entries)
	if err != nil {
		return nil, fmt.Errorf("drawing %s: %w", sale.ID, err)
	}
	var buf bytes.Buffer
	if err := draw.Write(&buf, f); err != nil {
		return nil, err
	}
	stored, err := c.cfg.Store.PutDrawFile(ctx, sale.ID, buf.Bytes())
	if err != nil {
		return nil, err
	}
	c.cfg.Logger.Info("draw drawn: seed revealed", "sale", sale.ID, "entries", len(entries), "seed", hex.EncodeToString(seed))
	return stored, nil
}

// republish writes a finished close's figures to the sale's hash again
// (Redis may have lost them): body is the stored file; the promoted are
// counted from the database's rows.
func (c *Closer) republish(ctx context.Context, sale flashgate.Sale, body []byte) error {
	f, err := draw.Read(bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("reading the stored draw of %s: %w", sale.ID, err)
	}
	rows, err := c.cfg.Store.DrawEntries(ctx, sale.ID)
	if err != nil {
		return err
	}
	won := make(map[string]bool, len(f.Entries))
	for _, e := range f.Entries {
		won[e.ID] = e.Won
	}
	promoted := 0
	for _, r := range rows {
		if r.State == flashgate.DrawCaptured && !won[r.ID] {
			promoted++
		}
	}
	return c.publish(ctx, sale, f, promoted, true)
}

// publish writes the draw's public figures to the sale's hash, if Redis
// holds the sale: the commitment, the seed and the winners of f, the
// promoted (unless negative: not known yet), and the close's end when
// done.
func (c *Closer) publish(ctx context.Context, sale flashgate.Sale, f *draw.File, promoted int, done bool) error {
	key := lua.SaleKey(sale.ID)
	if n, err := c.cfg.Redis.Exists(ctx, key).Result(); err != nil || n == 0 {
		return err
	}
	var kv []any
	if f != nil {
		won := 0
		for _, e := range f.Entries {
			if e.Won {
				won++
			}
		}
		kv = append(kv, lua.FieldDrawSeedSHA, f.SeedSHA256, lua.FieldDrawSeed, hex.EncodeToString(f.Seed), lua.FieldDrawWinners, won)
	}
	if promoted >= 0 {
		kv = append(kv, lua.FieldDrawPromoted, promoted)
	}
	if done {
		kv = append(kv, lua.FieldDrawDone, 1)
	}
	if len(kv) == 0 {
		return nil
	}
	if err := c.cfg.Redis.HSet(ctx, key, kv...).Err(); err != nil {
		return fmt.Errorf("publishing the draw of %s: %w: %w", sale.ID, flashgate.ErrUnavailable, err)
	}
	return nil
}

// entryStates are the states of a close's entries as the database last
// took them, for the moves Redis cannot make (move).
type entryStates struct {
	mu sync.Mutex
	m  map[string]flashgate.DrawEntryState
}

// move moves an entry to state to from one of from (lua.DrawSet); an entry
// already past them (moved by an earlier run) is no error.
func (c *Closer) move(ctx context.Context, sale string, cur *entryStates, r flashgate.DrawEntry, to flashgate.DrawEntryState, from ...flashgate.DrawEntryState) error {
	v, err := lua.DrawSet.Run(ctx, c.cfg.Redis, lua.DrawChangeKeys(sale), c.moveArgs(r, to, from)...).Slice()
	return c.moved(ctx, sale, cur, r, to, from, v, err)
}

// moveArgs is the ARGV of lua.DrawSet moving r to to from one of from.
func (c *Closer) moveArgs(r flashgate.DrawEntry, to flashgate.DrawEntryState, from []flashgate.DrawEntryState) []any {
	args := []any{r.UserID, r.ID, string(to), c.cfg.Clock.Now().UnixMilli()}
	for _, f := range from {
		args = append(args, string(f))
	}
	return args
}

// moved takes lua.DrawSet's answer v (or its failure err) to a move of r,
// as move describes.
func (c *Closer) moved(ctx context.Context, sale string, cur *entryStates, r flashgate.DrawEntry, to flashgate.DrawEntryState, from []flashgate.DrawEntryState, v []any, err error) error {
	if err != nil {
		return fmt.Errorf("moving entry %s to %s: %w: %w", r.ID, to, flashgate.ErrUnavailable, err)
	}
	code, _ := v[0].(int64)
	switch code {
	case lua.DrawOK, lua.DrawWrongState:
		if code == lua.DrawOK {
			cur.mu.Lock()
			cur.m[r.ID] = to
			cur.mu.Unlock()
		}
		return nil
	case lua.DrawNoSale, lua.DrawNoEntry:
		// Redis lost the entry (the sale's hash missing until a rebuild
		// restores its entries from the rows): the database, the system
		// of record, takes the move under the script's rule, so that the
		// close goes on capturing and releasing.
		cur.mu.Lock()
		defer cur.mu.Unlock()
		if st := cur.m[r.ID]; st == to || !slices.Contains(from, st) {
			return nil
		}
		r.State, r.UpdatedAt = to, time.Now()
		if err := c.cfg.Store.PutDrawEntries(ctx, []flashgate.DrawEntry{r}); err != nil {
			return fmt.Errorf("moving entry %s to %s: %w", r.ID, to, err)
		}
		cur.m[r.ID] = to
		c.reapply(ctx, sale, r)
		return nil
	}
	return fmt.Errorf("moving entry %s to %s: %w", r.ID, to, lua.DrawError(code))
}

// reapply puts row r, which the close wrote to the database because Redis
// had lost its entry, into sale's Redis entries by the restore's rule
// (lua.DrawReapply: an entry only goes forward, and only the row's own
// entry or none is replaced), once a rebuild's restore has begun (its
// mark in the sale hash; before it, the restore reads the rows after this
// write). A restore that read the rows before the write put the entry
// back as it was (entered, say) with no one left to move it: the close
// was done, and Redis answered the buyer's entry entered for good while
// its row said released (the interleaving explorer's draw seed 20262575).
// Put here first, the entry is not taken back by that restore's later
// pages. A failure is logged: Redis then shows the entry behind its row
// until the next rebuild.
func (c *Closer) reapply(ctx context.Context, sale string, r flashgate.DrawEntry) {
	if _, err := lua.DrawReapply.Run(ctx, c.cfg.Redis, lua.DrawRestoreKeys(sale), 0,
		r.UserID, string(r.State), r.ID, r.Quantity, r.Variant, r.PaymentIntent, "").Int(); err != nil {
		c.cfg.Logger.Warn("draw close: putting a moved entry into the restored sale", "sale", sale, "entry", r.ID, "err", err)
	}
}

// moveWorkers is how many batches of entry moves (lua.DrawSet) a close
// has in flight; moveBatch how many moves one batch sends in one pipeline
// (a million entries' moves one round trip each took about 70 s of a
// close before its first capture).
const (
	moveWorkers = 16
	moveBatch   = 128
)

// moveAll makes the moves of entries 0..n-1, as pick names them (the entry,
// its new state, and whether it moves at all), from one of from, in
// batches of moveBatch pipelined moves, moveWorkers batches in flight; it
// returns the first failure.
func (c *Closer) moveAll(ctx context.Context, sale string, cur *entryStates, n int,
	pick func(i int) (flashgate.DrawEntry, flashgate.DrawEntryState, bool), from ...flashgate.DrawEntryState) error {
	var (
		next  atomic.Int64
		first atomic.Pointer[error]
		wg    sync.WaitGroup
	)
	// The script is loaded once, so that the pipelines' EVALSHA find it;
	// a batch that meets NOSCRIPT anyway (Redis restarted) moves its
	// entries one by one (move, whose Run loads it again).
	if n > 0 {
		if err := lua.DrawSet.Load(ctx, c.cfg.Redis).Err(); err != nil {
			return fmt.Errorf("loading the draw's move script: %w: %w", flashgate.ErrUnavailable, err)
		}
	}
	keys := lua.DrawChangeKeys(sale)
	for range min(moveWorkers, max((n+moveBatch-1)/moveBatch, 1)) {
		wg.Go(func() {
			rs := make([]flashgate.DrawEntry, 0, moveBatch)
			tos := make([]flashgate.DrawEntryState, 0, moveBatch)
			cmds := make([]*redis.Cmd, 0, moveBatch)
			for {
				lo := int(next.Add(moveBatch) - moveBatch)
				if lo >= n || first.Load() != nil {
					return
				}
				rs, tos, cmds = rs[:0], tos[:0], cmds[:0]
				for i := lo; i < min(lo+moveBatch, n); i++ {
					if r, to, ok := pick(i); ok {
						rs, tos = append(rs, r), append(tos, to)
					}
				}
				if len(rs) == 0 {
					continue
				}
				pipe := c.cfg.Redis.Pipeline()
				for j, r := range rs {
					cmds = append(cmds, lua.DrawSet.EvalSha(ctx, pipe, keys, c.moveArgs(r, tos[j], from)...))
				}
				_, _ = pipe.Exec(ctx) // each command carries its own error
				for j, r := range rs {
					v, err := cmds[j].Slice()
					if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
						err = c.move(ctx, sale, cur, r, tos[j], from...)
					} else {
						err = c.moved(ctx, sale, cur, r, tos[j], from, v, err)
					}
					if err != nil {
						first.CompareAndSwap(nil, &err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if err := first.Load(); err != nil {
		return *err
	}
	return nil
}

// settle marks the file's entries won or lost, captures and releases their
// holds, makes the charged entrants' orders and marks them paid.
func (c *Closer) settle(ctx context.Context, sale flashgate.Sale, f *draw.File, rows []flashgate.DrawEntry) (bool, error) {
	byID := make(map[string]flashgate.DrawEntry, len(rows))
	cur := &entryStates{m: make(map[string]flashgate.DrawEntryState, len(rows))}
	for _, r := range rows {
		byID[r.ID] = r
		cur.m[r.ID] = r.State
	}
	entries := make([]draw.Entry, 0, len(f.Entries))
	for _, e := range f.Entries {
		r, ok := byID[e.ID]
		if !ok {
			return false, fmt.Errorf("settling the draw of %s: entry %s of the draw has no row", sale.ID, e.ID)
		}
		e.IntentID = r.PaymentIntent
		if e.IntentID == "" {
			if !c.simulated() {
				return false, fmt.Errorf("settling the draw of %s: entry %s has no card hold", sale.ID, e.ID)
			}
			e.IntentID = "simulated-" + e.ID
		}
		entries = append(entries, e)
	}
	// Every drawn entry won or lost, before any hold moves.
	if err := c.moveAll(ctx, sale.ID, cur, len(entries), func(i int) (flashgate.DrawEntry, flashgate.DrawEntryState, bool) {
		if entries[i].Won {
			return byID[entries[i].ID], flashgate.DrawWon, true
		}
		return byID[entries[i].ID], flashgate.DrawLost, true
	}, flashgate.DrawEntered); err != nil {
		return false, err
	}
	prog := &draw.Progress{}
	c.mu.Lock()
	c.progress[sale.ID] = prog
	c.mu.Unlock()
	var (
		mu      sync.Mutex
		failed  error
		charged []flashgate.DrawEntry
	)
	// The orders are marked paid as their rows arrive, while the
	// settlement goes on (a draw's captures take minutes; an order left
	// unpaid for the payment window would expire).
	pay := newPayer(c, sale.ID)
	pctx, stopPaying := context.WithCancel(ctx)
	paying := make(chan struct{})
	go func() { defer close(paying); pay.run(pctx) }()
	captured := func(e draw.Entry, _ flashgate.Intent) {
		r := byID[e.ID]
		err := c.order(ctx, sale, cur, r)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			if failed == nil {
				failed = err
			}
			return
		}
		r.OrderID = OrderID(r.ID)
		charged = append(charged, r)
		pay.add(r.OrderID)
	}
	st, err := draw.Settle(ctx, c.cfg.Capturer, sale.ID, f.Seed, f.Stock, entries, draw.SettleConfig{Workers: c.cfg.Workers, Progress: prog, Captured: captured})
	stopPaying()
	<-paying
	if err != nil {
		return false, fmt.Errorf("settling the draw of %s: %w", sale.ID, err)
	}
	if failed != nil {
		return false, fmt.Errorf("settling the draw of %s: %w", sale.ID, failed)
	}
	won := make(map[string]bool, len(entries))
	promoted := 0
	for _, es := range st.Captured {
		for _, e := range es {
			won[e.ID] = true
			if !e.Won {
				promoted++
			}
		}
	}
	if err := c.moveAll(ctx, sale.ID, cur, len(entries), func(i int) (flashgate.DrawEntry, flashgate.DrawEntryState, bool) {
		return byID[entries[i].ID], flashgate.DrawReleased, !won[entries[i].ID]
	}, flashgate.DrawWon, flashgate.DrawLost); err != nil {
		return false, err
	}
	if err := c.publish(ctx, sale, f, promoted, false); err != nil {
		return false, err
	}
	if err := c.flush(ctx, sale.ID); err != nil {
		return false, err
	}
	if err := c.recordOrders(ctx, sale.ID, f, cur, charged); err != nil {
		return false, err
	}
	c.cfg.Logger.Info("draw settled", "sale", sale.ID, "entries", len(entries), "captured", len(charged),
		"promoted", promoted, "declined", st.Declined, "released", len(entries)-len(charged))
	// Every hold is captured or released: what is left is the orders
	// whose rows had not arrived. A run again in this process waits for
	// them only, without settling again.
	c.mu.Lock()
	c.settled[sale.ID] = &settlement{f: f, promoted: promoted, left: pay.left()}
	c.mu.Unlock()
	return c.finish(ctx, sale)
}

// orderPolls bounds one run's wait for the orders' rows: at payEvery, 30 s.
const orderPolls = 600

// finish marks paid the orders of sale's settlement (this process's) whose
// rows had not arrived, waiting for them a while, and records the close
// finished once none is left; done false without an error: some still
// wait (the order sink is behind).
func (c *Closer) finish(ctx context.Context, sale flashgate.Sale) (bool, error) {
	c.mu.Lock()
	st := c.settled[sale.ID]
	left := st.left
	c.mu.Unlock()
	for i := 0; len(left) > 0; i++ {
		var still []string
		for _, id := range left {
			ok, err := c.markPaid(ctx, sale.ID, id)
			if err != nil {
				return false, err
			}
			if !ok {
				still = append(still, id)
			}
		}
		left = still
		c.mu.Lock()
		st.left = left
		c.mu.Unlock()
		if len(left) == 0 {
			break
		}
		if i == orderPolls {
			c.cfg.Logger.Info("draw settled; orders not yet in the database", "sale", sale.ID, "waiting", len(left))
			return false, nil
		}
		t := time.NewTimer(payEvery)
		select {
		case <-ctx.Done():
			t.Stop()
			return false, ctx.Err()
		case <-t.C:
		}
	}
	if err := c.cfg.Store.DrawDone(ctx, sale.ID); err != nil {
		return false, err
	}
	c.mu.Lock()
	delete(c.settled, sale.ID)
	c.mu.Unlock()
	c.cfg.Logger.Info("draw closed", "sale", sale.ID)
	return true, c.publish(ctx, sale, st.f, st.promoted, true)
}

// order makes the order of a charged entry and marks the entry captured.
// An entry captured already (by an earlier run, or another leader's close
// at the same time: it is marked captured only once its order was made),
// as the rows read or Redis says, is not reserved again: its order may
// have been refunded and its unit released since, and a reserve again
// counted the unit in Redis once more for an order the database holds
// refunded (the sink's insert of it changes nothing), hiding it for good
// (the interleaving explorer's draw seeds 411 and 3535).
func (c *Closer) order(ctx context.Context, sale flashgate.Sale, cur *entryStates, r flashgate.DrawEntry) error {
	cur.mu.Lock()
	st := cur.m[r.ID]
	cur.mu.Unlock()
	if st == flashgate.DrawCaptured {
		return nil
	}
	if v, err := c.cfg.Redis.HGet(ctx, lua.DrawKey(sale.ID), r.UserID).Result(); err == nil {
		if st, id, _, _, ok := lua.ParseDrawEntry(v); ok && id == r.ID && st == flashgate.DrawCaptured {
			return nil
		}
	}
	if _, err := c.cfg.Reserver.ReserveWinner(ctx, OrderID(r.ID), sale.ID, r.UserID, r.Variant, r.Quantity); err != nil {
		var p *flashgate.PurchasedError
		if !errors.As(err, &p) || p.OrderID != OrderID(r.ID) {
			return fmt.Errorf("making the order of entry %s: %w", r.ID, err)
		}
	}
	return c.move(ctx, sale.ID, cur, r, flashgate.DrawCaptured, flashgate.DrawWon, flashgate.DrawLost)
}

// recordOrders writes the charged entries' order ids to their rows, and
// the state the close left each drawn entry in to its row where the row
// has not gone that far (the journal of its moves lost with Redis before
// a flush), each with its row's latest time, so that it changes no state
// the journal wrote.
func (c *Closer) recordOrders(ctx context.Context, sale string, f *draw.File, cur *entryStates, charged []flashgate.DrawEntry) error {
	rows, err := c.cfg.Store.DrawEntries(ctx, sale)
	if err != nil {
		return err
	}
	byID := make(map[string]flashgate.DrawEntry, len(rows))
	for _, r := range rows {
		byID[r.ID] = r
	}
	orders := make(map[string]string, len(charged))
	for _, ch := range charged {
		orders[ch.ID] = ch.OrderID
	}
	cur.mu.Lock()
	defer cur.mu.Unlock()
	var out []flashgate.DrawEntry
	for _, e := range f.Entries {
		r, ok := byID[e.ID]
		if !ok {
			continue
		}
		changed := false
		if o := orders[e.ID]; o != "" && r.OrderID != o {
			r.OrderID, changed = o, true
		}
		if st := cur.m[e.ID]; st.Rank() > r.State.Rank() {
			r.State, changed = st, true
		}
		if changed {
			out = append(out, r)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return c.cfg.Store.PutDrawEntries(ctx, out)
}

// markPaid marks a charged entry's order paid; ok is false while its row
// is not in the database yet. An order already paid is ok; one that left
// the live statuses (expired, cancelled, refunded) was charged all the
// same, and is reported.
func (c *Closer) markPaid(ctx context.Context, sale, orderID string) (bool, error) {
	o, err := c.cfg.Store.Transition(ctx, orderID, []flashgate.OrderStatus{flashgate.StatusPendingPayment}, flashgate.StatusPaid, c.cfg.Clock.Now())
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, flashgate.ErrNotFound):
		return false, nil
	case errors.Is(err, flashgate.ErrNotPayable) && o.Status == flashgate.StatusPendingPayment:
		// The row arrived between the update and the read: try again.
		return false, nil
	case errors.Is(err, flashgate.ErrNotPayable):
		if o.Status != flashgate.StatusPaid {
			c.cfg.Logger.Error("draw close: a charged entry's order is not live; refund it by hand", "sale", sale, "order", orderID, "status", o.Status)
		}
		return true, nil
	}
	return false, fmt.Errorf("settling the draw of %s: order %s: %w", sale, orderID, err)
}

// payEvery is how often a payer tries the orders whose rows had not
// arrived.
const payEvery = 50 * time.Millisecond

// payer marks the orders of a settlement paid as their rows arrive.
type payer struct {
	c    *Closer
	sale string

	mu      sync.Mutex
	pending []string // orders whose rows have not arrived
}

func newPayer(c *Closer, sale string) *payer { return &payer{c: c, sale: sale} }

func (p *payer) add(orderID string) {
	p.mu.Lock()
	p.pending = append(p.pending, orderID)
	p.mu.Unlock()
}

// left returns the orders not marked paid yet.
func (p *payer) left() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.pending...)
}

// run marks the pending orders paid every payEvery until ctx ends.
func (p *payer) run(ctx context.Context) {
	t := time.NewTicker(payEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, id := range p.left() {
			ok, err := p.c.markPaid(ctx, p.sale, id)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				// Tried again at the next tick: a payer that stopped here
				// would leave every order charged from now on unpaid until
				// the settlement ends, minutes on a large draw, and one
				// unpaid past the payment window expires.
				p.c.cfg.Logger.Warn("draw close: marking an order paid", "sale", p.sale, "order", id, "err", err)
				break
			}
			if ok {
				p.mu.Lock()
				for i, x := range p.pending {
					if x == id {
						p.pending = append(p.pending[:i], p.pending[i+1:]...)
						break
					}
				}
				p.mu.Unlock()
			}
		}
	}
}
