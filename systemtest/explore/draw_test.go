package explore

import (
	"context"
	"flag"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane"
	"github.com/flashgate/flashgate/controlplane/drawclose"
	"github.com/flashgate/flashgate/controlplane/drawjournal"
	"github.com/flashgate/flashgate/lua"
)

// Draw schedules: a draw sale's entries, card holds, journal, close and
// what follows it, among the same machinery as the other schedules (the
// scheduler, the hooks, the provider, the quiet phase and the checks).

var flagDraws = flag.Bool("draws", true, "make one in four schedules a draw sale's (entries with card holds, withdrawals, the journal, the close, refunds of won orders)")

// The draw's window: entries open at the schedule's start and close
// entryWindow later.
const entryWindow = 10 * time.Minute

// drawWorld is what a draw schedule adds to its world.
type drawWorld struct {
	n       int               // entry ids minted
	entrant map[string]string // entry id → its buyer
	// due is set once the clock passed the entries' close; closed once a
	// close finished.
	due, closed bool
	lost        bool // a FLUSHALL lost Redis during the entries
	// calls counts the close's calls of each kind per intent
	// (closeCapturer.lost).
	mu    sync.Mutex
	calls map[string]int
}

// pickDraw draws whether seed's schedule is a draw sale's: one in four
// with -draws (the default), from a generator of its own, so that every
// other schedule takes the same steps from its seed as before draws were
// drawn; never a seed's of corpus or bucketedCorpus, always one's of
// drawCorpus.
func pickDraw(seed uint64) bool {
	if slices.Contains(drawCorpus, seed) {
		return true
	}
	g := rand.New(rand.NewPCG(seed^0x6a09e667f3bcc909, seed+3))
	return *flagDraws && !slices.Contains(corpus, seed) && !slices.Contains(bucketedCorpus, seed) && g.IntN(4) == 0
}

// drawSale draws the schedule's draw sale: one unit, two units, or one
// unit of each of two variants; one unit per entry.
func (w *world) drawSale() flashgate.Sale {
	open := w.clock.Now()
	closeAt := open.Add(entryWindow)
	sale := flashgate.Sale{ID: fmt.Sprintf("x%d", w.seed), Name: "Explore", PriceCents: 1000, Total: 1, PerUser: 1,
		Queue: flashgate.QueueDraw, EntriesOpenAt: &open, EntriesCloseAt: &closeAt}
	switch w.rng.IntN(3) {
	case 0:
		sale.Variants = []flashgate.Variant{{ID: "S", Name: "Small", Total: 1}, {ID: "M", Name: "Medium", Total: 1}}
		sale.Total = 2
		w.notes = append(w.notes, "sale: a draw of two variants of one unit")
	case 1:
		sale.Total = 2
		w.notes = append(w.notes, "sale: a draw of two units")
	default:
		w.notes = append(w.notes, "sale: a draw of one unit")
	}
	return sale
}

// planDraw spawns a draw schedule's actors.
func (w *world) planDraw() {
	r := w.rng
	nb := 2 + r.IntN(3)
	for i := range nb {
		u := fmt.Sprintf("u%d", i)
		w.users = append(w.users, u)
		w.s.Spawn("entrant-"+u, w.entrantActor(u))
	}
	w.s.Spawn("sink", w.sinkActor(1+r.IntN(3)))
	// Two leaders' ticks at once: a failover (each its own process).
	leaders := 1 + r.IntN(2)
	for range leaders {
		w.s.Spawn("leader", w.drawLeader(2+r.IntN(4)))
	}
	w.s.Spawn("clock", w.drawClock())
	closers := 1 + r.IntN(2)
	for range closers {
		w.s.Spawn("closer", w.closer())
	}
	if r.IntN(3) == 0 {
		w.s.Spawn("resync", w.resync(1+r.IntN(3)))
	}
	if r.IntN(4) == 0 {
		w.s.Spawn("flushall", w.drawFlushAll())
		w.notes = append(w.notes, "a FLUSHALL during the entries, and a rebuild")
	}
	if r.IntN(2) == 0 {
		w.s.Spawn("admin", w.drawAdmin())
		w.notes = append(w.notes, "an admin refunding a won order")
	}
	if r.IntN(3) == 0 {
		w.s.Spawn("winner", w.winnerPays())
		w.notes = append(w.notes, "a winner paying its won order")
	}
	if r.IntN(3) == 0 {
		w.s.killAt = r.IntN(250)
		w.s.onKill = w.restart
		w.notes = append(w.notes, fmt.Sprintf("a kill at step %d", w.s.killAt))
	}
	strategy := "uniform"
	if w.s.pct {
		strategy = fmt.Sprintf("PCT, change points %v", w.s.change)
	}
	w.notes = append(w.notes, fmt.Sprintf("%d entrants, %d leaders, %d closers; picks: %s", nb, leaders, closers, strategy))
}

