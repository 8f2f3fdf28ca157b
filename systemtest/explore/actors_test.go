package explore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane"
	"github.com/flashgate/flashgate/lua"
)

// The actors. Each is a bounded script of real calls (a buyer's reserve,
// pay and cancel; the leader's expiry and reconciliation; a re-sync; a
// sink's pass; an admin's refund; a webhook delivery; the clock; a
// FLUSHALL); what each does next is drawn from the schedule's generator as
// it goes, and every external call it makes is a yield point.

// plan spawns the schedule's actors.
func (w *world) plan() {
	if w.dw != nil {
		w.planDraw()
		return
	}
	r := w.rng
	// Swarm: how often a buyer cancels around paying (each way), in
	// percent, differs from schedule to schedule.
	w.cancels = []int{0, 10, 25}[r.IntN(3)]
	nb := 2 + r.IntN(2)
	if w.sale.Fair() {
		nb = fairUsers
	}
	for i := range nb {
		u := fmt.Sprintf("u%d", i)
		w.users = append(w.users, u)
		w.s.Spawn("buyer-"+u, w.buyer(u))
	}
	w.s.Spawn("sink", w.sinkActor(2+r.IntN(3)))
	// Two leaders at once: a failover, or an admin's call beside the
	// leader's loop.
	for range 1 + r.IntN(2) {
		w.s.Spawn("leader", w.leader(1+r.IntN(4)))
	}
	w.s.Spawn("clock", w.clockActor())
	for range 1 + r.IntN(2) {
		w.s.Spawn("resync", w.resync(1+r.IntN(3)))
	}
	if r.IntN(2) == 0 {
		w.s.Spawn("admin", w.admin())
	}
	if r.IntN(10) == 0 && !w.sale.Fair() {
		w.s.Spawn("flushall", w.flushAll())
		w.notes = append(w.notes, "a FLUSHALL")
	}
	if r.IntN(3) == 0 {
		w.s.killAt = r.IntN(250)
		w.s.onKill = w.restart
		w.notes = append(w.notes, fmt.Sprintf("a kill at step %d", w.s.killAt))
		if r.IntN(2) == 0 {
			w.s.killAt = r.IntN(150)
			w.s.killDual = true
			w.notes[len(w.notes)-1] = fmt.Sprintf("a kill from step %d, between a script and the database call after it", w.s.killAt)
		}
	}
	if w.stall {
		if id, intent := w.checkedOut("u8"); intent != "" {
			w.s.Spawn("buyer-u8", w.latePayer(id, intent))
		}
		w.s.Spawn("expiry", w.expiry())
		w.s.Spawn("redis-loss", w.redisLoss())
		w.s.Spawn("buyer-u9", w.lateBuyer("u9"))
		w.notes = append(w.notes, "a late payment whose first retake stalls before its honour step, across a FLUSHALL, a rebuild and a new buyer's purchase")
	}
	strategy := "uniform"
	if w.s.pct {
		strategy = fmt.Sprintf("PCT, change points %v", w.s.change)
	}
	w.notes = append(w.notes, fmt.Sprintf("%d buyers, cancelling around a payment %d%%+%d%%; picks: %s", nb, w.cancels, w.cancels, strategy))
}

// say writes a line about what an actor got into the trace.
func (w *world) say(ctx context.Context, format string, args ...any) {
	a, _ := ctx.Value(actorKey{}).(*actor)
	if a == nil || a.killed {
		return
	}
	w.s.trace = append(w.s.trace, fmt.Sprintf("     %-14s   = %s", a.name, fmt.Sprintf(format, args...)))
}

