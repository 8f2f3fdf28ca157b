package drawjournal_test

import (
	"context"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/drawclose"
	"github.com/flashgate/flashgate/controlplane/drawjournal"
	"github.com/flashgate/flashgate/controlplane/internal/cptest"
	"github.com/flashgate/flashgate/internal/testenv/testclock"
	"github.com/flashgate/flashgate/lua"
)

// TestCloseMovesDuringRestore: Redis loses a draw sale whose two entrants
// are entered; the rebuild's restore reads the rows (both entered) and,
// before it puts them back, the close runs: Redis has no entries, so its
// moves (ann and bob to won and lost) go to the rows. The restore then
// put both back entered, and nothing moved them again: the buyers' entries
// read entered for good while their rows said won and lost (the
// interleaving explorer's draw seed 20262575, where the row said
// released). The close now puts each such move into the restored sale.
func TestCloseMovesDuringRestore(t *testing.T) {
	for _, be := range drawBackends {
		t.Run(be.name, func(t *testing.T) { closeMovesDuringRestore(t, be.dsn(t)) })
	}
}

func closeMovesDuringRestore(t *testing.T, dsn string) {
	fx := newDrawFixture(t, dsn, 1)
	ctx, db, rdb, sale, closeAt := fx.ctx, fx.db, fx.rdb, fx.sale, fx.closeAt
	gate := &rowsGate{DB: db}
	rebuild := func() { t.Helper(); fx.rebuild(t, gate) }
	flush := func(ctx context.Context, sale string) (int, error) { return drawjournal.Flush(ctx, rdb, db, sale, 0) }
	rebuild() // the sale's hash, from the database
	now := time.Now().UnixMilli()
	for _, u := range []struct{ user, id string }{{"ann", "e1"}, {"bob", "e2"}} {
		if v, err := lua.DrawEnter.Run(ctx, rdb, lua.DrawEnterKeys(sale.ID, ""), u.user, u.id, "", 1, now, 0).Slice(); err != nil || v[0] != int64(lua.DrawOK) {
			t.Fatalf("DrawEnter %s: %v, %v", u.user, v, err)
		}
		if v, err := lua.DrawSet.Run(ctx, rdb, lua.DrawChangeKeys(sale.ID), u.user, u.id, string(flashgate.DrawEntered), now,
			string(flashgate.DrawPending)).Slice(); err != nil || v[0] != int64(lua.DrawOK) {
			t.Fatalf("DrawSet %s entered: %v, %v", u.user, v, err)
		}
	}
	if _, err := flush(ctx, sale.ID); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	var won []string
	closer := drawclose.New(drawclose.Config{Redis: rdb, Store: db, Reserver: winReserver{&won}, Capturer: drawclose.Instant{},
		SeedSecret: []byte("k"), Clock: testclock.New(closeAt.Add(time.Second)), Logger: cptest.QuietLogger(), Flush: flush})
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	gate.hook = func() {
		gate.hook = nil
		// The close runs while the restore holds the rows it read; it is
		// cut short at its winner's order (this reserve path cannot make
		// one), after the moves.
		if done, err := closer.Close(ctx, sale); done || err == nil || len(won) != 1 {
			t.Errorf("Close: %v, %v, winners %v; want cut short at its one winner's order", done, err, won)
		}
	}
	rebuild()
	for _, u := range []struct{ user, id string }{{"ann", "e1"}, {"bob", "e2"}} {
		r, err := db.DrawEntry(ctx, sale.ID, u.id)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := rdb.HGet(ctx, lua.DrawKey(sale.ID), u.user).Result()
		st, id, _, _, _ := lua.ParseDrawEntry(got)
		if id != u.id || st != r.State || r.State == flashgate.DrawEntered {
			t.Errorf("%s: got %q in Redis, row %s; want the row's state, won or lost, in both", u.user, got, r.State)
		}
	}
}
