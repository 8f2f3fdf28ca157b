package resync

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/internal/cptest"
	"github.com/flashgate/flashgate/controlplane/internal/fencing"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/lua"
)

// TestRebuildRestoresDrawEntries: Redis loses a draw sale during its entry
// window (a FLUSHALL) and the re-sync rebuilds it. The draw's entries come
// back from draw_entries, more than one page of them: ann, entered in the
// database, is answered her entry when she enters again, not entered a
// second time (draw_entries_live would refuse that row); bob's live entry
// after a withdrawn one stands; cat, withdrawn, may enter anew. The holds
// come back to their records, those of pending and withdrawn entries onto
// the read path's list; the sale's counts are the rows'. A second restore
// changes nothing.
func TestRebuildRestoresDrawEntries(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) { testRebuildRestoresDrawEntries(t, be.dsn(t)) })
	}
}

func testRebuildRestoresDrawEntries(t *testing.T, dsn string) {
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
	at := open.Add(time.Second)
	row := func(id, user string, st flashgate.DrawEntryState, intent string) flashgate.DrawEntry {
		return flashgate.DrawEntry{ID: id, SaleID: sale.ID, UserID: user, Quantity: 1, State: st, PaymentIntent: intent,
			CreatedAt: at, UpdatedAt: at}
	}
	rows := []flashgate.DrawEntry{
		row("e1", "ann", flashgate.DrawEntered, "pi_e1"),
		row("e2", "bob", flashgate.DrawWithdrawn, "pi_e2"),
		row("e3", "bob", flashgate.DrawPending, "pi_e3"),
		row("e4", "cat", flashgate.DrawWithdrawn, ""),
	}
	// More than a page (salehash.ReleaseChunk) of pending entries without
	// a hold.
	const many = 2100
	for i := range many {
		rows = append(rows, row(fmt.Sprintf("f%05d", i), fmt.Sprintf("u%05d", i), flashgate.DrawPending, ""))
	}
	if err := db.PutDrawEntries(ctx, rows); err != nil {
		t.Fatalf("PutDrawEntries: %v", err)
	}
	tok, err := lua.TakeFence.Run(ctx, rdb, lua.FenceKeys(), time.Now().UnixMilli()).Int64()
	if err != nil {
		t.Fatalf("TakeFence: %v", err)
	}
	ctx = fencing.WithValue(ctx, tok)
	s := New(rdb, db, nil, cptest.QuietLogger(), prometheus.NewCounter(prometheus.CounterOpts{Name: "resyncs"}))
	if _, _, err := s.Resync(ctx, sale.ID); err != nil {
		t.Fatalf("Resync: %v", err)
	}
	before, err := rdb.HGetAll(ctx, lua.SaleKey(sale.ID)).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ field, want string }{
		{lua.FieldDrawEntries, fmt.Sprint(many + 4)},
		{lua.DrawStateField(flashgate.DrawEntered), "1"},
		{lua.DrawStateField(flashgate.DrawPending), fmt.Sprint(many + 1)},
		{lua.DrawStateField(flashgate.DrawWithdrawn), "1"},
	} {
		if before[c.field] != c.want {
			t.Errorf("sale hash %s: got %q, want %q", c.field, before[c.field], c.want)
		}
	}
	for _, c := range []struct{ id, want string }{{"e1", "pi_e1 ann"}, {"e2", "pi_e2 bob"}, {"e3", "pi_e3 bob"}} {
		if got, err := rdb.HGet(ctx, lua.DrawHoldKey(sale.ID), c.id).Result(); err != nil || got != c.want {
			t.Errorf("hold of %s: got %q, %v; want %q", c.id, got, err, c.want)
		}
	}
	listed, err := rdb.ZRange(ctx, lua.DrawCheckKey(sale.ID), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(listed) != "[e2 e3]" {
		t.Errorf("the read path's list: got %v, want [e2 e3] (the pending and withdrawn entries' holds)", listed)
	}
	now := at.Add(time.Second).UnixMilli()
	for _, c := range []struct {
		user, id string
		want     string
		isNew    int64
	}{
		{"ann", "n1", "entered e1 1 ", 0},
		{"bob", "n2", "pending e3 1 ", 0},
		{"cat", "n3", "pending n3 1 ", 1},
		{"u02099", "n4", "pending f02099 1 ", 0},
	} {
		v, err := lua.DrawEnter.Run(ctx, rdb, lua.DrawEnterKeys(sale.ID, ""), c.user, c.id, "", 1, now, 0).Slice()
		if err != nil || len(v) != 3 {
			t.Fatalf("DrawEnter %s: %v, %v", c.user, v, err)
		}
		if v[0] != int64(lua.DrawOK) || v[1] != c.want || v[2] != c.isNew {
			t.Errorf("DrawEnter %s: got %v, want [0 %s %d]", c.user, v, c.want, c.isNew)
		}
	}
	entered, err := rdb.HGetAll(ctx, lua.SaleKey(sale.ID)).Result()
	if err != nil {
		t.Fatal(err)
	}
	// A second restore (one run again after it was cut short) changes
	// nothing but the mark of the restore begun (a fresh id: a journal's
	// flush under way compares it).
	if err := s.RestoreDraw(ctx, sale); err != nil {
		t.Fatalf("RestoreDraw again: %v", err)
	}
	again, err := rdb.HGetAll(ctx, lua.SaleKey(sale.ID)).Result()
	if err != nil {
		t.Fatal(err)
	}
	if again[lua.FieldDrawRestore] == "" || again[lua.FieldDrawRestore] == entered[lua.FieldDrawRestore] {
		t.Errorf("the restore's mark: got %q after the second restore, %q before; want a new one", again[lua.FieldDrawRestore], entered[lua.FieldDrawRestore])
	}
	delete(again, lua.FieldDrawRestore)
	delete(entered, lua.FieldDrawRestore)
	if fmt.Sprint(again) != fmt.Sprint(entered) {
		t.Errorf("sale hash after a second restore: got %v; want %v", again, entered)
	}
	if v, err := rdb.HGet(ctx, lua.DrawKey(sale.ID), "cat").Result(); err != nil || v != "pending n3 1 " {
		t.Errorf("cat's entry after a second restore: got %q, %v; want %q", v, err, "pending n3 1 ")
	}
}
