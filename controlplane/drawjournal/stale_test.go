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
)

// TestStaleEntryAfterReentry: a flush reads ann's new entry e1 (its first
// change, not written yet); Redis loses the sale, and the rebuild has no
// row of e1, so ann enters again: e2, held and authorised, written by the
// leader's next flush; in "drawn" the draw's close then draws e2, the one
// entry, and it wins. Only then does the first flush write e1. The later
// entry supersedes the earlier (docs/api.md, "Draws"): e2 must stay ann's
// entry, its hold kept, and e1 be withdrawn. Before the fix the stale
// write of e1, a new id to the table, withdrew e2's row (the later entry
// superseded by the earlier), put its hold on the read path's list and,
// the restore's mark changed, e1 into Redis over e2: the read path then
// released e2's hold, a winner's, as a replaced entry's.
func TestStaleEntryAfterReentry(t *testing.T) {
	for _, be := range drawBackends {
		for _, c := range []struct {
			name  string
			drawn bool
		}{{"entries open", false}, {"drawn", true}} {
			t.Run(be.name+"/"+c.name, func(t *testing.T) { staleEntryAfterReentry(t, be.dsn(t), c.drawn) })
		}
	}
}

func staleEntryAfterReentry(t *testing.T, dsn string, drawn bool) {
	fx := newDrawFixture(t, dsn, 1)
	ctx, db, rdb, sale, closeAt := fx.ctx, fx.db, fx.rdb, fx.sale, fx.closeAt
	rebuild := func() { t.Helper(); fx.rebuild(t, db) }
	flush := func(ctx context.Context, sale string) (int, error) { return drawjournal.Flush(ctx, rdb, db, sale, 0) }
	var won []string
	after := testclock.New(closeAt.Add(time.Second))
	closer := drawclose.New(drawclose.Config{Redis: rdb, Store: db, Reserver: winReserver{&won}, Capturer: drawclose.Instant{},
		SeedSecret: []byte("k"), Clock: after, Logger: cptest.QuietLogger(), Flush: flush})
	now := time.Now().UnixMilli()
	rebuild()
	if v, err := lua.DrawEnter.Run(ctx, rdb, lua.DrawEnterKeys(sale.ID, ""), "ann", "e1", "", 1, now, 0).Slice(); err != nil || v[0] != int64(lua.DrawOK) {
		t.Fatalf("DrawEnter e1: %v, %v", v, err)
	}
	gate := &writeGate{Store: db, hook: func() {
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			t.Fatalf("FLUSHALL: %v", err)
		}
		rebuild()
		// Redis and the rows know no entry of ann's: she enters again.
		later := now + 1000
		if v, err := lua.DrawEnter.Run(ctx, rdb, lua.DrawEnterKeys(sale.ID, ""), "ann", "e2", "", 1, later, 0).Slice(); err != nil || v[0] != int64(lua.DrawOK) {
			t.Fatalf("DrawEnter e2: %v, %v", v, err)
		}
		if v, err := lua.DrawHold.Run(ctx, rdb, lua.DrawHoldKeys(sale.ID), "ann", "e2", "pi_e2", later).Slice(); err != nil || v[0] != int64(lua.DrawOK) {
			t.Fatalf("DrawHold: %v, %v", v, err)
		}
		if v, err := lua.DrawSet.Run(ctx, rdb, lua.DrawChangeKeys(sale.ID), "ann", "e2", string(flashgate.DrawEntered), later, string(flashgate.DrawPending)).Slice(); err != nil || v[0] != int64(lua.DrawOK) {
			t.Fatalf("DrawSet: %v, %v", v, err)
		}
		if _, err := flush(ctx, sale.ID); err != nil {
			t.Fatalf("Flush: %v", err)
		}
		if drawn {
			if done, err := closer.Close(ctx, sale); done || err == nil || !slices.Equal(won, []string{"ann"}) {
				t.Fatalf("Close: %v, %v, winners %v; want cut short at ann's order", done, err, won)
			}
		}
	}}
	if _, err := drawjournal.Flush(ctx, rdb, gate, sale.ID, 0); err != nil {
		t.Fatalf("the stale flush: %v", err)
	}
	// The read path (a gateway's, before the close; the leader's after).
	p := &heldProvider{}
	clock := testclock.New(time.Now().Add(time.Minute))
	if drawn {
		clock = after
	}
	h := drawhold.New(drawhold.Config{Redis: rdb, Store: db, Provider: p, Clock: clock, Logger: cptest.QuietLogger(), Rate: 1000})
	if _, err := h.Reconcile(ctx, []flashgate.Sale{sale}); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	for _, c := range []struct {
		id   string
		want flashgate.DrawEntryState
	}{{"e1", flashgate.DrawWithdrawn}, {"e2", flashgate.DrawEntered}} {
		if r, err := db.DrawEntry(ctx, sale.ID, c.id); err != nil || r.State != c.want {
			t.Errorf("row %s: got %s, %v; want %s", c.id, r.State, err, c.want)
		}
	}
	got, _ := rdb.HGet(ctx, lua.DrawKey(sale.ID), "ann").Result()
	if st, id, _, _, _ := lua.ParseDrawEntry(got); id != "e2" || (st != flashgate.DrawEntered && st != flashgate.DrawWon) {
		t.Errorf("ann's entry in Redis: got %q, want e2 entered (or won)", got)
	}
	if slices.Contains(p.released, "pi_e2") {
		t.Errorf("holds released: got %v, want not pi_e2 (ann's later entry's)", p.released)
	}
}
