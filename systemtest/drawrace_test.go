package systemtest

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane"
	"github.com/flashgate/flashgate/controlplane/drawclose"
	"github.com/flashgate/flashgate/controlplane/drawhold"
	"github.com/flashgate/flashgate/controlplane/drawjournal"
	"github.com/flashgate/flashgate/internal/testenv/testclock"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/lua"
	"github.com/flashgate/flashgate/payments"
	"github.com/flashgate/flashgate/sqldb"
)

// racingCloser is a close (drawclose, as the leader wires it) whose last
// flush before the draw runs race right after it: a script of another
// actor (a gateway's withdrawal, a webhook's authorisation) that was sent
// before entries_close_at, by its own clock, and runs in Redis after the
// close read the journal.
func (s *drawStack) racingCloser(race func()) *drawclose.Closer {
	fired := false
	return drawclose.New(drawclose.Config{Redis: s.rdb, Store: s.db, Reserver: s.inv, Capturer: s.pacer(),
		SeedSecret: controlplane.DeriveQueueSeedSecret(drawToken), Workers: 4, Clock: s.clock, Logger: quiet,
		Flush: func(ctx context.Context, sale string) (int, error) {
			n, err := drawjournal.Flush(ctx, s.rdb, s.db, sale, 0)
			if err == nil && n == 0 && !fired {
				fired = true
				race()
			}
			return n, err
		}})
}

// runClose runs c until the close finished.
func (s *drawStack) runClose(c *drawclose.Closer) {
	s.t.Helper()
	var last error
	if _, ok := testwait.For(30*time.Second, func() bool {
		done, err := c.Close(s.ctx, s.sale)
		last = err
		return done
	}); !ok {
		s.t.Fatalf("the close did not finish: %v", last)
	}
}

// TestDrawRaceWithdrawAfterFlush: a winner's withdrawal sent just before
// entries_close_at whose script runs after the close's final flush. The
// buyer must not be answered "withdrawn" and then charged: either the
// withdrawal is refused (the window closed) or the entry is out of the
// draw.
func TestDrawRaceWithdrawAfterFlush(t *testing.T) {
	drawBackends(t, func(t *testing.T, dsn string) {
		s := newDrawStack(t, dsn)
		cp := s.controlPlane(s.pacer())
		s.enter(cp, 16, func(string) string { return "4242424242424242" })
		closeAt := *s.sale.EntriesCloseAt
		w := s.entrants[s.winners()["S"][0].ID]
		var code int64 = -1
		c := s.racingCloser(func() {
			before := closeAt.Add(-time.Millisecond).UnixMilli()
			r, err := lua.DrawWithdraw.Run(s.ctx, s.rdb, lua.DrawWithdrawKeys(s.sale.ID), w.UserID, before, before).Slice()
			if err != nil {
				t.Errorf("DrawWithdraw: %v", err)
				return
			}
			code, _ = r[0].(int64)
		})
		s.clock.Set(closeAt)
		s.runClose(c)
		in, _ := s.stand.Intent(w.PaymentIntent)
		if code == lua.DrawOK && in.Status == flashgate.IntentSucceeded {
			t.Errorf("winner %s answered withdrawn after the close's flush: got its hold %s, want not charged", w.ID, in.Status)
		}
		if code != lua.DrawOK {
			s.check(cp, 0)
		}
	})
}

