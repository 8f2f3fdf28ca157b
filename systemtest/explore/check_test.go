package explore

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane"
	"github.com/flashgate/flashgate/lua"
)

// The kinds of broken invariants. The first three are how issue 36's
// races show: a unit sold twice (a retake the re-sync did not count), a
// payment honoured and refunded (two settlers), a payment kept for an
// order that was refunded (an admin refund racing the success).
const (
	kindOversold     = "oversold"
	kindOversoldStep = "oversold between two steps"
	kindPaidRefunded = "paid and refunded late"
	kindKept         = "refunded order, charge kept"
	kindPaidAdmin    = "paid and refunded by an admin"
	kindUnsettled    = "charged, neither honoured nor refunded"
	kindRefundTwice  = "refunded twice"
	kindRefundLive   = "refund of a live order"
	kindPaidUnpaid   = "paid without a payment"
	kindBooked       = "Redis booked differs from the live units"
	kindTwoLive      = "two live orders of one buyer"
	kindLost         = "a reserved order never stored"
	kindStuck        = "schedule stuck"
	kindOpen         = "payment never settles"
	kindRefused      = "admitted buyer refused"
)

// finding is one broken invariant.
type finding struct {
	kind, detail string
}

// quiesce brings the schedule to rest the way the system does when no one
// acts: the provider settles what is processing and delivers its events,
// the sink drains the streams, and the leader's loops (re-sync, expiry
// past the window and the grace, reconciliation) run until there is
// nothing left to do. Nothing yields here.
func (w *world) quiesce(ctx context.Context) {
	w.quiet = true
	ctx = controlplane.WithFencingToken(ctx, w.token())
	d := w.newSink()
	step := func(name string, err error) {
		if *flagDump {
			w.s.trace = append(w.s.trace, fmt.Sprintf("     %-14s   = %s: %v", "quiet", name, err))
			w.dump()
			var rows []string
			for _, st := range []flashgate.OrderStatus{flashgate.StatusPendingPayment, flashgate.StatusPaid, flashgate.StatusExpired,
				flashgate.StatusCancelled, flashgate.StatusRefunded} {
				page, _ := w.e.db.OrdersPage(ctx, w.sale.ID, st, "", 1000)
				for _, o := range page {
					rows = append(rows, fmt.Sprintf("%s/%s/b%d/%s", o.ID, o.Variant, o.Bucket, o.Status))
				}
			}
			w.s.trace = append(w.s.trace, fmt.Sprintf("     %-14s   # rows %v", "", rows))
		}
	}
	for range 4 {
		for _, id := range w.prov.Processing() {
			w.prov.Pay(id, flashgate.IntentSucceeded)
		}
		w.flushEvents(ctx)
		_, err := d.DrainOnce(ctx)
		step("drain", err)
		_, _, err = w.cp.Resync(ctx, w.sale.ID)
		step("re-sync", err)
		w.clock.Add(window + grace + 1)
		if w.dw != nil {
			w.quiesceDraw(ctx, step)
		}
		_, err = w.cp.ExpireDue(ctx)
		step("expiry", err)
		_, err = w.cp.ReconcilePayments(ctx)
		step("reconciliation", err)
		w.flushEvents(ctx)
		_, _, err = w.cp.Resync(ctx, w.sale.ID)
		step("re-sync", err)
	}
}

// flushEvents delivers the events queued in the quiet phase, once each.
func (w *world) flushEvents(ctx context.Context) {
	for len(w.queued) > 0 {
		p := w.queued[0]
		w.queued = w.queued[1:]
		_ = w.cp.Webhook(ctx, p, w.prov.Sign(p))
	}
}

