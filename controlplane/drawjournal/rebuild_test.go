package drawjournal_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/drawjournal"
	"github.com/flashgate/flashgate/controlplane/internal/cptest"
	"github.com/flashgate/flashgate/controlplane/internal/fencing"
	"github.com/flashgate/flashgate/controlplane/resync"
	"github.com/flashgate/flashgate/internal/testenv/pgtest"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/lua"
	"github.com/flashgate/flashgate/sqldb"
)

// writeGate runs hook once, before the first SupersedeDrawEntries (a
// Flush's write) goes through to the database.
type writeGate struct {
	drawjournal.Store
	once sync.Once
	hook func()
}

func (g *writeGate) SupersedeDrawEntries(ctx context.Context, entries []flashgate.DrawEntry, closing func([]flashgate.DrawEntry) ([]flashgate.DrawEntry, error), before func([]flashgate.DrawEntry) error) error {
	g.once.Do(g.hook)
	return g.Store.SupersedeDrawEntries(ctx, entries, closing, before)
}

// rowsGate is the rebuild's database: its EachDrawEntry reads every row,
// runs hook, and only then hands the rows on (the restore sends them to
// Redis after the hook).
type rowsGate struct {
	*sqldb.DB
	hook func()
}

func (g *rowsGate) EachDrawEntry(ctx context.Context, sale string, fn func(flashgate.DrawEntry) error) error {
	rows, err := g.DB.DrawEntries(ctx, sale)
	if err != nil {
		return err
	}
	if g.hook != nil {
		g.hook()
	}
	for _, r := range rows {
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}

// TestFlushAcrossRebuild: a flush of a draw's journal reads a change from
// Redis, Redis then loses the sale and a re-sync rebuilds it from
// draw_entries, and only then does the flush's write reach the database
// (a flush of another process, or of one whose lock the rebuild does not
// take). The restore put the entry back as the database held it before
// the write; the write takes the database past it. The entry in Redis
// must end as its row does, and the hold of an entry withdrawn (or
// replaced) on the read path's list, to be released: before the fix,
// ann's withdrawn e1 showed entered and its hold stayed on the card
// until it lapsed (the close draws the rows, and lists only the pending
// ones' holds). In "restore after the write" the write lands after the
// rebuild read the rows and before it sent them: the restore's stale
// page must not take the entry back.
func TestFlushAcrossRebuild(t *testing.T) {
	for _, be := range []struct {
		name string
		dsn  func(t *testing.T) string
	}{{"sqlite", cptest.SQLiteDSN}, {"postgres", func(t *testing.T) string { return pgtest.New(t) }}} {
		for _, c := range []struct {
			name string
			// replace: ann's e1 is lost once and she enters e2 (which
			// supersedes e1 in the database), instead of withdrawing e1.
			replace bool
			// midRestore: the write lands between the rebuild's read of
			// the rows and its pages.
			midRestore bool
			want       string // ann's entry in Redis at the end
			listed     string // the entry whose hold is on the read path's list
			counts     [3]string
		}{
			{name: "withdrawn", want: "withdrawn e1 1 ", listed: "e1", counts: [3]string{"0", "0", "1"}},
			{name: "withdrawn, restore after the write", midRestore: true, want: "withdrawn e1 1 ", listed: "e1", counts: [3]string{"0", "0", "1"}},
			{name: "replaced", replace: true, want: "pending e2 1 ", listed: "e1", counts: [3]string{"1", "0", "0"}},
			{name: "replaced, restore after the write", replace: true, midRestore: true, want: "pending e2 1 ", listed: "e1", counts: [3]string{"1", "0", "0"}},
		} {
			t.Run(be.name+"/"+c.name, func(t *testing.T) {
				flushAcrossRebuild(t, be.dsn(t), c.replace, c.midRestore, c.want, c.listed, c.counts)
			})
		}
	}
}

func flushAcrossRebuild(t *testing.T, dsn string, replace, midRestore bool, want, listed string, counts [3]string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db, rdb := cptest.OpenDB(t, dsn), redistest.Start(t).Client(t)
	open := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	closeAt := open.Add(time.Hour)
	sale := flashgate.Sale{ID: "dr", Name: "Drop", Total: 3, PerUser: 2, PriceCents: 500, State: flashgate.StateOpen,
		Queue: flashgate.QueueDraw, EntriesOpenAt: &open, EntriesCloseAt: &closeAt}
	if err := db.CreateSale(ctx, sale); err != nil {
		t.Fatalf("CreateSale: %v", err)
	}
	tok, err := lua.TakeFence.Run(ctx, rdb, lua.FenceKeys(), time.Now().UnixMilli()).Int64()
	if err != nil {
		t.Fatalf("TakeFence: %v", err)
	}
	ctx = fencing.WithValue(ctx, tok)
	rows := &rowsGate{DB: db}
	rebuild := func() {
		t.Helper()
		s := resync.New(rdb, rows, nil, cptest.QuietLogger(), prometheus.NewCounter(prometheus.CounterOpts{Name: "resyncs"}))
		if _, _, err := s.Resync(ctx, sale.ID); err != nil {
			t.Errorf("Resync: %v", err)
		}
	}
	lose := func() {
		t.Helper()
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			t.Fatalf("FLUSHALL: %v", err)
		}
	}
	now := time.Now().UnixMilli()
	enter := func(id string) {
		t.Helper()
		if v, err := lua.DrawEnter.Run(ctx, rdb, lua.DrawEnterKeys(sale.ID, ""), "ann", id, "", 1, now, 0).Slice(); err != nil || v[0] != int64(lua.DrawOK) {
			t.Fatalf("DrawEnter %s: %v, %v", id, v, err)
		}
	}
	rebuild() // the sale's hash, from the database
	enter("e1")
	if v, err := lua.DrawHold.Run(ctx, rdb, lua.DrawHoldKeys(sale.ID), "ann", "e1", "pi_e1", now).Slice(); err != nil || v[0] != int64(lua.DrawOK) {
		t.Fatalf("DrawHold: %v, %v", v, err)
	}
	if v, err := lua.DrawSet.Run(ctx, rdb, lua.DrawChangeKeys(sale.ID), "ann", "e1", string(flashgate.DrawEntered), now, string(flashgate.DrawPending)).Slice(); err != nil || v[0] != int64(lua.DrawOK) {
		t.Fatalf("DrawSet: %v, %v", v, err)
	}
	if _, err := drawjournal.Flush(ctx, rdb, db, sale.ID, 0); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	// ann's change the flush below reads before the loss: her withdrawal
	// of e1, or (after a loss nobody rebuilt but the sale's hash, as in
	// TestFlushAfterEntriesLost) her new entry e2.
	if replace {
		lose()
		rebuild()
		if err := rdb.Del(ctx, lua.DrawKey(sale.ID), lua.DrawHoldKey(sale.ID), lua.DrawCheckKey(sale.ID)).Err(); err != nil {
			t.Fatal(err)
		}
		enter("e2")
	} else if v, err := lua.DrawWithdraw.Run(ctx, rdb, lua.DrawWithdrawKeys(sale.ID), "ann", now, now).Slice(); err != nil || v[0] != int64(lua.DrawOK) {
		t.Fatalf("DrawWithdraw: %v, %v", v, err)
	}
	// The flush has read the journal; Redis loses the sale and the
	// re-sync rebuilds it, all before the flush's write, or with the write
	// between the rebuild's read of the rows and its pages.
	gate := &writeGate{Store: db}
	if midRestore {
		held, release := make(chan struct{}), make(chan struct{})
		wrote := make(chan error, 1)
		gate.hook = func() { close(held); <-release }
		go func() {
			_, err := drawjournal.Flush(ctx, rdb, gate, sale.ID, 0)
			wrote <- err
		}()
		<-held
		lose()
		rows.hook = func() {
			close(release)
			if err := <-wrote; err != nil {
				t.Errorf("the flush across the rebuild: %v", err)
			}
		}
		rebuild()
		rows.hook = nil
	} else {
		gate.hook = func() {
			lose()
			rebuild()
		}
		if _, err := drawjournal.Flush(ctx, rdb, gate, sale.ID, 0); err != nil {
			t.Fatalf("the flush across the rebuild: %v", err)
		}
	}
	check(t, ctx, rdb, db, sale.ID, want, listed, counts)
}