// entryID mints the next entry id of the schedule (the gateway mints a
// random one).
func (w *world) entryID() string {
	w.dw.n++
	return fmt.Sprintf("d%d", w.dw.n)
}

// entrantActor is a buyer in a draw: it enters (the gateway's script and
// the hold it asks for at once), authorises the hold at the provider's
// page (or fails, or walks away, or with a card that declines at
// capture), may ask for the hold again, withdraws and enters again.
func (w *world) entrantActor(u string) func(context.Context) {
	return func(ctx context.Context) {
		// The control plane behind this buyer's gateway: a hold may
		// flush the journal, under its process's lock, which an actor
		// parked in a flush of a shared one would hold (a process's
		// other requests wait for it; here nobody would move).
		cp, err := w.newCP()
		if err != nil {
			panic(err)
		}
		r := w.rng
		rounds := 1 + r.IntN(3)
		for round := range rounds {
			if w.think(ctx, r.IntN(4)) != nil {
				return
			}
			v := w.variant()
			now := w.clock.Now()
			res, err := lua.DrawEnter.Run(ctx, w.rdb, lua.DrawEnterKeys(w.sale.ID, "none"), u, w.entryID(), v, 1, now.UnixMilli(), 0).Slice()
			if err != nil || len(res) < 2 {
				w.say(ctx, "enter %q: %v %v", v, res, err)
				if Killed(ctx) {
					return
				}
				continue
			}
			code, _ := res[0].(int64)
			entry, _ := res[1].(string)
			w.say(ctx, "enter %q: %d %s", v, code, entry)
			if code == lua.DrawClosed {
				return
			}
			st, id, _, _, ok := lua.ParseDrawEntry(entry)
			if !ok {
				continue
			}
			w.dw.entrant[id] = u
			if st == flashgate.DrawPending {
				if w.hold(ctx, cp, u) != nil {
					return
				}
			}
			if round == rounds-1 || r.IntN(2) == 0 {
				return
			}
			if w.think(ctx, r.IntN(6)) != nil || w.withdraw(ctx, cp, u) != nil {
				return
			}
		}
	}
}

// hold asks for u's hold (the gateway's call after a pending entry, then
// POST /entry/pay when the answer had none) and authorises it at the
// provider's page, as the buyer draws.
func (w *world) hold(ctx context.Context, cp *controlplane.Service, u string) error {
	r := w.rng
	var d flashgate.DrawEntry
	for try := range 2 {
		var err error
		d, err = cp.HoldEntry(ctx, w.sale.ID, u)
		w.say(ctx, "hold: %s %s %s %v", d.ID, d.State, d.PaymentIntent, err)
		if Killed(ctx) {
			return errKilled
		}
		if err == nil && d.ClientSecret != "" || try == 1 {
			break
		}
		if w.think(ctx, r.IntN(3)) != nil {
			return errKilled
		}
	}
	if d.ClientSecret == "" || d.State != flashgate.DrawPending {
		return nil // the page has nothing to authorise the hold with
	}
	if err := w.s.Yield(ctx, "provider page "+d.PaymentIntent); err != nil {
		return err
	}
	switch n := r.IntN(8); {
	case n == 0:
		w.say(ctx, "walks away from %s", d.PaymentIntent)
		return nil
	case n == 1:
		w.say(ctx, "card declined on %s: moved %v", d.PaymentIntent, w.prov.Pay(d.PaymentIntent, flashgate.IntentFailed))
		if r.IntN(2) == 0 {
			return nil
		}
		if err := w.think(ctx, r.IntN(3)); err != nil {
			return err
		}
		fallthrough
	default:
		decline := r.IntN(5) == 0
		w.say(ctx, "authorises %s (declines at capture: %v): moved %v", d.PaymentIntent, decline, w.prov.Confirm(d.PaymentIntent, decline))
	}
	if r.IntN(3) == 0 {
		// The page reads the entry again (POST /entry/pay).
		d, err := cp.HoldEntry(ctx, w.sale.ID, u)
		w.say(ctx, "pay again: %s %s %v", d.ID, d.State, err)
	}
	return nil
}