// buyer reserves, pays (checkout, then the provider's page: success,
// failure, processing, or walking away) or cancels, and may buy again
// after.
func (w *world) buyer(u string) func(context.Context) {
	return func(ctx context.Context) {
		r := w.rng
		rounds := 1 + r.IntN(3)
		for range rounds {
			if w.think(ctx, r.IntN(4)) != nil {
				return
			}
			v := w.variant()
			id, err := w.inv.Reserve(ctx, w.sale.ID, u, v, 1)
			w.say(ctx, "reserve %q: %s %v", v, id, err)
			if errors.Is(err, flashgate.ErrSoldOut) && w.sale.Fair() {
				// The reserve script checks the admission before the
				// stock: this buyer was admitted, and promised a unit.
				w.refused = append(w.refused, fmt.Sprintf("%s at step %d", u, w.s.steps-1))
			}
			if err != nil {
				var pe *flashgate.PurchasedError
				if !errors.As(err, &pe) {
					if errors.Is(err, flashgate.ErrSoldOut) || errors.Is(err, flashgate.ErrNotAdmitted) {
						// Back later: units come back when orders expire,
						// and the item page shows when one is free.
						what, cond := "the clock", func() bool { return w.moved }
						if r.IntN(2) == 0 {
							what, cond = "a unit shown free", func() bool { return w.unitFree(v) }
						}
						if _, err := w.s.Await(ctx, what, cond); err != nil {
							return
						}
					}
					continue
				}
				id = pe.OrderID
			} else {
				w.orders = append(w.orders, id)
				w.owner[id] = u
			}
			if r.IntN(8) == 0 {
				_ = w.think(ctx, r.IntN(4))
				o, err := w.cp.Cancel(ctx, id, u)
				w.say(ctx, "cancel %s: %s %v", id, o.Status, err)
				continue
			}
			if _, err := w.s.Await(ctx, id+" stored", func() bool { return w.stored(id) }); err != nil {
				return
			}
			intent := ""
			for try := 0; try < 3 && intent == ""; try++ {
				if w.think(ctx, r.IntN(4)) != nil {
					return
				}
				o, err := w.cp.Pay(ctx, id, u)
				w.say(ctx, "pay %s: %s %s %v", id, o.Status, o.PaymentIntent, err)
				intent = o.PaymentIntent
			}
			if intent == "" {
				continue
			}
			if w.think(ctx, r.IntN(6)) != nil {
				return
			}
			// The buyer pays on the provider's page, and may cancel the
			// order before or after (the page stays open either way).
			cancel := func() {
				o, err := w.cp.Cancel(ctx, id, u)
				w.say(ctx, "cancel %s: %s %v", id, o.Status, err)
			}
			switch n := r.IntN(100); {
			case n < w.cancels:
				cancel()
				if w.think(ctx, r.IntN(4)) != nil {
					return
				}
				w.payAtProvider(ctx, intent)
			case n < 2*w.cancels:
				w.payAtProvider(ctx, intent)
				if w.think(ctx, r.IntN(4)) != nil {
					return
				}
				cancel()
			default:
				w.payAtProvider(ctx, intent)
			}
		}
	}
}

// payAtProvider is the buyer on the provider's page.
func (w *world) payAtProvider(ctx context.Context, intent string) {
	r := w.rng
	if w.s.Yield(ctx, "provider page "+intent) != nil {
		return
	}
	switch n := r.IntN(10); {
	case n == 0:
		w.say(ctx, "walks away from %s", intent)
	case n == 1:
		w.prov.Pay(intent, flashgate.IntentFailed)
		w.say(ctx, "card declined on %s", intent)
		if r.IntN(2) == 0 && w.think(ctx, r.IntN(4)) == nil && w.s.Yield(ctx, "provider page "+intent) == nil {
			w.say(ctx, "second card on %s: moved %v", intent, w.prov.Pay(intent, flashgate.IntentSucceeded))
		}
	case n == 2:
		w.prov.Pay(intent, flashgate.IntentProcessing)
		w.say(ctx, "bank debit processing on %s", intent)
		w.s.Spawn("bank", w.bank(intent))
	default:
		w.say(ctx, "pays %s: moved %v", intent, w.prov.Pay(intent, flashgate.IntentSucceeded))
	}
}

// bank settles a processing payment some steps later.
func (w *world) bank(intent string) func(context.Context) {
	return func(ctx context.Context) {
		if w.think(ctx, w.rng.IntN(12)) != nil || w.s.Yield(ctx, "bank settles "+intent) != nil {
			return
		}
		st := flashgate.IntentSucceeded
		if w.rng.IntN(4) == 0 {
			st = flashgate.IntentFailed
		}
		w.say(ctx, "bank: %s %s (moved %v)", intent, st, w.prov.Pay(intent, st))
	}
}

