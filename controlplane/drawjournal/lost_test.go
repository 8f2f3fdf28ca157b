package drawjournal_test

import (
	"context"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/drawjournal"
	"github.com/flashgate/flashgate/controlplane/internal/cptest"
	"github.com/flashgate/flashgate/internal/testenv/pgtest"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/lua"
)

// TestFlushAfterEntriesLost: Redis loses a draw's entries while they are
// taken (a FLUSHALL, and the sale's hash made again without them). ann,
// whose entry e1 the database holds entered with a hold, is told she has
// none and enters again (e2); bob enters after her. The database keeps one
// live entry per buyer (draw_entries_live): the flush must not fail on
// ann's e2 for ever, with every change behind it. The later entry
// supersedes the earlier: e2 is stored pending, e1 becomes withdrawn and
// its hold goes on the read path's list, to be released; bob's e3 is
// stored and the journal is empty.
func TestFlushAfterEntriesLost(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { flushAfterEntriesLost(t, cptest.SQLiteDSN(t)) })
	t.Run("postgres", func(t *testing.T) { flushAfterEntriesLost(t, pgtest.New(t)) })
}

func flushAfterEntriesLost(t *testing.T, dsn string) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client(t)
	db := cptest.OpenDB(t, dsn)
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
	if v, err := lua.DrawHold.Run(ctx, rdb, lua.DrawHoldKeys("dr"), "ann", "e1", "pi_e1", 2_000).Slice(); err != nil || v[0] != int64(0) {
		t.Fatalf("DrawHold: %v %v", v, err)
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
	if _, err := drawjournal.Flush(ctx, rdb, db, "dr", 0); err != nil {
		t.Errorf("Flush: %v", err)
	}
	got, err := db.DrawEntries(ctx, "dr")
	if err != nil {
		t.Fatal(err)
	}
	stored := map[string]flashgate.DrawEntryState{}
	for _, e := range got {
		stored[e.ID] = e.State
	}
	for _, c := range []struct {
		id   string
		want flashgate.DrawEntryState
	}{{"e1", flashgate.DrawWithdrawn}, {"e2", flashgate.DrawPending}, {"e3", flashgate.DrawPending}} {
		if stored[c.id] != c.want {
			t.Errorf("entry %s: got %q, want %q", c.id, stored[c.id], c.want)
		}
	}
	if hold, err := rdb.HGet(ctx, lua.DrawHoldKey("dr"), "e1").Result(); err != nil || hold != "pi_e1 ann" {
		t.Errorf("e1's hold record: got %q, %v; want %q", hold, err, "pi_e1 ann")
	}
	if _, err := rdb.ZScore(ctx, lua.DrawCheckKey("dr"), "e1").Result(); err != nil {
		t.Errorf("e1 on the read path's list: %v; want listed, its hold to be released", err)
	}
	if n, err := rdb.XLen(ctx, lua.DrawJournalKey("dr")).Result(); err != nil || n != 0 {
		t.Errorf("journal after the flushes: %d entries, %v; want 0", n, err)
	}
}