// TestDrawRaceHeldAfterFlush: the webhook of a pending entry's hold,
// authorised just before entries_close_at by the clock of the control
// plane that takes it, applied after the close's final flush. The entry
// is not in the draw, so its hold must be released (the read path does
// it), not left authorised with the entry "entered" for ever.
func TestDrawRaceHeldAfterFlush(t *testing.T) {
	drawBackends(t, func(t *testing.T, dsn string) {
		s := newDrawStack(t, dsn)
		cp := s.controlPlane(s.pacer())
		s.enter(cp, 16, func(string) string { return "4242424242424242" })
		closeAt := *s.sale.EntriesCloseAt
		// The webhook's control plane runs a millisecond behind.
		hclock := testclock.New(closeAt.Add(-time.Minute))
		h := drawhold.New(drawhold.Config{Redis: s.rdb, Store: s.db, Provider: s.pay, Clock: hclock, Logger: quiet,
			Grace: time.Second, Rate: 1000})
		late, err := h.Hold(s.ctx, s.sale.ID, "buyer-16")
		if err != nil || late.PaymentIntent == "" {
			t.Fatalf("hold of the pending entry: got %+v, %v", late, err)
		}
		if _, err := s.stand.Confirm(late.PaymentIntent, "4242424242424242"); err != nil {
			t.Fatal(err)
		}
		hclock.Set(closeAt.Add(-time.Millisecond))
		c := s.racingCloser(func() {
			ev := flashgate.PaymentEvent{ID: "evt_late", Type: flashgate.EventIntentHeld, IntentID: late.PaymentIntent,
				EntryID: late.ID, SaleID: s.sale.ID}
			if err := h.Event(s.ctx, ev); err != nil {
				t.Errorf("event: %v", err)
			}
		})
		s.clock.Set(closeAt)
		s.runClose(c)
		testwait.For(10*time.Second, func() bool {
			if _, err := h.Reconcile(s.ctx, []flashgate.Sale{s.sale}); err != nil {
				t.Logf("reconcile: %v", err)
			}
			in, _ := s.stand.Intent(late.PaymentIntent)
			return in.Status == flashgate.IntentCanceled
		})
		if in, _ := s.stand.Intent(late.PaymentIntent); in.Status != flashgate.IntentCanceled {
			st, _ := s.rdb.HGet(s.ctx, lua.DrawKey(s.sale.ID), "buyer-16").Result()
			t.Errorf("a hold authorised after the close's flush: got %s (entry %q), want canceled", in.Status, st)
		}
		s.check(cp, 0)
	})
}

// flakyTransitions is the database whose first order transition fails as
// a dropped connection would.
type flakyTransitions struct {
	*sqldb.DB
	failed atomic.Bool
}

func (f *flakyTransitions) Transition(ctx context.Context, id string, from []flashgate.OrderStatus, to flashgate.OrderStatus, now time.Time) (flashgate.Order, error) {
	if f.failed.CompareAndSwap(false, true) {
		return flashgate.Order{}, errors.New("connection reset by peer")
	}
	return f.DB.Transition(ctx, id, from, to, now)
}

// waitingCapturer captures one hold at a time and, before each, waits for
// the orders of the captures before it to be marked paid, as a long
// settlement needs them to be (an order left pending_payment for the
// payment window expires while its buyer is charged).
type waitingCapturer struct {
	s        *drawStack
	inner    *payments.Pacer
	captured int
	unpaid   []string
}

func (w *waitingCapturer) Capture(ctx context.Context, id, key string) (flashgate.Intent, error) {
	want := w.captured
	if _, ok := testwait.For(5*time.Second, func() bool {
		paid, err := w.s.db.OrdersPage(ctx, w.s.sale.ID, flashgate.StatusPaid, "", 1000)
		return err == nil && len(paid) >= want
	}); !ok {
		w.unpaid = append(w.unpaid, key)
	}
	in, err := w.inner.Capture(ctx, id, key)
	if err == nil {
		w.captured++
	}
	return in, err
}

func (w *waitingCapturer) Cancel(ctx context.Context, id string) (flashgate.Intent, error) {
	return w.inner.Cancel(ctx, id)
}