// deliver is how the provider's events reach the gateways: once, twice
// at once (two gateways), or never (the reconciliation must cope), each
// after a delay, which also reorders them; a refused delivery is tried
// again, as the provider does.
func (w *world) deliver(payload []byte, typ string) {
	copies := 1
	switch n := w.rng.IntN(10); {
	case n == 0:
		copies = 0
	case n <= 2:
		copies = 2
	}
	if copies == 0 && w.atLeastOnce {
		copies = 1
	}
	if w.quiet {
		w.queued = append(w.queued, payload) // the quiet phase delivers it once, in order
		return
	}
	for range copies {
		delay := w.rng.IntN(8)
		w.s.Spawn("webhook", func(ctx context.Context) {
			if w.think(ctx, delay) != nil {
				return
			}
			for try := 0; try < 3; try++ {
				err := w.cp.Webhook(ctx, payload, w.prov.Sign(payload))
				w.say(ctx, "webhook %s: %v", typ, err)
				if err == nil || Killed(ctx) || w.think(ctx, 1+w.rng.IntN(4)) != nil {
					return
				}
			}
		})
	}
}

// sinkActor drains the order streams n times.
func (w *world) sinkActor(n int) func(context.Context) {
	return func(ctx context.Context) {
		d := w.newSink()
		for range n {
			if w.think(ctx, w.rng.IntN(6)) != nil {
				return
			}
			k, err := d.DrainOnce(ctx)
			w.say(ctx, "drained %d %v", k, err)
		}
	}
}

// leader runs the leader's payment reconciliation and expiry n times.
func (w *world) leader(n int) func(context.Context) {
	return func(ctx context.Context) {
		cp, err := w.newCP()
		if err != nil {
			panic(err)
		}
		ctx = controlplane.WithFencingToken(ctx, w.token())
		for i := range n {
			if i > 0 && w.rng.IntN(2) == 0 {
				if _, err := w.s.Await(ctx, "the clock", func() bool { return w.moved }); err != nil {
					return
				}
			}
			if w.think(ctx, w.rng.IntN(6)) != nil {
				return
			}
			k, err := cp.ReconcilePayments(ctx)
			w.say(ctx, "reconciled %d %v", k, err)
			if w.think(ctx, w.rng.IntN(3)) != nil {
				return
			}
			k, err = cp.ExpireDue(ctx)
			w.say(ctx, "expired %d %v", k, err)
			if w.sale.Fair() {
				sale, err := w.store.Sale(ctx, w.sale.ID)
				if err == nil {
					err = cp.QueueStep(ctx, sale, w.token())
				}
				w.say(ctx, "queue step: %v", err)
			}
		}
	}
}

// clockActor moves the clock past the payment window, and maybe past the
// grace after it.
func (w *world) clockActor() func(context.Context) {
	return func(ctx context.Context) {
		// The window ends before anyone buys, between a reserve and its
		// checkout, or after a checkout.
		switch w.rng.IntN(3) {
		case 1:
			if _, err := w.s.Await(ctx, "an order", func() bool { return len(w.orders) > 0 }); err != nil {
				return
			}
		case 2:
			if _, err := w.s.Await(ctx, "a checkout", func() bool { return len(w.prov.Ledger()) > 0 }); err != nil {
				return
			}
		}
		if w.think(ctx, w.rng.IntN(10)) != nil || w.s.Yield(ctx, "clock +window") != nil {
			return
		}
		w.clock.Add(window + time.Second)
		w.moved = true
		if w.rng.IntN(2) == 0 || w.think(ctx, w.rng.IntN(10)) != nil || w.s.Yield(ctx, "clock +grace") != nil {
			return
		}
		w.clock.Add(grace)
	}
}

// resync re-syncs the sale n times, as the leader's loop does, in a
// control plane of its own (its re-sync lock is its process's).
func (w *world) resync(n int) func(context.Context) {
	return func(ctx context.Context) {
		cp, err := w.newCP()
		if err != nil {
			panic(err)
		}
		ctx = controlplane.WithFencingToken(ctx, w.token())
		for i := range n {
			if i > 0 && w.rng.IntN(2) == 0 {
				if _, err := w.s.Await(ctx, "the clock", func() bool { return w.moved }); err != nil {
					return
				}
			}
			if w.think(ctx, w.rng.IntN(8)) != nil {
				return
			}
			_, after, err := cp.Resync(ctx, w.sale.ID)
			w.say(ctx, "re-synced: booked %d %v", after.Booked, err)
		}
	}
}