// check judges the state at rest.
func (w *world) check(ctx context.Context) ([]finding, error) {
	out := append([]finding(nil), w.online...)
	add := func(kind, format string, args ...any) {
		out = append(out, finding{kind: kind, detail: fmt.Sprintf(format, args...)})
	}
	orders := map[string]flashgate.Order{}
	for _, st := range []flashgate.OrderStatus{flashgate.StatusPendingPayment, flashgate.StatusPaid, flashgate.StatusExpired,
		flashgate.StatusCancelled, flashgate.StatusRefunded} {
		page, err := w.e.db.OrdersPage(ctx, w.sale.ID, st, "", 1000)
		if err != nil {
			return nil, err
		}
		for _, o := range page {
			orders[o.ID] = o
		}
	}
	payments, err := w.e.db.SalePayments(ctx, w.sale.ID)
	if err != nil {
		return nil, err
	}
	// Redis's booked: the sale hash's, or the sum of its buckets' (a
	// field a hash lacks counts 0).
	booked := map[string]int64{}
	for _, tag := range w.tags() {
		hash, err := w.e.raw.HGetAll(ctx, lua.SaleKey(tag)).Result()
		if err != nil {
			return nil, err
		}
		fields := map[string]string{"": lua.FieldBooked}
		for _, v := range w.sale.Variants {
			fields[v.ID] = lua.VariantField(v.ID, lua.FieldBooked)
		}
		for k, f := range fields {
			b, _ := strconv.ParseInt(hash[f], 10, 64)
			booked[k] += b
		}
	}
	// Units: per sale and per variant, against the totals and Redis.
	live := map[string]int64{}
	perUser := map[string][]string{}
	var ids []string
	for id := range orders {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		o := orders[id]
		if o.Status.Live() {
			live[""] += o.Quantity
			if o.Variant != "" {
				live[o.Variant] += o.Quantity
			}
			perUser[o.UserID] = append(perUser[o.UserID], fmt.Sprintf("%s (%s)", o.ID, o.Status))
		}
	}
	totals := map[string]int64{"": w.sale.Total}
	for _, v := range w.sale.Variants {
		totals[v.ID] = v.Total
	}
	for _, k := range sortedKeys(totals) {
		name := "the sale"
		if k != "" {
			name = "variant " + k
		}
		if live[k] > totals[k] {
			add(kindOversold, "%s: %d live units of %d; live orders %v", name, live[k], totals[k], perUser)
		}
		if booked[k] != live[k] {
			add(kindBooked, "%s: Redis booked %d, the rows hold %d live units", name, booked[k], live[k])
		}
	}
	for _, u := range sortedKeys(perUser) {
		if len(perUser[u]) > 1 {
			add(kindTwoLive, "%s holds %v", u, perUser[u])
		}
	}
	// Money: the provider's ledger is the truth.
	ledger := w.prov.Ledger()
	charged := map[string]bool{}
	for i, in := range ledger {
		// A draw's hold pays its entry's order once captured.
		ledger[i].OrderID = holdOrder(in)
		charged[ledger[i].OrderID] = charged[ledger[i].OrderID] || in.Status == flashgate.IntentSucceeded
	}
	for _, id := range ids {
		if orders[id].Status == flashgate.StatusPaid && !charged[id] {
			add(kindPaidUnpaid, "order %s is paid; no intent of it succeeded", id)
		}
	}
	for _, in := range ledger {
		o, ok := orders[in.OrderID]
		p := payments[in.OrderID]
		desc := fmt.Sprintf("intent %s (%s, refunds %q) of order %s (%s; payment %s, outcome %q)",
			in.ID, in.Status, in.Refunds, in.OrderID, o.Status, p.Status, p.Outcome)
		if !ok {
			desc = fmt.Sprintf("intent %s (%s) of order %s, not a row", in.ID, in.Status, in.OrderID)
		}
		refunded := len(in.Refunds) > 0
		if ok && (p.Outcome == "late_pending" || p.Outcome == "refunding_late") {
			add(kindOpen, "%s", desc)
		}
		switch {
		case len(in.Refunds) > 1:
			add(kindRefundTwice, "%s", desc)
		case refunded && o.Status == flashgate.StatusPaid && strings.HasPrefix(in.Refunds[0], "flashgate-late-refund-"):
			add(kindPaidRefunded, "%s", desc)
		case refunded && o.Status == flashgate.StatusPaid:
			add(kindPaidAdmin, "%s", desc)
		case refunded && o.Status.Live():
			add(kindRefundLive, "%s", desc)
		}
		switch {
		case in.Status != flashgate.IntentSucceeded || refunded || o.Status == flashgate.StatusPaid:
		case o.Status == flashgate.StatusRefunded:
			add(kindKept, "%s", desc)
		default:
			add(kindUnsettled, "%s", desc)
		}
	}
	for _, r := range w.refused {
		add(kindRefused, "%s", r)
	}
	if w.dw != nil {
		more, err := w.checkDraw(ctx, orders)
		if err != nil {
			return nil, err
		}
		out = append(out, more...)
	}
	if !w.flushed {
		for _, id := range w.orders {
			if _, ok := orders[id]; !ok {
				add(kindLost, "order %s of %s", id, w.owner[id])
			}
		}
	}
	return out, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