// withdraw is DELETE /api/sales/{id}/entry: the script, then the release
// of the hold.
func (w *world) withdraw(ctx context.Context, cp *controlplane.Service, u string) error {
	now := w.clock.Now()
	res, err := lua.DrawWithdraw.Run(ctx, w.rdb, lua.DrawWithdrawKeys(w.sale.ID), u, now.UnixMilli(), now.Add(5*time.Second).UnixMilli()).Slice()
	w.say(ctx, "withdraw: %v %v", res, err)
	if Killed(ctx) {
		return errKilled
	}
	if err != nil || len(res) < 1 || res[0] != int64(lua.DrawOK) {
		return nil
	}
	d, err := cp.ReleaseEntry(ctx, w.sale.ID, u)
	w.say(ctx, "release: %s %s %v", d.ID, d.State, err)
	if Killed(ctx) {
		return errKilled
	}
	return nil
}

// drawLeader is a leader's tick n times, as far as a draw goes: the
// journal's flush, the holds' read path, the seed's commitment, and the
// orders' reconciliation and expiry.
func (w *world) drawLeader(n int) func(context.Context) {
	return func(ctx context.Context) {
		cp, err := w.newCP()
		if err != nil {
			panic(err)
		}
		ctx = controlplane.WithFencingToken(ctx, w.token())
		for i := range n {
			if i > 0 && w.rng.IntN(3) == 0 {
				if _, err := w.s.Await(ctx, "the close", func() bool { return w.dw.due }); err != nil {
					return
				}
			}
			if w.think(ctx, w.rng.IntN(6)) != nil {
				return
			}
			k, err := drawjournal.Flush(ctx, w.rdb, w.store, w.sale.ID, 0)
			w.say(ctx, "flushed %d %v", k, err)
			if Killed(ctx) {
				return
			}
			k, err = cp.ReconcileHolds(ctx, []flashgate.Sale{w.sale})
			w.say(ctx, "read %d holds %v", k, err)
			if Killed(ctx) {
				return
			}
			w.say(ctx, "commit: %v", cp.CommitDraw(ctx, w.sale))
			if i%2 == 1 {
				k, err = cp.ReconcilePayments(ctx)
				w.say(ctx, "reconciled %d %v", k, err)
				k, err = cp.ExpireDue(ctx)
				w.say(ctx, "expired %d %v", k, err)
			}
		}
	}
}

// drawClock moves the clock: maybe past the holds' grace while entries
// are open (the read path looks at them), then past the entries' close.
func (w *world) drawClock() func(context.Context) {
	return func(ctx context.Context) {
		if w.rng.IntN(2) == 0 {
			if w.think(ctx, w.rng.IntN(15)) != nil || w.s.Yield(ctx, "clock +grace") != nil {
				return
			}
			w.clock.Add(grace + time.Second)
		}
		if w.think(ctx, w.rng.IntN(30)) != nil || w.s.Yield(ctx, "clock past the entries' close") != nil {
			return
		}
		w.clock.Set(w.sale.EntriesCloseAt.Add(time.Duration(w.rng.IntN(3)) * time.Second))
		w.dw.due = true
	}
}

// closer is a leader's close of the draw, run again until it finished
// (each in its own process: two closers are two leaders). The close
// yields at each of its calls until its settlement starts; from there
// (the capture and release workers, the orders' payer) it runs as one
// step.
func (w *world) closer() func(context.Context) {
	return func(ctx context.Context) {
		cp, err := w.newCP()
		if err != nil {
			panic(err)
		}
		ctx = controlplane.WithFencingToken(ctx, w.token())
		if ok, err := w.s.Await(ctx, "the entries' close", func() bool { return w.dw.due }); !ok || err != nil {
			return
		}
		for range 4 {
			if w.think(ctx, w.rng.IntN(4)) != nil {
				return
			}
			cctx := context.WithValue(ctx, unyieldingKey{}, new(atomic.Bool))
			done, err := cp.CloseDraw(cctx, w.sale)
			w.say(ctx, "close: done %v %v", done, err)
			if Killed(ctx) {
				return
			}
			if done {
				w.dw.closed = true
				return
			}
		}
	}
}