// TestDrawRacePayerStopsOnError: one failed write of the database while a
// settlement goes on. The charged entrants' orders are marked paid as
// their rows arrive all the same (before, the payer stopped for the rest
// of the settlement, minutes on a large draw: an order left unpaid past
// the payment window expires, its unit back in stock, its buyer charged).
func TestDrawRacePayerStopsOnError(t *testing.T) {
	drawBackends(t, func(t *testing.T, dsn string) {
		s := newDrawStack(t, dsn)
		cp := s.controlPlane(s.pacer())
		s.enter(cp, 16, func(string) string { return "4242424242424242" })
		capt := &waitingCapturer{s: s, inner: s.pacer()}
		c := drawclose.New(drawclose.Config{Redis: s.rdb, Store: &flakyTransitions{DB: s.db}, Reserver: s.inv, Capturer: capt,
			SeedSecret: controlplane.DeriveQueueSeedSecret(drawToken), Workers: 1, Clock: s.clock, Logger: quiet,
			Flush: func(ctx context.Context, sale string) (int, error) {
				return drawjournal.Flush(ctx, s.rdb, s.db, sale, 0)
			}})
		s.clock.Set(*s.sale.EntriesCloseAt)
		s.runClose(c)
		if len(capt.unpaid) != 0 {
			t.Errorf("captures made while earlier charged orders stayed unpaid: got %v, want none", capt.unpaid)
		}
		s.check(cp, 0)
	})
}

// stoppingCapturer stops the sale (the admin's POST /admin/sales/{id}/stop)
// before the close's first capture.
type stoppingCapturer struct {
	s     *drawStack
	cp    *controlplane.Service
	inner *payments.Pacer
	once  atomic.Bool
}

func (c *stoppingCapturer) Capture(ctx context.Context, id, key string) (flashgate.Intent, error) {
	if c.once.CompareAndSwap(false, true) {
		if err := c.cp.Stop(ctx, c.s.sale.ID); err != nil {
			c.s.t.Errorf("stop: %v", err)
		}
	}
	return c.inner.Capture(ctx, id, key)
}

func (c *stoppingCapturer) Cancel(ctx context.Context, id string) (flashgate.Intent, error) {
	return c.inner.Cancel(ctx, id)
}

// TestDrawRaceStopDuringClose: an admin stops a draw sale while its close
// captures. Every entrant charged must get the order of the unit paid for
// and the close must finish (before, the reserve path refused the closed
// sale after the capture: charged winners without orders, the close
// failing for ever).
func TestDrawRaceStopDuringClose(t *testing.T) {
	drawBackends(t, func(t *testing.T, dsn string) {
		s := newDrawStack(t, dsn)
		cp := s.controlPlane(s.pacer())
		s.enter(cp, 16, func(string) string { return "4242424242424242" })
		capt := &stoppingCapturer{s: s, cp: cp, inner: s.pacer()}
		c := drawclose.New(drawclose.Config{Redis: s.rdb, Store: s.db, Reserver: s.inv, Capturer: capt,
			SeedSecret: controlplane.DeriveQueueSeedSecret(drawToken), Workers: 4, Clock: s.clock, Logger: quiet,
			Flush: func(ctx context.Context, sale string) (int, error) {
				return drawjournal.Flush(ctx, s.rdb, s.db, sale, 0)
			}})
		s.clock.Set(*s.sale.EntriesCloseAt)
		var last error
		if _, ok := testwait.For(10*time.Second, func() bool {
			done, err := c.Close(s.ctx, s.sale)
			last = err
			return done
		}); !ok {
			t.Errorf("the close of a stopped draw did not finish: %v", last)
		}
		charged := 0
		for _, r := range s.entrants {
			if in, _ := s.stand.Intent(r.PaymentIntent); in.Status == flashgate.IntentSucceeded {
				charged++
				if o, err := s.db.Order(s.ctx, drawclose.OrderID(r.ID)); err != nil || o.Status != flashgate.StatusPaid {
					t.Errorf("entry %s charged: got its order %+v, %v; want it paid", r.ID, o, err)
				}
			}
		}
		if charged != int(s.sale.Total) {
			t.Errorf("charged: got %d, want %d (the units)", charged, s.sale.Total)
		}
	})
}