// admin refunds an order a buyer was given.
func (w *world) admin() func(context.Context) {
	return func(ctx context.Context) {
		cond := func() bool { return len(w.orders) > 0 }
		if w.rng.IntN(3) > 0 {
			cond = func() bool { return len(w.prov.Ledger()) > 0 }
		}
		if _, err := w.s.Await(ctx, "an order to refund", cond); err != nil {
			return
		}
		if len(w.orders) == 0 || w.think(ctx, w.rng.IntN(6)) != nil {
			return
		}
		id := w.orders[w.rng.IntN(len(w.orders))]
		o, err := w.cp.Refund(ctx, id)
		w.say(ctx, "refund %s: %s %v", id, o.Status, err)
	}
}

// flushAll loses Redis's data (the re-syncs rebuild it).
func (w *world) flushAll() func(context.Context) {
	return func(ctx context.Context) {
		if w.think(ctx, w.rng.IntN(20)) != nil {
			return
		}
		err := w.rdb.FlushAll(ctx).Err()
		w.flushed = w.flushed || err == nil
		w.say(ctx, "FLUSHALL: %v", err)
	}
}

// unitFree reports whether the sale's hash in Redis (a bucket's, for a
// bucketed sale) shows a unit free (of variant v, when not ""), as the
// item page does.
func (w *world) unitFree(v string) bool {
	booked, total := lua.FieldBooked, lua.FieldTotal
	if v != "" {
		booked, total = lua.VariantField(v, booked), lua.VariantField(v, total)
	}
	for _, tag := range w.tags() {
		f, err := w.e.raw.HMGet(context.Background(), lua.SaleKey(tag), booked, total).Result()
		if err != nil || f[0] == nil || f[1] == nil {
			continue
		}
		b, _ := strconv.ParseInt(fmt.Sprint(f[0]), 10, 64)
		t, _ := strconv.ParseInt(fmt.Sprint(f[1]), 10, 64)
		if b < t {
			return true
		}
	}
	return false
}

// stored reports whether order id is a row.
func (w *world) stored(id string) bool {
	_, err := w.e.db.Order(context.Background(), id)
	return err == nil
}

// restart is what follows a kill: the restarted process's sink pass,
// re-sync and reconciliation, among the actors still running.
func (w *world) restart(killed *actor) {
	if w.dw != nil {
		w.restartDraw()
		return
	}
	w.s.Spawn("restart-sink", func(ctx context.Context) {
		k, err := w.newSink().DrainOnce(ctx)
		w.say(ctx, "drained %d %v", k, err)
	})
	w.s.Spawn("restart-resync", w.resync(1))
	w.s.Spawn("restart-leader", w.leader(1))
}

// redisLoss is Redis losing everything while a settler stalls between its
// retake and its honour step (a stall schedule): once the first retake
// ran, a FLUSHALL, then a restarted leader's re-syncs (the rebuild, then
// the pass that reopens the sale) and, after the new buyer tried, a sink
// pass that stores its order.
func (w *world) redisLoss() func(context.Context) {
	return func(ctx context.Context) {
		if ok, err := w.s.Await(ctx, "a retake", func() bool { return w.retook }); !ok || err != nil {
			return
		}
		err := w.rdb.FlushAll(ctx).Err()
		w.flushed = w.flushed || err == nil
		w.say(ctx, "FLUSHALL: %v", err)
		cp, err := w.newCP()
		if err != nil {
			panic(err)
		}
		ctx = controlplane.WithFencingToken(ctx, w.token())
		for range 2 {
			if w.think(ctx, w.aux.IntN(3)) != nil {
				return
			}
			_, after, err := cp.Resync(ctx, w.sale.ID)
			w.say(ctx, "re-synced: booked %d %v", after.Booked, err)
		}
		w.rebuilt = true
		if _, err := w.s.Await(ctx, "the new buyer's try", func() bool { return w.lateTried }); err != nil {
			return
		}
		k, err := w.newSink().DrainOnce(ctx)
		w.say(ctx, "drained %d %v", k, err)
	}
}