// check compares ann's entry in Redis with want, the read path's list
// with listed, and the sale hash's counts of pending, entered and
// withdrawn entries with counts.
func check(t *testing.T, ctx context.Context, rdb *redis.Client, db *sqldb.DB, sale, want, listed string, counts [3]string) {
	t.Helper()
	if got, err := rdb.HGet(ctx, lua.DrawKey(sale), "ann").Result(); err != nil || got != want {
		r, _ := db.DrawEntries(ctx, sale)
		t.Errorf("ann's entry in Redis: got %q, %v; want %q (the rows: %+v)", got, err, want, r)
	}
	if _, err := rdb.ZScore(ctx, lua.DrawCheckKey(sale), listed).Result(); err != nil {
		t.Errorf("%s on the read path's list: %v; want listed, its hold to be released", listed, err)
	}
	got, err := rdb.HMGet(ctx, lua.SaleKey(sale), lua.DrawStateField(flashgate.DrawPending),
		lua.DrawStateField(flashgate.DrawEntered), lua.DrawStateField(flashgate.DrawWithdrawn)).Result()
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range counts {
		if g, _ := got[i].(string); g != w && !(w == "0" && got[i] == nil) {
			t.Errorf("count %d (pending, entered, withdrawn): got %v, want %s", i, got[i], w)
		}
	}
}