// drawFlushAll loses Redis during the entries; a restarted leader's
// re-syncs rebuild the sale (RestoreDraw puts the entries back).
func (w *world) drawFlushAll() func(context.Context) {
	return func(ctx context.Context) {
		if w.think(ctx, w.rng.IntN(25)) != nil {
			return
		}
		err := w.rdb.FlushAll(ctx).Err()
		w.flushed = w.flushed || err == nil
		w.dw.lost = w.dw.lost || err == nil
		w.say(ctx, "FLUSHALL: %v", err)
		cp, err := w.newCP()
		if err != nil {
			panic(err)
		}
		ctx = controlplane.WithFencingToken(ctx, w.token())
		for range 2 {
			if w.think(ctx, w.rng.IntN(4)) != nil {
				return
			}
			_, after, err := cp.Resync(ctx, w.sale.ID)
			w.say(ctx, "re-synced: booked %d %v", after.Booked, err)
		}
	}
}

// wonOrders are the orders of the draw's entries that are rows (a won
// entry's order is "o" and its id), read without a yield.
func (w *world) wonOrders() []string {
	var ids []string
	for id := range w.dw.entrant {
		if w.stored(drawclose.OrderID(id)) {
			ids = append(ids, drawclose.OrderID(id))
		}
	}
	sort.Strings(ids)
	return ids
}

// drawAdmin refunds a won order once it is a row (maybe twice).
func (w *world) drawAdmin() func(context.Context) {
	return func(ctx context.Context) {
		if ok, err := w.s.Await(ctx, "a won order", func() bool { return len(w.wonOrders()) > 0 }); !ok || err != nil {
			return
		}
		if w.think(ctx, w.rng.IntN(8)) != nil {
			return
		}
		ids := w.wonOrders()
		id := ids[w.rng.IntN(len(ids))]
		for range 1 + w.rng.IntN(2) {
			o, err := w.cp.Refund(ctx, id)
			w.say(ctx, "refund %s: %s %v", id, o.Status, err)
			if Killed(ctx) || w.think(ctx, w.rng.IntN(4)) != nil {
				return
			}
		}
	}
}

// winnerPays is a winner who pays its won order (already charged from its
// hold) through the order's pay route, at the provider's page too.
func (w *world) winnerPays() func(context.Context) {
	return func(ctx context.Context) {
		if ok, err := w.s.Await(ctx, "a won order", func() bool { return len(w.wonOrders()) > 0 }); !ok || err != nil {
			return
		}
		if w.think(ctx, w.rng.IntN(6)) != nil {
			return
		}
		ids := w.wonOrders()
		id := ids[w.rng.IntN(len(ids))]
		u := w.dw.entrant[strings.TrimPrefix(id, drawclose.OrderID(""))]
		o, err := w.cp.Pay(ctx, id, u)
		w.say(ctx, "pay %s: %s %s %v", id, o.Status, o.PaymentIntent, err)
		if o.PaymentIntent != "" && w.s.Yield(ctx, "provider page "+o.PaymentIntent) == nil {
			w.say(ctx, "pays %s: moved %v", o.PaymentIntent, w.prov.Pay(o.PaymentIntent, flashgate.IntentSucceeded))
		}
	}
}

// restartDraw is what follows a kill in a draw schedule: the restarted
// process's sink pass, journal flush and read of the holds, re-sync and
// close.
func (w *world) restartDraw() {
	w.s.Spawn("restart-sink", func(ctx context.Context) {
		k, err := w.newSink().DrainOnce(ctx)
		w.say(ctx, "drained %d %v", k, err)
	})
	w.s.Spawn("restart-resync", w.resync(1))
	w.s.Spawn("restart-leader", w.drawLeader(1))
	w.s.Spawn("restart-closer", w.closer())
}

// drawReserver makes a winner's order as the close does
// (inventory.Service.ReserveWinner) and stores it at once (an order sink
// keeping up): the close marks a winner's order paid once it is a row, and
// waits for the rows in real time otherwise.
type drawReserver struct{ w *world }

func (d drawReserver) ReserveWinner(ctx context.Context, orderID, saleID, userID, variant string, qty int64) (string, error) {
	id, err := d.w.inv.ReserveWinner(ctx, orderID, saleID, userID, variant, qty)
	if err == nil {
		_, _ = d.w.newSink().DrainOnce(ctx)
	}
	return id, err
}

// closeCapturer is the provider as a close reaches it (draw.Capturer): its
// first call starts the settlement, from which the close runs as one step
// (unyieldingKey); the first capture or release of some holds loses its
// answer after acting (a timeout), drawn from the seed and the intent so
// that the workers' order does not change it.
type closeCapturer struct{ w *world }