// lateBuyer is a buyer who comes after Redis was rebuilt (a stall
// schedule): it waits for the sale to show a unit free again, reserves
// it, and pays at once.
func (w *world) lateBuyer(u string) func(context.Context) {
	return func(ctx context.Context) {
		v := ""
		if w.sale.HasVariants() {
			v = w.sale.Variants[w.aux.IntN(len(w.sale.Variants))].ID
		}
		defer func() { w.lateTried = true }()
		free := func() bool { return w.rebuilt && w.saleOpen() && w.unitFree(v) }
		if ok, err := w.s.Await(ctx, "a unit shown free after a rebuild", free); !ok || err != nil {
			return
		}
		id, err := w.inv.Reserve(ctx, w.sale.ID, u, v, 1)
		w.say(ctx, "reserve %q: %s %v", v, id, err)
		w.lateTried = true
		if err != nil {
			return
		}
		w.orders = append(w.orders, id)
		w.owner[id] = u
		if ok, err := w.s.Await(ctx, id+" stored", func() bool { return w.stored(id) }); !ok || err != nil {
			return
		}
		for range 3 {
			o, err := w.cp.Pay(ctx, id, u)
			w.say(ctx, "pay %s: %s %s %v", id, o.Status, o.PaymentIntent, err)
			if o.PaymentIntent != "" {
				if w.s.Yield(ctx, "provider page "+o.PaymentIntent) == nil {
					w.say(ctx, "pays %s: moved %v", o.PaymentIntent, w.prov.Pay(o.PaymentIntent, flashgate.IntentSucceeded))
				}
				return
			}
		}
	}
}

// latePayer is a buyer whose payment succeeds only after its order
// expired (a stall schedule): its order was reserved, stored and checked
// out in the set-up (order id, intent); it waits for the expiry and then
// pays on the provider's page, so that a settler retakes its unit.
func (w *world) latePayer(id, intent string) func(context.Context) {
	return func(ctx context.Context) {
		expired := func() bool {
			o, err := w.e.db.Order(context.Background(), id)
			return err == nil && o.Status == flashgate.StatusExpired
		}
		if ok, err := w.s.Await(ctx, id+" expired", expired); !ok || err != nil {
			return
		}
		if w.s.Yield(ctx, "provider page "+intent) == nil {
			// No payment row names the intent: only its events tell the
			// control plane (the provider retries them until one lands).
			w.atLeastOnce = true
			w.say(ctx, "pays %s late: moved %v", intent, w.prov.Pay(intent, flashgate.IntentSucceeded))
			w.atLeastOnce = false
		}
	}
}

// checkedOut is the late payer's first steps, in the set-up of a stall
// schedule (no actor moves yet): a reserve, the sink's pass that stores
// it, and a checkout whose answer was lost (the provider made the intent,
// no payment row was stored), so that the order expires and the intent
// can still succeed: a late payment, adopted from its event. It returns
// the intent ("" when a step failed).
func (w *world) checkedOut(u string) (id, intent string) {
	ctx := controlplane.WithFencingToken(context.Background(), w.token())
	v := ""
	if w.sale.HasVariants() {
		v = w.sale.Variants[w.aux.IntN(len(w.sale.Variants))].ID
	}
	id, err := w.inv.Reserve(ctx, w.sale.ID, u, v, 1)
	if err != nil {
		return "", ""
	}
	w.orders = append(w.orders, id)
	w.owner[id] = u
	if _, err := w.newSink().DrainOnce(ctx); err != nil {
		return id, ""
	}
	o, err := w.e.db.Order(ctx, id)
	if err != nil {
		return id, ""
	}
	in, err := w.prov.Checkout(ctx, o, w.sale.PriceCents*o.Quantity, "usd")
	if err != nil {
		return id, ""
	}
	return id, in.ID
}

// expiry is the leader's expiry and reconciliation after the clock passed
// the payment window (a stall schedule), so that the late payer's order
// expires and its payment is settled late.
func (w *world) expiry() func(context.Context) {
	return func(ctx context.Context) {
		cp, err := w.newCP()
		if err != nil {
			panic(err)
		}
		ctx = controlplane.WithFencingToken(ctx, w.token())
		if ok, err := w.s.Await(ctx, "the clock", func() bool { return w.moved }); !ok || err != nil {
			return
		}
		k, err := cp.ExpireDue(ctx)
		w.say(ctx, "expired %d %v", k, err)
		for range 2 {
			if w.think(ctx, w.aux.IntN(6)) != nil {
				return
			}
			k, err := cp.ReconcilePayments(ctx)
			w.say(ctx, "reconciled %d %v", k, err)
		}
	}
}

