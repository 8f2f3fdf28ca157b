package explore

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane"
	"github.com/flashgate/flashgate/controlplane/buckets"
	"github.com/flashgate/flashgate/lua"
	"github.com/flashgate/flashgate/ordersink"
)

// The yield points are the boundaries the code already has: every Redis
// command (a go-redis hook), every call of the database interfaces the
// control plane and the order sink consume, and every call to the payment
// provider (before and after it). The wrappers embed the interfaces they
// wrap, so a method added later passes through unchanged (without a yield)
// and the harness still compiles.

// scriptNames names the Lua scripts by their SHA1, for the trace.
var scriptNames = func() map[string]string {
	m := map[string]string{}
	for name, s := range map[string]*redis.Script{"reserve": lua.Reserve, "release": lua.Release, "prepare": lua.Prepare,
		"setstate": lua.SetState, "resync": lua.Resync, "releasebatch": lua.ReleaseBatch, "restore": lua.Restore,
		"retake": lua.Retake, "takefence": lua.TakeFence, "mark": lua.Mark, "reservemany": lua.ReserveMany,
		"acktrim": lua.AckTrim, "extend": lua.Extend, "unlock": lua.Unlock, "unretake": lua.Unretake, "retakehold": lua.RetakeHold} {
		m[s.Hash()] = name
	}
	return m
}()

// redisHook yields before every command and pipeline of an actor.
type redisHook struct{ s *Sched }

