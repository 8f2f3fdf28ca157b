package drawjournal_test

import (
	"context"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/drawjournal"
	"github.com/flashgate/flashgate/controlplane/internal/cptest"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/lua"
)

// TestFlushAfterEntriesLost: Redis loses a draw's entries while they are
// taken (a FLUSHALL; the rebuild brings the sale back, not its entries).
// ann, whose entry the database holds entered, is told she has none and
// enters again; bob enters after her. The journal must still reach the
// database: bob's entry is stored, and so is every change after it.
//
// It fails: the database keeps one live entry (pending or entered) per
// buyer (draw_entries_live), ann's new pending entry breaks it, and the
// flush's one transaction fails on it for ever, with every change behind
// it; the close's own flush fails the same way and the draw never closes.
// The fix is not small: either the rebuild brings the draw's entries back
// from the database (so that DrawEnter answers ann's live entry), or the
// flush settles a new entry of a buyer whose live one Redis lost (which
// of the two counts, and who releases the other's hold, is a decision for
// the design). Skipped until then.
func TestFlushAfterEntriesLost(t *testing.T) {
	t.Skip("defect: a buyer entering again after Redis lost the draw's entries blocks the draw's journal for ever (see above)")
	ctx := context.Background()
	rdb := redistest.Start(t).Client(t)
	db := cptest.OpenDB(t, cptest.SQLiteDSN(t))
	open := time.UnixMilli(1_000)
	prepare := func() {
		t.Helper()
		if err := lua.Prepare.Run(ctx, rdb, lua.SaleKeys("dr"), 3, 5, 2, 500, "", lua.DrawWindowArg(open, open.Add(time.Hour)), "S:2,M:1").Err(); err != nil {
			t.Fatal(err)
		}
	}
	enter := func(user, id string) {
		t.Helper()
		if v, err := lua.DrawEnter.Run(ctx, rdb, lua.DrawEnterKeys("dr", ""), user, id, "S", 1, 2_000, 0).Slice(); err != nil || v[0] != int64(0) {
			t.Fatalf("DrawEnter %s: %v %v", id, v, err)
		}
	}
	prepare()
	enter("ann", "e1")
	if v, err := lua.DrawSet.Run(ctx, rdb, lua.DrawChangeKeys("dr"), "ann", "e1", string(flashgate.DrawEntered), 2_000, string(flashgate.DrawPending)).Slice(); err != nil || v[0] != int64(0) {
		t.Fatalf("DrawSet: %v %v", v, err)
	}
	if _, err := drawjournal.Flush(ctx, rdb, db, "dr", 0); err != nil {
		t.Fatal(err)
	}
	// Redis loses everything; the re-sync rebuilds the sale's hash.
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	prepare()
	enter("ann", "e2")
	enter("bob", "e3")
	for range 2 {
		if _, err := drawjournal.Flush(ctx, rdb, db, "dr", 0); err != nil {
			t.Logf("Flush: %v", err)
		}
	}
	got, err := db.DrawEntries(ctx, "dr")
	if err != nil {
		t.Fatal(err)
	}
	stored := map[string]flashgate.DrawEntryState{}
	for _, e := range got {
		stored[e.ID] = e.State
	}
	if stored["e3"] != flashgate.DrawPending {
		t.Errorf("bob's entry e3: got %q, want pending (the journal blocked behind ann's e2)", stored["e3"])
	}
	if n, err := rdb.XLen(ctx, lua.DrawJournalKey("dr")).Result(); err != nil || n != 0 {
		t.Errorf("journal after the flushes: %d entries, %v; want 0", n, err)
	}
}