// TestReapplyAfterReentry: a flush (an old leader's, say, stalled) reads
// ann's e1 entered from the journal; Redis loses the sale and the rebuild
// restores e1 as its row held it (pending); ann then withdraws e1, enters
// e2 and withdraws e2 on the rebuilt sale (its journal not flushed yet);
// only then does the stalled flush write e1 entered and, the restore's
// mark changed, put its rows back into Redis (lua.DrawReapply). The row
// of e1 it reads back is entered (the database has not seen ann's changes
// since the rebuild), and it must not replace ann's newer entry e2,
// withdrawn: before the fix, ann's entry in Redis ended "entered e1"
// while both rows were withdrawn, and the read path then took e1's hold
// off its list as the close's (an entered entry's), which the close never
// releases (it lists the pending rows' holds only).
func TestReapplyAfterReentry(t *testing.T) {
	for _, be := range []struct {
		name string
		dsn  func(t *testing.T) string
	}{{"sqlite", cptest.SQLiteDSN}, {"postgres", func(t *testing.T) string { return pgtest.New(t) }}} {
		t.Run(be.name, func(t *testing.T) { reapplyAfterReentry(t, be.dsn(t)) })
	}
}

func reapplyAfterReentry(t *testing.T, dsn string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db, rdb := cptest.OpenDB(t, dsn), redistest.Start(t).Client(t)
	open := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	closeAt := open.Add(time.Hour)
	sale := flashgate.Sale{ID: "dr", Name: "Drop", Total: 3, PerUser: 2, PriceCents: 500, State: flashgate.StateOpen,
		Queue: flashgate.QueueDraw, EntriesOpenAt: &open, EntriesCloseAt: &closeAt}
	if err := db.CreateSale(ctx, sale); err != nil {
		t.Fatalf("CreateSale: %v", err)
	}
	tok, err := lua.TakeFence.Run(ctx, rdb, lua.FenceKeys(), time.Now().UnixMilli()).Int64()
	if err != nil {
		t.Fatalf("TakeFence: %v", err)
	}
	ctx = fencing.WithValue(ctx, tok)
	rebuild := func() {
		t.Helper()
		s := resync.New(rdb, db, nil, cptest.QuietLogger(), prometheus.NewCounter(prometheus.CounterOpts{Name: "resyncs"}))
		if _, _, err := s.Resync(ctx, sale.ID); err != nil {
			t.Errorf("Resync: %v", err)
		}
	}
	now := time.Now().UnixMilli()
	enter := func(id string) {
		t.Helper()
		if v, err := lua.DrawEnter.Run(ctx, rdb, lua.DrawEnterKeys(sale.ID, ""), "ann", id, "", 1, now, 0).Slice(); err != nil || v[0] != int64(lua.DrawOK) {
			t.Fatalf("DrawEnter %s: %v, %v", id, v, err)
		}
	}
	withdraw := func() {
		t.Helper()
		if v, err := lua.DrawWithdraw.Run(ctx, rdb, lua.DrawWithdrawKeys(sale.ID), "ann", now, now).Slice(); err != nil || v[0] != int64(lua.DrawOK) {
			t.Fatalf("DrawWithdraw: %v, %v", v, err)
		}
	}
	rebuild()
	enter("e1")
	if v, err := lua.DrawHold.Run(ctx, rdb, lua.DrawHoldKeys(sale.ID), "ann", "e1", "pi_e1", now).Slice(); err != nil || v[0] != int64(lua.DrawOK) {
		t.Fatalf("DrawHold: %v, %v", v, err)
	}
	if _, err := drawjournal.Flush(ctx, rdb, db, sale.ID, 0); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if v, err := lua.DrawSet.Run(ctx, rdb, lua.DrawChangeKeys(sale.ID), "ann", "e1", string(flashgate.DrawEntered), now, string(flashgate.DrawPending)).Slice(); err != nil || v[0] != int64(lua.DrawOK) {
		t.Fatalf("DrawSet: %v, %v", v, err)
	}
	// The stalled flush has read e1 entered; before its write Redis loses
	// the sale, the rebuild restores e1 pending, and ann withdraws e1,
	// enters e2 and withdraws it.
	gate := &writeGate{Store: db, hook: func() {
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			t.Fatalf("FLUSHALL: %v", err)
		}
		rebuild()
		withdraw()
		enter("e2")
		withdraw()
	}}
	if _, err := drawjournal.Flush(ctx, rdb, gate, sale.ID, 0); err != nil {
		t.Fatalf("the flush across the rebuild: %v", err)
	}
	// The leader's next flush writes ann's changes since the rebuild.
	if _, err := drawjournal.Flush(ctx, rdb, db, sale.ID, 0); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	rows, err := db.DrawEntries(ctx, sale.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.State != flashgate.DrawWithdrawn {
			t.Errorf("row %s: got %s, want withdrawn", r.ID, r.State)
		}
	}
	check(t, ctx, rdb, db, sale.ID, "withdrawn e2 1 ", "e1", [3]string{"0", "0", "1"})
}