func (h redisHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h redisHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		switch cmd.Name() {
		case "hello", "client", "auth", "select":
			return next(ctx, cmd) // a new connection's set-up
		}
		if err := h.s.Yield(ctx, "redis "+cmdLabel(cmd)); err != nil {
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

func (h redisHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		names := make([]string, len(cmds))
		for i, c := range cmds {
			names[i] = cmdLabel(c)
		}
		if err := h.s.Yield(ctx, "redis pipeline "+strings.Join(names, ",")); err != nil {
			for _, c := range cmds {
				c.SetErr(err)
			}
			return err
		}
		return next(ctx, cmds)
	}
}

// cmdLabel is a command's name, a script's name for EVAL and EVALSHA.
func cmdLabel(cmd redis.Cmder) string {
	args := cmd.Args()
	switch cmd.Name() {
	case "evalsha", "evalsha_ro":
		if len(args) > 1 {
			if n, ok := scriptNames[fmt.Sprint(args[1])]; ok {
				return "evalsha " + n
			}
		}
	case "eval", "eval_ro":
		if len(args) > 1 {
			sum := sha1.Sum([]byte(fmt.Sprint(args[1])))
			if n, ok := scriptNames[hex.EncodeToString(sum[:])]; ok {
				return "eval " + n
			}
		}
	}
	return cmd.Name()
}

// call yields before f, the call what of an actor.
func call[T any](ctx context.Context, s *Sched, what string, f func() (T, error)) (T, error) {
	if ctx.Value(inSnapshot{}) == nil {
		if err := s.Yield(ctx, what); err != nil {
			var zero T
			return zero, err
		}
	}
	return f()
}

// inSnapshot marks the context of a database snapshot's reads
// (cpStore.Snapshot): they run in one step, with no yield between them.
type inSnapshot struct{}

// cpStore is the control plane's database with a yield before each call
// the order actions, the expiry and the re-sync make.
type cpStore struct {
	controlplane.Store
	s *Sched
}

func (w cpStore) Sale(ctx context.Context, id string) (flashgate.Sale, error) {
	return call(ctx, w.s, "db Sale", func() (flashgate.Sale, error) { return w.Store.Sale(ctx, id) })
}

func (w cpStore) LiveSales(ctx context.Context) ([]flashgate.Sale, error) {
	return call(ctx, w.s, "db LiveSales", func() ([]flashgate.Sale, error) { return w.Store.LiveSales(ctx) })
}

func (w cpStore) Order(ctx context.Context, id string) (flashgate.Order, error) {
	return call(ctx, w.s, "db Order", func() (flashgate.Order, error) { return w.Store.Order(ctx, id) })
}

func (w cpStore) Transition(ctx context.Context, id string, from []flashgate.OrderStatus, to flashgate.OrderStatus, now time.Time) (flashgate.Order, error) {
	return call(ctx, w.s, fmt.Sprintf("db Transition %v→%s", from, to), func() (flashgate.Order, error) {
		return w.Store.Transition(ctx, id, from, to, now)
	})
}

func (w cpStore) ExpireDue(ctx context.Context, createdBefore, now time.Time, limit int, fence int64) ([]flashgate.Order, error) {
	return call(ctx, w.s, "db ExpireDue", func() ([]flashgate.Order, error) {
		return w.Store.ExpireDue(ctx, createdBefore, now, limit, fence)
	})
}

func (w cpStore) Figures(ctx context.Context, saleID string) (flashgate.SaleFigures, error) {
	return call(ctx, w.s, "db Figures", func() (flashgate.SaleFigures, error) { return w.Store.Figures(ctx, saleID) })
}

func (w cpStore) VariantFigures(ctx context.Context, saleID string) (flashgate.SaleFigures, map[string]flashgate.SaleFigures, error) {
	var per map[string]flashgate.SaleFigures
	fig, err := call(ctx, w.s, "db VariantFigures", func() (flashgate.SaleFigures, error) {
		f, p, err := w.Store.VariantFigures(ctx, saleID)
		per = p
		return f, err
	})
	return fig, per, err
}

func (w cpStore) OrdersPage(ctx context.Context, saleID string, st flashgate.OrderStatus, afterID string, limit int) ([]flashgate.Order, error) {
	return call(ctx, w.s, "db OrdersPage", func() ([]flashgate.Order, error) {
		return w.Store.OrdersPage(ctx, saleID, st, afterID, limit)
	})
}

func (w cpStore) PendingReleases(ctx context.Context, saleID string, limit int) ([]flashgate.Order, int64, error) {
	var delivered int64
	q, err := call(ctx, w.s, "db PendingReleases", func() ([]flashgate.Order, error) {
		q, d, err := w.Store.PendingReleases(ctx, saleID, limit)
		delivered = d
		return q, err
	})
	return q, delivered, err
}

func (w cpStore) ReleasesDelivered(ctx context.Context, saleID string, orderIDs []string, fence int64) (int64, error) {
	return call(ctx, w.s, "db ReleasesDelivered", func() (int64, error) {
		return w.Store.ReleasesDelivered(ctx, saleID, orderIDs, fence)
	})
}

func (w cpStore) PendingRetakes(ctx context.Context, saleID string) ([]flashgate.Order, error) {
	return call(ctx, w.s, "db PendingRetakes", func() ([]flashgate.Order, error) { return w.Store.PendingRetakes(ctx, saleID) })
}

// BucketFigures and BucketVariantFigures are buckets.FigureStore: a
// bucketed sale's re-sync reads its figures grouped by bucket.
func (w cpStore) BucketFigures(ctx context.Context, saleID string, n int) ([]flashgate.SaleFigures, error) {
	return call(ctx, w.s, "db BucketFigures", func() ([]flashgate.SaleFigures, error) {
		return w.Store.(buckets.FigureStore).BucketFigures(ctx, saleID, n)
	})
}

func (w cpStore) BucketVariantFigures(ctx context.Context, saleID string, n int) ([]flashgate.SaleFigures, []map[string]flashgate.SaleFigures, error) {
	var per []map[string]flashgate.SaleFigures
	figs, err := call(ctx, w.s, "db BucketVariantFigures", func() ([]flashgate.SaleFigures, error) {
		f, p, err := w.Store.(buckets.FigureStore).BucketVariantFigures(ctx, saleID, n)
		per = p
		return f, err
	})
	return figs, per, err
}

func (w cpStore) OwedRetakes(ctx context.Context, saleID string) ([]flashgate.Order, error) {
	return call(ctx, w.s, "db OwedRetakes", func() ([]flashgate.Order, error) { return w.Store.OwedRetakes(ctx, saleID) })
}

func (w cpStore) RetakeGivenBack(ctx context.Context, orderID string) error {
	_, err := call(ctx, w.s, "db RetakeGivenBack "+orderID, func() (bool, error) { return true, w.Store.RetakeGivenBack(ctx, orderID) })
	return err
}

// Snapshot yields once; the reads in it (pending retakes, figures) run
// as one step, in one database snapshot.
func (w cpStore) Snapshot(ctx context.Context, read func(ctx context.Context) error) error {
	_, err := call(ctx, w.s, "db Snapshot", func() (bool, error) {
		return true, w.Store.Snapshot(context.WithValue(ctx, inSnapshot{}, true), read)
	})
	return err
}

func (w cpStore) HonouredRetakes(ctx context.Context, saleID string) ([]flashgate.Order, error) {
	return call(ctx, w.s, "db HonouredRetakes", func() ([]flashgate.Order, error) { return w.Store.HonouredRetakes(ctx, saleID) })
}

// The draws' calls (the journal's flushes, the rebuild, the close, an
// admin refund of a winner's order).

func (w cpStore) DrawEntries(ctx context.Context, saleID string) ([]flashgate.DrawEntry, error) {
	return call(ctx, w.s, "db DrawEntries", func() ([]flashgate.DrawEntry, error) { return w.Store.DrawEntries(ctx, saleID) })
}

func (w cpStore) DrawEntry(ctx context.Context, saleID, entryID string) (flashgate.DrawEntry, error) {
	return call(ctx, w.s, "db DrawEntry "+entryID, func() (flashgate.DrawEntry, error) { return w.Store.DrawEntry(ctx, saleID, entryID) })
}

func (w cpStore) PutDrawEntries(ctx context.Context, entries []flashgate.DrawEntry) error {
	_, err := call(ctx, w.s, fmt.Sprintf("db PutDrawEntries ×%d", len(entries)), func() (bool, error) {
		return true, w.Store.PutDrawEntries(ctx, entries)
	})
	return err
}

func (w cpStore) SupersedeDrawEntries(ctx context.Context, entries []flashgate.DrawEntry,
	closing func(entries []flashgate.DrawEntry) ([]flashgate.DrawEntry, error), before func(superseded []flashgate.DrawEntry) error) error {
	_, err := call(ctx, w.s, fmt.Sprintf("db SupersedeDrawEntries ×%d", len(entries)), func() (bool, error) {
		return true, w.Store.SupersedeDrawEntries(ctx, entries, closing, before)
	})
	return err
}

func (w cpStore) EachDrawEntry(ctx context.Context, saleID string, fn func(flashgate.DrawEntry) error) error {
	_, err := call(ctx, w.s, "db EachDrawEntry", func() (bool, error) { return true, w.Store.EachDrawEntry(ctx, saleID, fn) })
	return err
}

func (w cpStore) PutDrawFile(ctx context.Context, saleID string, body []byte) ([]byte, error) {
	return call(ctx, w.s, "db PutDrawFile", func() ([]byte, error) { return w.Store.PutDrawFile(ctx, saleID, body) })
}

func (w cpStore) DrawFile(ctx context.Context, saleID string) ([]byte, bool, error) {
	var done bool
	body, err := call(ctx, w.s, "db DrawFile", func() ([]byte, error) {
		b, d, err := w.Store.DrawFile(ctx, saleID)
		done = d
		return b, err
	})
	return body, done, err
}

func (w cpStore) RecordDrawHold(ctx context.Context, saleID, entryID, intent string) (bool, error) {
	return call(ctx, w.s, "db RecordDrawHold "+entryID, func() (bool, error) { return w.Store.RecordDrawHold(ctx, saleID, entryID, intent) })
}

func (w cpStore) DrawCloseBegun(ctx context.Context, saleID string) (bool, error) {
	return call(ctx, w.s, "db DrawCloseBegun", func() (bool, error) { return w.Store.DrawCloseBegun(ctx, saleID) })
}

func (w cpStore) DrawClosing(ctx context.Context, saleID string) error {
	_, err := call(ctx, w.s, "db DrawClosing", func() (bool, error) { return true, w.Store.DrawClosing(ctx, saleID) })
	return err
}

func (w cpStore) DrawDone(ctx context.Context, saleID string) error {
	_, err := call(ctx, w.s, "db DrawDone", func() (bool, error) { return true, w.Store.DrawDone(ctx, saleID) })
	return err
}

// payStore is the payments' database with a yield before each call.
type payStore struct {
	controlplane.PaymentStore
	s *Sched
}

func (w payStore) InsertPayment(ctx context.Context, p flashgate.Payment, now time.Time) (flashgate.Payment, error) {
	return call(ctx, w.s, "db InsertPayment", func() (flashgate.Payment, error) { return w.PaymentStore.InsertPayment(ctx, p, now) })
}

func (w payStore) Payment(ctx context.Context, orderID string) (flashgate.Payment, error) {
	return call(ctx, w.s, "db Payment", func() (flashgate.Payment, error) { return w.PaymentStore.Payment(ctx, orderID) })
}

func (w payStore) PaymentByIntent(ctx context.Context, intentID string) (flashgate.Payment, error) {
	return call(ctx, w.s, "db PaymentByIntent", func() (flashgate.Payment, error) { return w.PaymentStore.PaymentByIntent(ctx, intentID) })
}

func (w payStore) SetPaymentStatus(ctx context.Context, orderID, status string, now time.Time) error {
	_, err := call(ctx, w.s, "db SetPaymentStatus "+status, func() (struct{}, error) {
		return struct{}{}, w.PaymentStore.SetPaymentStatus(ctx, orderID, status, now)
	})
	return err
}

func (w payStore) MarkPayment(ctx context.Context, orderID string, refunded, disputed bool, refundID string, now time.Time) error {
	_, err := call(ctx, w.s, "db MarkPayment", func() (struct{}, error) {
		return struct{}{}, w.PaymentStore.MarkPayment(ctx, orderID, refunded, disputed, refundID, now)
	})
	return err
}

func (w payStore) StepPayment(ctx context.Context, st flashgate.PaymentStep, now time.Time) (bool, error) {
	return call(ctx, w.s, fmt.Sprintf("db StepPayment %s %q→%s %q→%s", st.OrderID, st.FromOutcome, st.ToOutcome, st.FromStatus, st.ToStatus), func() (bool, error) {
		return w.PaymentStore.StepPayment(ctx, st, now)
	})
}

func (w payStore) PendRetake(ctx context.Context, orderID string, now time.Time) (bool, error) {
	return call(ctx, w.s, "db PendRetake "+orderID, func() (bool, error) { return w.PaymentStore.PendRetake(ctx, orderID, now) })
}

func (w payStore) RetakeGivenBack(ctx context.Context, orderID string) error {
	_, err := call(ctx, w.s, "db RetakeGivenBack "+orderID, func() (bool, error) { return true, w.PaymentStore.RetakeGivenBack(ctx, orderID) })
	return err
}

func (w payStore) RecordEvent(ctx context.Context, eventID, typ, intentID, orderID, status string, now time.Time) (bool, error) {
	return call(ctx, w.s, "db RecordEvent "+typ, func() (bool, error) {
		return w.PaymentStore.RecordEvent(ctx, eventID, typ, intentID, orderID, status, now)
	})
}

func (w payStore) DuePayments(ctx context.Context, createdBefore, now time.Time, limit int) ([]flashgate.Payment, error) {
	return call(ctx, w.s, "db DuePayments", func() ([]flashgate.Payment, error) {
		return w.PaymentStore.DuePayments(ctx, createdBefore, now, limit)
	})
}

func (w payStore) DeferPayment(ctx context.Context, orderID string, next time.Time) error {
	_, err := call(ctx, w.s, "db DeferPayment", func() (struct{}, error) {
		return struct{}{}, w.PaymentStore.DeferPayment(ctx, orderID, next)
	})
	return err
}

func (w payStore) UnadoptedIntents(ctx context.Context, since time.Time, limit int) ([]string, error) {
	return call(ctx, w.s, "db UnadoptedIntents", func() ([]string, error) { return w.PaymentStore.UnadoptedIntents(ctx, since, limit) })
}

// sinkStore is the order sink's database with a yield before each insert.
type sinkStore struct {
	ordersink.Store
	s *Sched
}

func (w sinkStore) InsertOrders(ctx context.Context, orders []flashgate.Order) (int, error) {
	return call(ctx, w.s, fmt.Sprintf("db InsertOrders ×%d", len(orders)), func() (int, error) { return w.Store.InsertOrders(ctx, orders) })
}

// gated is the provider as the control plane reaches it: a yield before
// and after each call, and, drawn from the schedule's generator, a
// failure before the call (429, 500: nothing happened) or after it (the
// provider acted, the answer was lost).
type gated struct {
	controlplane.PaymentProvider
	s   *Sched
	rng *rand.Rand
}

// fault draws the fate of one call: "" goes through.
func (g gated) fault() string {
	switch n := g.rng.IntN(20); {
	case n == 0:
		return "429 before"
	case n == 1:
		return "500 before"
	case n == 2:
		return "timeout after"
	}
	return ""
}

func gate[T any](ctx context.Context, g gated, what string, f func() (T, error)) (T, error) {
	var zero T
	if _, ok := ctx.Value(actorKey{}).(*actor); !ok {
		return f() // the quiet phase: no faults
	}
	if err := g.s.Yield(ctx, "provider "+what); err != nil {
		return zero, err
	}
	fault := g.fault()
	if strings.HasSuffix(fault, "before") {
		return zero, fmt.Errorf("provider %s: %s: %w", what, fault, flashgate.ErrUnavailable)
	}
	v, err := f()
	if yerr := g.s.Yield(ctx, "provider answered "+what); yerr != nil {
		return zero, yerr
	}
	if fault != "" {
		return zero, fmt.Errorf("provider %s: %s: %w", what, fault, flashgate.ErrUnavailable)
	}
	return v, err
}

// Hold is drawhold.Provider's: a draw entry's card hold.
func (g gated) Hold(ctx context.Context, h flashgate.Hold) (flashgate.Intent, error) {
	return gate(ctx, g, "Hold", func() (flashgate.Intent, error) {
		return g.PaymentProvider.(interface {
			Hold(context.Context, flashgate.Hold) (flashgate.Intent, error)
		}).Hold(ctx, h)
	})
}

func (g gated) Checkout(ctx context.Context, o flashgate.Order, amount int64, currency string) (flashgate.Intent, error) {
	return gate(ctx, g, "Checkout", func() (flashgate.Intent, error) { return g.PaymentProvider.Checkout(ctx, o, amount, currency) })
}

func (g gated) Intent(ctx context.Context, id string) (flashgate.Intent, error) {
	return gate(ctx, g, "Intent", func() (flashgate.Intent, error) { return g.PaymentProvider.Intent(ctx, id) })
}

func (g gated) Cancel(ctx context.Context, id string) (flashgate.Intent, error) {
	return gate(ctx, g, "Cancel", func() (flashgate.Intent, error) { return g.PaymentProvider.Cancel(ctx, id) })
}

func (g gated) Refund(ctx context.Context, id, key string) (string, error) {
	return gate(ctx, g, "Refund", func() (string, error) { return g.PaymentProvider.Refund(ctx, id, key) })
}
