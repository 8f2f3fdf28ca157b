package drawjournal_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/drawclose"
	"github.com/flashgate/flashgate/controlplane/drawhold"
	"github.com/flashgate/flashgate/controlplane/drawjournal"
	"github.com/flashgate/flashgate/controlplane/internal/cptest"
	"github.com/flashgate/flashgate/internal/testenv/testclock"
	"github.com/flashgate/flashgate/lua"
	"github.com/flashgate/flashgate/sqldb"
)

// closingGate is the close's database: hook runs once, before its
// DrawClosing records the close's read of the rows.
type closingGate struct {
	*sqldb.DB
	hook func()
}

func (g *closingGate) DrawClosing(ctx context.Context, sale string) error {
	if g.hook != nil {
		g.hook()
		g.hook = nil
	}
	return g.DB.DrawClosing(ctx, sale)
}

// TestShutAcrossRebuild: the close shuts the entry window in Redis
// (draw_shut) so that a gateway whose clock is still before the close
// cannot enter an entry after the close's final flush read the journal;
// a flush after the close's record writes a move to entered that is
// still in the journal. Redis loses the sale and the rebuild makes the
// hash again from the database, without the shut: ann's hold, authorised
// late, reaches a gateway whose clock is a second behind the leader's,
// and its webhook enters e1 on the rebuilt sale. Before the fix the move
// was written to the row after the close drew the rows without it
// (entered out of the draw), and the webhook took the hold off the read
// path's list: it stayed on her card. In "rebuilt after the close" the
// close finished first (the leader does not run it again, so nothing shut
// the rebuilt sale); in "rebuilt as the close records" the rebuild ran
// between the close's shut (of a lost sale: nothing to shut) and its
// record, and the webhook came after the close; in "entered as the close
// records" the webhook came there too, after the close's final flush:
// the close must then draw e1 (the entry entered before its read of the
// rows), its hold the close's.
func TestShutAcrossRebuild(t *testing.T) {
	for _, be := range drawBackends {
		for _, c := range []struct {
			name string
			when shutCase
		}{{"rebuilt after the close", rebuiltAfter}, {"rebuilt as the close records", rebuiltDuring}, {"entered as the close records", enteredDuring}} {
			t.Run(be.name+"/"+c.name, func(t *testing.T) { shutAcrossRebuild(t, be.dsn(t), c.when) })
		}
	}
}

// shutCase is when the sale is rebuilt and the late webhook comes.
type shutCase int

const (
	rebuiltAfter  shutCase = iota // both after the close finished
	rebuiltDuring                 // the rebuild just before the close's record, the webhook after the close
	enteredDuring                 // both just before the close's record
)

// winReserver is the close's reserve path for a winner it expects: it
// records the winner and answers that it cannot reserve now.
type winReserver struct{ won *[]string }

func (r winReserver) ReserveWinner(_ context.Context, _, _, userID, _ string, _ int64) (string, error) {
	*r.won = append(*r.won, userID)
	return "", flashgate.ErrUnavailable
}

func shutAcrossRebuild(t *testing.T, dsn string, when shutCase) {
	fx := newDrawFixture(t, dsn, 1)
	ctx, db, rdb, sale, closeAt := fx.ctx, fx.db, fx.rdb, fx.sale, fx.closeAt
	rebuild := func() { t.Helper(); fx.rebuild(t, db) }
	flush := func(ctx context.Context, sale string) (int, error) { return drawjournal.Flush(ctx, rdb, db, sale, 0) }
	after := testclock.New(closeAt.Add(time.Second))
	// The gateway's clock is behind the leader's: before the close.
	behind := testclock.New(closeAt.Add(-time.Second))
	p := &heldProvider{}
	gateway := drawhold.New(drawhold.Config{Redis: rdb, Store: db, Provider: p, Clock: behind, Logger: cptest.QuietLogger(), Rate: 1000})
	webhook := func() {
		t.Helper()
		// Her hold's webhook, late, at the gateway.
		ev := flashgate.PaymentEvent{ID: "evt_1", Type: flashgate.EventIntentHeld, IntentID: "pi_e1", EntryID: "e1", SaleID: sale.ID}
		if err := gateway.Event(ctx, ev); err != nil {
			t.Errorf("Event: %v", err)
		}
	}
	store := &closingGate{DB: db}
	var reserver drawclose.Reserver = noReserver{t}
	var won []string
	if when == enteredDuring {
		reserver = winReserver{&won}
	}
	closer := drawclose.New(drawclose.Config{Redis: rdb, Store: store, Reserver: reserver, Capturer: drawclose.Instant{},
		SeedSecret: []byte("k"), Clock: after, Logger: cptest.QuietLogger(), Flush: flush})
	now := time.Now().UnixMilli()
	rebuild() // the sale's hash, from the database
	if v, err := lua.DrawEnter.Run(ctx, rdb, lua.DrawEnterKeys(sale.ID, ""), "ann", "e1", "", 1, now, 0).Slice(); err != nil || v[0] != int64(lua.DrawOK) {
		t.Fatalf("DrawEnter: %v, %v", v, err)
	}
	if v, err := lua.DrawHold.Run(ctx, rdb, lua.DrawHoldKeys(sale.ID), "ann", "e1", "pi_e1", now).Slice(); err != nil || v[0] != int64(lua.DrawOK) {
		t.Fatalf("DrawHold: %v, %v", v, err)
	}
	if _, err := flush(ctx, sale.ID); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if when != rebuiltAfter {
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		store.hook = func() {
			rebuild()
			if when == enteredDuring {
				webhook()
			}
		}
	}
	done, err := closer.Close(ctx, sale)
	if when == enteredDuring {
		// e1 entered before the close read the rows: it is drawn, and
		// wins (the reserve path, here, cannot make its order yet).
		if done || err == nil || !slices.Equal(won, []string{"ann"}) {
			t.Errorf("Close: %v, %v, winners %v; want cut short at ann's order", done, err, won)
		}
		if r, err := db.DrawEntry(ctx, sale.ID, "e1"); err != nil || r.State != flashgate.DrawEntered {
			t.Errorf("e1: got row %s, %v; want entered (drawn)", r.State, err)
		}
		return
	}
	if err != nil || !done {
		t.Fatalf("Close: %v, %v; want done", done, err)
	}
	if when == rebuiltAfter {
		rdb.FlushAll(ctx)
		rebuild()
	}
	webhook()
	// The leader's next tick: its flush, and its read path.
	if _, err := flush(ctx, sale.ID); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	h := drawhold.New(drawhold.Config{Redis: rdb, Store: db, Provider: p, Clock: after, Logger: cptest.QuietLogger(), Rate: 1000})
	if _, err := h.Reconcile(ctx, []flashgate.Sale{sale}); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	r, err := db.DrawEntry(ctx, sale.ID, "e1")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := rdb.HGet(ctx, lua.DrawKey(sale.ID), "ann").Result()
	if r.State == flashgate.DrawEntered || got == "entered e1 1 " {
		t.Errorf("e1: got row %s, in Redis %q; want not entered (the close drew without it)", r.State, got)
	}
	p.mu.Lock()
	released := slices.Clone(p.released)
	p.mu.Unlock()
	if !slices.Contains(released, "pi_e1") {
		t.Errorf("holds released: got %v, want pi_e1 (ann's hold, out of the draw)", released)
	}
}