func (c closeCapturer) start(ctx context.Context) {
	if f, _ := ctx.Value(unyieldingKey{}).(*atomic.Bool); f != nil {
		f.Store(true)
	}
}

// lost reports whether the answer of this call (kind, of intent) is lost.
func (c closeCapturer) lost(kind, intent string) bool {
	key := fmt.Sprintf("%d/%s/%s", c.w.seed, kind, intent)
	d := c.w.dw
	d.mu.Lock()
	d.calls[key]++
	first := d.calls[key] == 1
	d.mu.Unlock()
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return first && h.Sum32()%5 == 0
}

func (c closeCapturer) Capture(ctx context.Context, intent, key string) (flashgate.Intent, error) {
	c.start(ctx)
	in, err := c.w.prov.Capture(ctx, intent, key)
	if err == nil && c.lost("capture", intent) {
		return flashgate.Intent{}, fmt.Errorf("provider capture: timeout after: %w", flashgate.ErrUnavailable)
	}
	return in, err
}

func (c closeCapturer) Cancel(ctx context.Context, intent string) (flashgate.Intent, error) {
	c.start(ctx)
	in, err := c.w.prov.Cancel(ctx, intent)
	if err == nil && c.lost("cancel", intent) {
		return flashgate.Intent{}, fmt.Errorf("provider cancel: timeout after: %w", flashgate.ErrUnavailable)
	}
	return in, err
}

// quiesceDraw is a draw's part of a round of the quiet phase, after the
// clock moved past the entries' close: the journal, the close, the holds'
// read path.
func (w *world) quiesceDraw(ctx context.Context, step func(string, error)) {
	_, err := drawjournal.Flush(ctx, w.rdb, w.store, w.sale.ID, 0)
	step("draw journal", err)
	_, err = w.cp.ReconcileHolds(ctx, []flashgate.Sale{w.sale})
	step("draw holds", err)
	if !w.clock.Now().Before(*w.sale.EntriesCloseAt) {
		done, err := w.cp.CloseDraw(ctx, w.sale)
		w.dw.closed = w.dw.closed || done
		step("draw close", err)
	}
	_, err = w.cp.ReconcileHolds(ctx, []flashgate.Sale{w.sale})
	step("draw holds", err)
	_, err = drawjournal.Flush(ctx, w.rdb, w.store, w.sale.ID, 0)
	step("draw journal", err)
}

// The broken invariants of a draw.
const (
	kindDrawOpen      = "draw close never finished"
	kindDrawWinners   = "draw: more winners than units"
	kindDrawTwoWins   = "draw: two won entries of one buyer"
	kindDrawNoOrder   = "draw: captured entry without its paid order"
	kindDrawCapture   = "draw: hold captured, entry not"
	kindDrawUndrawn   = "draw: entry left undrawn after the close"
	kindHoldLeft      = "draw: hold left on a card"
	kindDrawRedis     = "draw: Redis and draw_entries disagree"
	kindChargedTwice  = "order charged twice"
	kindCapturedTwice = "hold captured twice"
)

