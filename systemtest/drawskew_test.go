package systemtest

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane"
	"github.com/flashgate/flashgate/controlplane/drawclose"
	"github.com/flashgate/flashgate/controlplane/drawhold"
	"github.com/flashgate/flashgate/controlplane/drawjournal"
	"github.com/flashgate/flashgate/draw"
	"github.com/flashgate/flashgate/lua"
)

// losingCapturer runs lost once, before the close's first capture.
type losingCapturer struct {
	next draw.Capturer
	once atomic.Bool
	lost func()
}

func (c *losingCapturer) Capture(ctx context.Context, id, key string) (flashgate.Intent, error) {
	if c.once.CompareAndSwap(false, true) {
		c.lost()
	}
	return c.next.Capture(ctx, id, key)
}

func (c *losingCapturer) Cancel(ctx context.Context, id string) (flashgate.Intent, error) {
	return c.next.Cancel(ctx, id)
}

// TestDrawRaceRedisClockAhead: Redis's clock runs ahead of the control
// plane's, so the journal stamps the close's won and lost moves later than
// the control plane's now. The leader's tick writes them to the database,
// then Redis loses the draw's entries (a rebuild brings none back) before
// the first capture: the close's moves to captured and released go to the
// database directly, stamped with the control plane's clock. Each row must
// end as the close left its entry (captured or released), not as the
// earlier won or lost whose stamp the skew made later.
func TestDrawRaceRedisClockAhead(t *testing.T) {
	drawBackends(t, func(t *testing.T, dsn string) {
		s := newDrawStack(t, dsn)
		cp := s.controlPlane(s.pacer())
		s.enter(cp, 12, func(string) string { return "4242424242424242" })
		// Redis's clock an hour ahead: a journal entry stamped then (the
		// pending entry's state, as lua.DrawHold journals it) makes the
		// stream stamp every later change at least as late.
		ahead := time.Now().Add(time.Hour).UnixMilli()
		pending := "pending d12 1 S buyer-12"
		if err := s.rdb.XAdd(s.ctx, &redis.XAddArgs{Stream: lua.DrawJournalKey(s.sale.ID), ID: formatID(ahead),
			Values: []any{"e", pending}}).Err(); err != nil {
			t.Fatal(err)
		}
		capt := &losingCapturer{next: s.pacer(), lost: func() {
			// The tick's flush of the won and lost moves, then the loss.
			if _, err := drawjournal.Flush(s.ctx, s.rdb, s.db, s.sale.ID, 0); err != nil {
				t.Errorf("the tick's flush: %v", err)
			}
			if err := s.rdb.Del(s.ctx, lua.DrawKey(s.sale.ID), lua.DrawJournalKey(s.sale.ID)).Err(); err != nil {
				t.Errorf("losing the entries: %v", err)
			}
		}}
		// One capture at a time: no capture's move is journaled while the
		// loss runs (TestDrawRaceJournalLostAfterMoves has that case).
		c := drawclose.New(drawclose.Config{Redis: s.rdb, Store: s.db, Reserver: s.inv, Capturer: capt,
			SeedSecret: controlplane.DeriveQueueSeedSecret(drawToken), Workers: 1, Clock: s.clock, Logger: quiet,
			Flush: func(ctx context.Context, sale string) (int, error) {
				return drawjournal.Flush(ctx, s.rdb, s.db, sale, 0)
			}})
		s.clock.Set(*s.sale.EntriesCloseAt)
		s.runClose(c)
		rows, err := s.db.DrawEntries(s.ctx, s.sale.ID)
		if err != nil {
			t.Fatal(err)
		}
		charged := 0
		for _, r := range rows {
			e, ok := s.entrants[r.ID]
			if !ok {
				continue
			}
			want := flashgate.DrawReleased
			if in, _ := s.stand.Intent(e.PaymentIntent); in.Status == flashgate.IntentSucceeded {
				want = flashgate.DrawCaptured
				charged++
			}
			if r.State != want {
				t.Errorf("entry %s: got %s, want %s (the close's move)", r.ID, r.State, want)
			}
		}
		if charged != int(s.sale.Total) {
			t.Errorf("charged: got %d, want %d", charged, s.sale.Total)
		}
	})
}

// formatID is a stream entry id of ms, sequence 0.
func formatID(ms int64) string { return strconv.FormatInt(ms, 10) + "-0" }

