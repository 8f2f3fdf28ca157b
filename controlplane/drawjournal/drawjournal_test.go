package drawjournal_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/drawjournal"
	"github.com/flashgate/flashgate/controlplane/internal/cptest"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/lua"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestFlush: the entry scripts' journal reaches draw_entries, each
// entry's last change winning, and leaves the stream empty.
func TestFlush(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client(t)
	db := cptest.OpenDB(t, cptest.SQLiteDSN(t))
	open := time.UnixMilli(1_000)
	if err := lua.Prepare.Run(ctx, rdb, lua.SaleKeys("dr"), 3, 5, 2, 500, "", lua.DrawWindowArg(open, open.Add(time.Hour)), "S:2,M:1").Err(); err != nil {
		t.Fatal(err)
	}
	at := int64(2_000)
	for i, u := range []string{"ann", "bob user"} {
		if v, err := lua.DrawEnter.Run(ctx, rdb, lua.DrawEnterKeys("dr", ""), u, []string{"e1", "e2"}[i], "S", 1, at, 0).Slice(); err != nil || v[0] != int64(0) {
			t.Fatalf("DrawEnter: %v %v", v, err)
		}
	}
	if n, err := drawjournal.Flush(ctx, rdb, db, "dr", 0); err != nil || n != 2 {
		t.Fatalf("Flush: %d, %v; want 2", n, err)
	}
	if v, err := lua.DrawSet.Run(ctx, rdb, lua.DrawChangeKeys("dr"), "ann", "e1", string(flashgate.DrawEntered), at, string(flashgate.DrawPending)).Slice(); err != nil || v[0] != int64(0) {
		t.Fatalf("DrawSet: %v %v", v, err)
	}
	if v, err := lua.DrawWithdraw.Run(ctx, rdb, lua.DrawWithdrawKeys("dr"), "bob user", at, at).Slice(); err != nil || v[0] != int64(0) {
		t.Fatalf("DrawWithdraw: %v %v", v, err)
	}
	if v, err := lua.DrawEnter.Run(ctx, rdb, lua.DrawEnterKeys("dr", ""), "bob user", "e3", "M", 2, at, 0).Slice(); err != nil || v[0] != int64(0) {
		t.Fatalf("DrawEnter again: %v %v", v, err)
	}
	if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: lua.DrawJournalKey("dr"), Values: []any{"e", "bogus"}}).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := drawjournal.Flush(ctx, rdb, db, "dr", 2); err != nil || n != 2 {
		t.Fatalf("Flush of 2: %d, %v; want 2", n, err)
	}
	if n, err := drawjournal.Flush(ctx, rdb, db, "dr", 0); err == nil || n != 1 {
		t.Errorf("Flush with a bad entry: %d, %v; want 1 and an error", n, err)
	}
	if n, err := rdb.XLen(ctx, lua.DrawJournalKey("dr")).Result(); err != nil || n != 0 {
		t.Errorf("journal after the flushes: %d entries, %v; want 0", n, err)
	}
	got, err := db.DrawEntries(ctx, "dr")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"e1": "ann entered S 1", "e2": "bob user withdrawn S 1", "e3": "bob user pending M 2"}
	if len(got) != len(want) {
		t.Fatalf("entries: got %+v, want %v", got, want)
	}
	for _, e := range got {
		if s := e.UserID + " " + string(e.State) + " " + e.Variant + " " + strconv.FormatInt(e.Quantity, 10); s != want[e.ID] {
			t.Errorf("entry %s: got %q, want %q", e.ID, s, want[e.ID])
		}
	}
}

// gatedStore holds its first SupersedeDrawEntries (Flush's write) until
// release is closed, after signalling held.
type gatedStore struct {
	drawjournal.Store
	once          sync.Once
	held, release chan struct{}
}

func (g *gatedStore) SupersedeDrawEntries(ctx context.Context, entries []flashgate.DrawEntry, closing func([]flashgate.DrawEntry) ([]flashgate.DrawEntry, error), before func([]flashgate.DrawEntry) error) error {
	g.once.Do(func() { close(g.held); <-g.release })
	return g.Store.SupersedeDrawEntries(ctx, entries, closing, before)
}

// TestFlushesAtOnce: two Flushes of one journal at once (the leader's tick
// beside a close): the first read an entry's pending, the second its
// pending and entered, all in one millisecond, and wrote first. The
// entry stays entered (it was left out of the draw when the first wrote
// its pending last).
func TestFlushesAtOnce(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client(t)
	db := cptest.OpenDB(t, cptest.SQLiteDSN(t))
	// The entry's enter and its move, journaled in one millisecond.
	for i, st := range []flashgate.DrawEntryState{flashgate.DrawPending, flashgate.DrawEntered} {
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: lua.DrawJournalKey("dr"), ID: "2000-" + strconv.Itoa(i),
			Values: []any{"e", string(st) + " e1 1 S ann"}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	g := &gatedStore{Store: db, held: make(chan struct{}), release: make(chan struct{})}
	first := make(chan error, 1)
	go func() {
		_, err := drawjournal.Flush(ctx, rdb, g, "dr", 1) // reads the pending only
		first <- err
	}()
	<-g.held
	if n, err := drawjournal.Flush(ctx, rdb, db, "dr", 0); err != nil || n != 2 {
		t.Fatalf("the second Flush: %d, %v; want 2", n, err)
	}
	close(g.release)
	if err := <-first; err != nil {
		t.Fatalf("the first Flush: %v", err)
	}
	got, err := db.DrawEntries(ctx, "dr")
	if err != nil || len(got) != 1 {
		t.Fatalf("entries: %+v, %v; want one", got, err)
	}
	if got[0].State != flashgate.DrawEntered {
		t.Errorf("entry e1: got %s, want entered (the first Flush's older change written last)", got[0].State)
	}
}
