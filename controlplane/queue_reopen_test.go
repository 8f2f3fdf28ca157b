package controlplane

import (
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/flashgate/flashgate/lua"
)

// TestQueueReopenArchived: a fair sale closed while admitted buyers' windows
// were open, an entry made just before the close, is archived (its queue's
// keys go, its hash keeps the counters) once the leader has journaled that
// entry, and reopened: the leader gives the queue back from its journal,
// every entrant with the entry it had, ranks it again (every entrant at
// the rank it had), ends the windows that passed and admits the next
// positions. On SQLite and PostgreSQL.
func TestQueueReopenArchived(t *testing.T) {
	for _, c := range []struct {
		name string
		dsn  func(*testing.T) string
	}{{"sqlite", sqliteDSN}, {"postgres", postgresDSN}} {
		t.Run(c.name, func(t *testing.T) { testQueueReopenArchived(t, c.dsn(t)) })
	}
}

func testQueueReopenArchived(t *testing.T, dsn string) {
	e := newEnv(t, dsn, nil)
	const id = "fz"
	sale, fence := fairEnv(t, e, id, 2, 6, nil) // admit_seconds 30
	step := func(what string) {
		t.Helper()
		if err := e.svc.QueueStep(e.ctx, sale, fence); err != nil {
			t.Fatalf("%s: QueueStep: %v", what, err)
		}
	}
	figs := func() []any {
		return e.rdb.HMGet(e.ctx, lua.SaleKey(id), lua.FieldQueuePrequeued, lua.FieldQueueLate, lua.FieldQueueAdmitted, lua.FieldQueueExpired).Val()
	}
	e.clock.Set(*sale.StartsAt)
	if err := e.svc.Start(e.ctx, id); err != nil {
		t.Fatal(err)
	}
	step("the start")
	for i := range 2 {
		if err := lua.QueueEnter.Run(e.ctx, e.rdb, lua.QueueEnterKeys(id, "none"), fmt.Sprintf("late%d", i), 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	e.clock.Add(time.Second)
	step("the late entries")
	want := e.rdb.HGetAll(e.ctx, lua.QueueKey(id)).Val()
	if got := figs(); fmt.Sprint(got) != "[6 2 2 0]" {
		t.Fatalf("before the close: got queue_prequeued, queue_late, queue_admitted, queue_expired %v, want [6 2 2 0]", got)
	}

	// One more entrant just before the close: no step journals it before
	// the sale closes.
	if err := lua.QueueEnter.Run(e.ctx, e.rdb, lua.QueueEnterKeys(id, "none"), "late2", 0).Err(); err != nil {
		t.Fatal(err)
	}
	want = e.rdb.HGetAll(e.ctx, lua.QueueKey(id)).Val()
	if err := e.svc.Stop(e.ctx, id); err != nil {
		t.Fatal(err)
	}
	for range 3 { // the leader's ticks: a queue step (journal), the re-sync pass (archive)
		live, err := e.db.LiveSales(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		e.svc.queues.Tick(e.ctx, live, fence)
		e.svc.resyncAll(e.ctx)
	}
	if s, err := e.db.Sale(e.ctx, id); err != nil || !s.Archived {
		t.Fatalf("the sale is not archived: %v %v", s.Archived, err)
	}
	if n := e.rdb.Exists(e.ctx, lua.QueueKey(id), lua.QueueWindowsKey(id)).Val(); n != 0 {
		t.Fatalf("%d queue keys left after the archive, want 0", n)
	}

	e.clock.Add(time.Minute) // the windows opened before the close end
	if err := e.svc.Start(e.ctx, id); err != nil {
		t.Fatal(err)
	}
	step("the first step after the reopening")
	if got := e.rdb.HGetAll(e.ctx, lua.QueueKey(id)).Val(); !maps.Equal(got, want) {
		t.Errorf("the reopened queue: got entrants %v, want %v", got, want)
	}
	if got := figs(); fmt.Sprint(got) != "[6 3 4 2]" {
		t.Errorf("the reopened queue: got queue_prequeued, queue_late, queue_admitted, queue_expired %v, want [6 3 4 2]", got)
	}
	e.clock.Add(time.Minute)
	step("a minute later")
	if got := figs(); fmt.Sprint(got) != "[6 3 6 4]" {
		t.Errorf("a minute after the reopening: got queue_prequeued, queue_late, queue_admitted, queue_expired %v, want [6 3 6 4]", got)
	}
}