// checkDraw judges a draw schedule at rest.
func (w *world) checkDraw(ctx context.Context, orders map[string]flashgate.Order) ([]finding, error) {
	var out []finding
	add := func(kind, format string, args ...any) {
		out = append(out, finding{kind: kind, detail: fmt.Sprintf(format, args...)})
	}
	rows, err := w.e.db.DrawEntries(ctx, w.sale.ID)
	if err != nil {
		return nil, err
	}
	byID := map[string]flashgate.DrawEntry{}
	for _, r := range rows {
		byID[r.ID] = r
	}
	if _, done, err := w.e.db.DrawFile(ctx, w.sale.ID); err != nil || !done {
		add(kindDrawOpen, "entries file: done %v, %v", done, err)
	}
	ledger := w.prov.Ledger()
	intents := map[string]ledgerIntent{}
	for _, in := range ledger {
		intents[in.ID] = in
	}
	stock := drawclose.Stock(w.sale)
	won := map[string]int64{}
	wins := map[string][]string{}
	for _, r := range rows {
		switch r.State {
		case flashgate.DrawEntered, flashgate.DrawWon, flashgate.DrawLost:
			add(kindDrawUndrawn, "entry %s of %s is %s", r.ID, r.UserID, r.State)
		case flashgate.DrawCaptured:
			won[r.Variant] += r.Quantity
			wins[r.UserID] = append(wins[r.UserID], r.ID)
			o, ok := orders[drawclose.OrderID(r.ID)]
			if !ok || (o.Status != flashgate.StatusPaid && o.Status != flashgate.StatusRefunded) {
				add(kindDrawNoOrder, "entry %s of %s: order %s %v (%s)", r.ID, r.UserID, drawclose.OrderID(r.ID), ok, o.Status)
			}
			in := intents[r.PaymentIntent]
			if in.Status != flashgate.IntentSucceeded || in.AmountCents != w.sale.PriceCents*r.Quantity {
				add(kindDrawNoOrder, "entry %s of %s: its hold %s is %s of %d", r.ID, r.UserID, r.PaymentIntent, in.Status, in.AmountCents)
			}
		}
	}
	for v, n := range won {
		if n > int64(stock[v]) {
			add(kindDrawWinners, "variant %q: %d units won of %d", v, n, stock[v])
		}
	}
	for _, u := range sortedKeys(wins) {
		if len(wins[u]) > 1 {
			add(kindDrawTwoWins, "%s won %v", u, wins[u])
		}
	}
	charges := map[string][]string{}
	for _, in := range ledger {
		orderID := in.OrderID
		if in.EntryID != "" {
			orderID = drawclose.OrderID(in.EntryID)
			r, ok := byID[in.EntryID]
			switch {
			case in.Status == flashgate.IntentRequiresCapture:
				add(kindHoldLeft, "hold %s of entry %s (%s, %v)", in.ID, in.EntryID, r.State, ok)
			case in.Status == flashgate.IntentSucceeded && (!ok || r.State != flashgate.DrawCaptured):
				add(kindDrawCapture, "hold %s of entry %s (%s, %v)", in.ID, in.EntryID, r.State, ok)
			}
			if n := w.prov.Captures(in.ID); n > 1 {
				add(kindCapturedTwice, "hold %s of entry %s captured %d times", in.ID, in.EntryID, n)
			}
		}
		if in.Status == flashgate.IntentSucceeded && len(in.Refunds) == 0 {
			charges[orderID] = append(charges[orderID], in.ID)
		}
	}
	for _, id := range sortedKeys(charges) {
		if len(charges[id]) > 1 {
			add(kindChargedTwice, "order %s (%s) kept the charges of %v", id, orders[id].Status, charges[id])
		}
	}
	// Redis's entry of each buyer is its row, once the journal is flushed.
	cur, err := w.e.raw.HGetAll(ctx, lua.DrawKey(w.sale.ID)).Result()
	if err != nil {
		return nil, err
	}
	for _, u := range sortedKeys(cur) {
		st, id, _, _, ok := lua.ParseDrawEntry(cur[u])
		r, found := byID[id]
		if !ok || !found || r.State != st || r.UserID != u {
			add(kindDrawRedis, "%s: Redis %q, row %s %s of %s (found %v)", u, cur[u], r.ID, r.State, r.UserID, found)
		}
	}
	return out, nil
}

// holdOrder is the order an intent of the ledger pays: a hold's is its
// entry's order (the close charges it and makes the order).
func holdOrder(in ledgerIntent) string {
	if in.EntryID != "" {
		return drawclose.OrderID(in.EntryID)
	}
	return in.OrderID
}

// drawDump is -dump's part of a draw: each buyer's entry in Redis, the
// holds recorded and those the read path will look at, and the rows.
func (w *world) drawDump() string {
	ctx := context.Background()
	entries, _ := w.e.raw.HGetAll(ctx, lua.DrawKey(w.sale.ID)).Result()
	holds, _ := w.e.raw.HGetAll(ctx, lua.DrawHoldKey(w.sale.ID)).Result()
	checks, _ := w.e.raw.ZRangeWithScores(ctx, lua.DrawCheckKey(w.sale.ID), 0, -1).Result()
	var cs []string
	for _, c := range checks {
		cs = append(cs, fmt.Sprintf("%v@%d", c.Member, int64(c.Score)-w.sale.EntriesOpenAt.UnixMilli()))
	}
	rows, _ := w.e.db.DrawEntries(ctx, w.sale.ID)
	var rs []string
	for _, r := range rows {
		rs = append(rs, fmt.Sprintf("%s/%s/%s/%s", r.ID, r.UserID, r.State, r.PaymentIntent))
	}
	return fmt.Sprintf(" | draw %v holds %v checks %v rows %v", entries, holds, cs, rs)
}