// saleOpen reports whether the sale's hash in Redis (a bucket's, for a
// bucketed sale) is open to buyers.
func (w *world) saleOpen() bool {
	for _, tag := range w.tags() {
		if st, err := w.e.raw.HGet(context.Background(), lua.SaleKey(tag), lua.FieldStart).Result(); err == nil && st == "1" {
			return true
		}
	}
	return false
}

// afterStep runs between two steps (Sched.after): in a stall schedule it
// holds every settler parked between its retake (which took the units)
// and its honour step, until the rebuild after the FLUSHALL, back until
// no one else can
// move, and after every step that may make an order live (a sink's
// insert, a payment's step, an order's transition) it checks that the
// live units never exceed the totals, so that an oversell is found even
// when the orders that made it are released before the schedule rests.
func (w *world) afterStep(a *actor, ran string) {
	if *flagDump {
		w.dump()
	}
	if w.stall && !w.rebuilt && a.hold == 0 && strings.HasPrefix(a.at, "db StepPayment") && strings.Contains(a.at, "→"+"honoured_late") {
		w.retook, a.hold = true, 1<<30
		w.s.trace = append(w.s.trace, fmt.Sprintf("     %-14s   = held back until no one else can move", a.name))
	}
	for _, p := range []string{"db InsertOrders", "db StepPayment", "db Transition"} {
		if strings.HasPrefix(ran, p) {
			w.checkLive(ran)
			return
		}
	}
}

// dumpFields are the hash fields -dump prints after each step.
var dumpFields = []string{lua.FieldTotal, lua.FieldBooked, lua.FieldReserved, lua.FieldStart, lua.FieldResume, lua.FieldRebuild}

// dump appends to the trace the stock fields of each of the sale's hashes
// (and each variant's), read without a yield (the schedule's steps stay those of its seed).
func (w *world) dump() {
	fields := dumpFields
	for _, vr := range w.sale.Variants {
		for _, f := range []string{lua.FieldTotal, lua.FieldBooked, lua.FieldReserved} {
			fields = append(fields[:len(fields):len(fields)], lua.VariantField(vr.ID, f))
		}
	}
	var b strings.Builder
	for i, tag := range w.tags() {
		v, err := w.e.raw.HMGet(context.Background(), lua.SaleKey(tag), fields...).Result()
		if i > 0 {
			b.WriteString(" | ")
		}
		if err != nil {
			fmt.Fprintf(&b, "%s: %v", tag, err)
			continue
		}
		fmt.Fprintf(&b, "%s:", tag)
		for j, f := range fields {
			if v[j] != nil {
				fmt.Fprintf(&b, " %s=%v", f, v[j])
			}
		}
	}
	if w.dw != nil {
		b.WriteString(w.drawDump())
	}
	w.s.trace = append(w.s.trace, fmt.Sprintf("     %-14s   # %s", "", b.String()))
}

// checkLive records the first time the rows hold more live units than the
// sale (or a variant) has.
func (w *world) checkLive(ran string) {
	for _, f := range w.online {
		if f.kind == kindOversoldStep {
			return
		}
	}
	ctx := context.Background()
	live := map[string]int64{}
	totals := map[string]int64{"": w.sale.Total}
	if w.sale.HasVariants() {
		all, per, err := w.e.db.VariantFigures(ctx, w.sale.ID)
		if err != nil {
			return
		}
		live[""] = all.LiveUnits
		for _, v := range w.sale.Variants {
			live[v.ID], totals[v.ID] = per[v.ID].LiveUnits, v.Total
		}
	} else {
		f, err := w.e.db.Figures(ctx, w.sale.ID)
		if err != nil {
			return
		}
		live[""] = f.LiveUnits
	}
	for _, k := range sortedKeys(totals) {
		if live[k] > totals[k] {
			name := "the sale"
			if k != "" {
				name = "variant " + k
			}
			w.online = append(w.online, finding{kind: kindOversoldStep,
				detail: fmt.Sprintf("after step %d (%s): %s has %d live units of %d", w.s.steps-1, ran, name, live[k], totals[k])})
			return
		}
	}
}