// TestDrawRaceUndrawnHoldAfterLoss: a pending entry's hold, authorised
// without its webhook (the read path has it on its list, to release at
// the close), and Redis loses the draw's entries, holds and that list (a
// FLUSHALL; the rebuild brings the sale back, none of them). The close
// draws the entered entries and settles them; the pending entry is not in
// the draw, and its hold must be released all the same, not left on the
// card until the provider lets it lapse (about 7 days).
//
// The close puts the holds of the pending rows it does not draw back on
// the read path's list, which releases them (it failed without: only the
// read path released the hold of an entry not drawn, and its list lived
// in Redis only).
func TestDrawRaceUndrawnHoldAfterLoss(t *testing.T) {
	drawBackends(t, func(t *testing.T, dsn string) {
		s := newDrawStack(t, dsn)
		cp := s.controlPlane(s.pacer())
		s.enter(cp, 8, func(string) string { return "4242424242424242" })
		rows, err := s.db.DrawEntries(s.ctx, s.sale.ID)
		if err != nil {
			t.Fatal(err)
		}
		var pending flashgate.DrawEntry
		for _, r := range rows {
			if r.State == flashgate.DrawPending {
				pending = r
			}
		}
		in, err := s.pay.Hold(s.ctx, flashgate.Hold{EntryID: pending.ID, SaleID: s.sale.ID, AmountCents: 1200, Currency: "usd"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.stand.Confirm(in.ID, "4242424242424242"); err != nil {
			t.Fatal(err)
		}
		// The hold as lua.DrawHold records it: with the entry in Redis
		// (the read path's list) and journaled to its row.
		if v, err := lua.DrawHold.Run(s.ctx, s.rdb, lua.DrawHoldKeys(s.sale.ID), pending.UserID, pending.ID, in.ID,
			s.clock.Now().UnixMilli()).Slice(); err != nil || v[0] != int64(0) {
			t.Fatalf("DrawHold: %v, %v", v, err)
		}
		if _, err := drawjournal.Flush(s.ctx, s.rdb, s.db, s.sale.ID, 0); err != nil {
			t.Fatal(err)
		}
		// Redis loses the draw's entries, holds and list; the sale's hash
		// is rebuilt.
		if err := s.rdb.Del(s.ctx, lua.DrawKey(s.sale.ID), lua.DrawHoldKey(s.sale.ID), lua.DrawCheckKey(s.sale.ID),
			lua.DrawJournalKey(s.sale.ID)).Err(); err != nil {
			t.Fatal(err)
		}
		s.clock.Set(*s.sale.EntriesCloseAt)
		s.closeDraw(cp)
		// The leader's read path.
		h := drawhold.New(drawhold.Config{Redis: s.rdb, Store: s.db, Provider: s.pay, Clock: s.clock, Logger: quiet,
			Grace: time.Second, Rate: 1000})
		draws := []flashgate.Sale{s.sale}
		for range 3 {
			s.clock.Add(10 * time.Minute)
			if _, err := h.Reconcile(s.ctx, draws); err != nil {
				t.Logf("read path: %v", err)
			}
		}
		if got, _ := s.stand.Intent(in.ID); got.Status != flashgate.IntentCanceled {
			t.Errorf("the pending entry's hold after the close: got %s, want canceled", got.Status)
		}
	})
}

// TestDrawRaceJournalLostAfterMoves: Redis loses the draw's entries and
// journal (a FLUSHALL, the sale's hash rebuilt) after the close moved
// every drawn entry (won or lost, then captured or released: journaled,
// not yet flushed) and before its last flush. The close knows where it
// left each entry; the rows must say so too, not entered.
func TestDrawRaceJournalLostAfterMoves(t *testing.T) {
	drawBackends(t, func(t *testing.T, dsn string) {
		s := newDrawStack(t, dsn)
		cp := s.controlPlane(s.pacer())
		s.enter(cp, 12, func(string) string { return "4242424242424242" })
		var settling atomic.Bool
		capt := &losingCapturer{next: s.pacer(), lost: func() { settling.Store(true) }}
		lost := false
		c := drawclose.New(drawclose.Config{Redis: s.rdb, Store: s.db, Reserver: s.inv, Capturer: capt,
			SeedSecret: controlplane.DeriveQueueSeedSecret(drawToken), Workers: 4, Clock: s.clock, Logger: quiet,
			Flush: func(ctx context.Context, sale string) (int, error) {
				if settling.Load() && !lost {
					// The close's flush after its moves: Redis lost them.
					lost = true
					if err := s.rdb.Del(ctx, lua.DrawKey(sale), lua.DrawJournalKey(sale)).Err(); err != nil {
						return 0, err
					}
				}
				return drawjournal.Flush(ctx, s.rdb, s.db, sale, 0)
			}})
		s.clock.Set(*s.sale.EntriesCloseAt)
		s.runClose(c)
		if !lost {
			t.Fatal("the close made no flush after its captures")
		}
		rows, err := s.db.DrawEntries(s.ctx, s.sale.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			e, ok := s.entrants[r.ID]
			if !ok {
				continue
			}
			want := flashgate.DrawReleased
			if in, _ := s.stand.Intent(e.PaymentIntent); in.Status == flashgate.IntentSucceeded {
				want = flashgate.DrawCaptured
			}
			if r.State != want {
				t.Errorf("entry %s: got %s, want %s (where the close left it)", r.ID, r.State, want)
			}
		}
	})
}