// TestFlushAcrossTwoLosses: a flush reads ann's withdrawal of e1; Redis
// loses the sale; the rebuild marks its restore and reads the rows (e1
// entered), and Redis loses the sale again (the mark with it) before the
// rebuild's pages, or after them and before the rebuild records its
// restore's id (lua.Restored); then the flush writes the withdrawal. The rebuild must
// not finish over a Redis without its mark (nobody's flush can tell its
// restore read the rows before the write): before the fix, it finished,
// ann's e1 stayed entered in Redis (withdrawn in its row) and its hold off
// the read path's list, whether the flush had read a mark (its trim found
// none: DrawReapply, finding none either, did nothing) or had read none (a
// sale never rebuilt: the trim took the two as the same). The next pass
// must leave Redis as the rows are.
func TestFlushAcrossTwoLosses(t *testing.T) {
	for _, be := range []struct {
		name string
		dsn  func(t *testing.T) string
	}{{"sqlite", cptest.SQLiteDSN}, {"postgres", func(t *testing.T) string { return pgtest.New(t) }}} {
		for _, c := range []struct {
			name   string
			noMark bool // the sale hash had no draw_restore when the flush read it
			late   bool // the second loss comes after the pages
		}{{name: "mark read"}, {name: "no mark read", noMark: true},
			{name: "mark read, lost after the pages", late: true}, {name: "no mark read, lost after the pages", noMark: true, late: true}} {
			t.Run(be.name+"/"+c.name, func(t *testing.T) { flushAcrossTwoLosses(t, be.dsn(t), c.noMark, c.late) })
		}
	}
}

func flushAcrossTwoLosses(t *testing.T, dsn string, noMark, late bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db, rdb := cptest.OpenDB(t, dsn), redistest.Start(t).Client(t)
	open := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	closeAt := open.Add(time.Hour)
	sale := flashgate.Sale{ID: "dr", Name: "Drop", Total: 3, PerUser: 2, PriceCents: 500, State: flashgate.StateOpen,
		Queue: flashgate.QueueDraw, EntriesOpenAt: &open, EntriesCloseAt: &closeAt}
	if err := db.CreateSale(ctx, sale); err != nil {
		t.Fatalf("CreateSale: %v", err)
	}
	tok, err := lua.TakeFence.Run(ctx, rdb, lua.FenceKeys(), time.Now().UnixMilli()).Int64()
	if err != nil {
		t.Fatalf("TakeFence: %v", err)
	}
	ctx = fencing.WithValue(ctx, tok)
	rows := &rowsGate{DB: db}
	s := resync.New(rdb, rows, nil, cptest.QuietLogger(), prometheus.NewCounter(prometheus.CounterOpts{Name: "resyncs"}))
	lose := func() {
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			t.Errorf("FLUSHALL: %v", err)
		}
	}
	if _, _, err := s.Resync(ctx, sale.ID); err != nil {
		t.Fatalf("Resync: %v", err)
	}
	if noMark {
		if err := rdb.HDel(ctx, lua.SaleKey(sale.ID), lua.FieldDrawRestore).Err(); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now().UnixMilli()
	if v, err := lua.DrawEnter.Run(ctx, rdb, lua.DrawEnterKeys(sale.ID, ""), "ann", "e1", "", 1, now, 0).Slice(); err != nil || v[0] != int64(lua.DrawOK) {
		t.Fatalf("DrawEnter: %v, %v", v, err)
	}
	if v, err := lua.DrawHold.Run(ctx, rdb, lua.DrawHoldKeys(sale.ID), "ann", "e1", "pi_e1", now).Slice(); err != nil || v[0] != int64(lua.DrawOK) {
		t.Fatalf("DrawHold: %v, %v", v, err)
	}
	if v, err := lua.DrawSet.Run(ctx, rdb, lua.DrawChangeKeys(sale.ID), "ann", "e1", string(flashgate.DrawEntered), now, string(flashgate.DrawPending)).Slice(); err != nil || v[0] != int64(lua.DrawOK) {
		t.Fatalf("DrawSet: %v, %v", v, err)
	}
	if _, err := drawjournal.Flush(ctx, rdb, db, sale.ID, 0); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if v, err := lua.DrawWithdraw.Run(ctx, rdb, lua.DrawWithdrawKeys(sale.ID), "ann", now, now).Slice(); err != nil || v[0] != int64(lua.DrawOK) {
		t.Fatalf("DrawWithdraw: %v, %v", v, err)
	}
	restored := &loseBefore{sha: lua.Restored.Hash(), lose: lose}
	rdb.AddHook(restored)
	gate := &writeGate{Store: db, hook: func() {
		lose()
		if late {
			restored.armed.Store(true)
		} else {
			rows.hook = lose
		}
		// The rebuild may fail (Redis lost the sale under it): the next
		// pass rebuilds it.
		_, _, _ = s.Resync(ctx, sale.ID)
		rows.hook = nil
		if restored.armed.Load() {
			t.Errorf("the rebuild never recorded its restore's id")
		}
	}}
	if _, err := drawjournal.Flush(ctx, rdb, gate, sale.ID, 0); err != nil {
		t.Fatalf("the flush across the rebuild: %v", err)
	}
	// The leader's next pass.
	if _, _, err := s.Resync(ctx, sale.ID); err != nil {
		t.Fatalf("Resync: %v", err)
	}
	check(t, ctx, rdb, db, sale.ID, "withdrawn e1 1 ", "e1", [3]string{"0", "0", "1"})
}

// loseBefore is a Redis hook that, once armed, runs lose before the next
// call of the script whose SHA is sha (once).
type loseBefore struct {
	sha   string
	lose  func()
	armed atomic.Bool
}

func (*loseBefore) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *loseBefore) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if a := cmd.Args(); len(a) > 1 && a[0] == "evalsha" && a[1] == h.sha && h.armed.CompareAndSwap(true, false) {
			h.lose()
		}
		return next(ctx, cmd)
	}
}

func (*loseBefore) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
