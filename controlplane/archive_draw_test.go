package controlplane

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/archive"
	"github.com/flashgate/flashgate/lua"
)

// TestArchiveDrawWaitsForHolds: a closed draw sale is not over while its
// read path has holds to look at (a hold authorised after the close, a
// withdrawal's hold not released yet) or its journal has entry changes
// not written: archived, it leaves the leader's listing, whose read path
// and journal flush then never reach it, and the hold stays authorised on
// the buyer's card.
func TestArchiveDrawWaitsForHolds(t *testing.T) {
	e := newEnv(t, sqliteDSN(t), nil)
	open := e.clock.Now()
	closeAt, ends := open.Add(time.Hour), open.Add(2*time.Hour)
	if _, err := e.svc.CreateSale(e.ctx, flashgate.Sale{ID: "drop", Name: "Drop", PriceCents: 500, Total: 2, PerUser: 1,
		Queue: flashgate.QueueDraw, EntriesOpenAt: &open, EntriesCloseAt: &closeAt, EndsAt: &ends}); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.Stop(e.ctx, "drop"); err != nil {
		t.Fatal(err)
	}
	over := func() archive.State {
		t.Helper()
		row, err := e.db.Sale(e.ctx, "drop")
		if err != nil {
			t.Fatal(err)
		}
		st, err := e.svc.archive.Over(e.ctx, row)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	// Its close finished (TestArchiveDrawWaitsForItsClose).
	if _, err := e.db.PutDrawFile(e.ctx, "drop", []byte("a draw")); err != nil {
		t.Fatal(err)
	}
	if err := e.db.DrawDone(e.ctx, "drop"); err != nil {
		t.Fatal(err)
	}
	if got := over(); got != archive.Ready {
		t.Fatalf("a closed draw with nothing left: got %v, want Ready", got)
	}
	for _, c := range []struct {
		name  string
		add   func() error
		clear func() error
	}{
		{"a hold to look at", func() error {
			return e.rdb.ZAdd(e.ctx, lua.DrawCheckKey("drop"), redis.Z{Score: 1, Member: "e1"}).Err()
		}, func() error { return e.rdb.Del(e.ctx, lua.DrawCheckKey("drop")).Err() }},
		{"an entry change not journaled", func() error {
			return e.rdb.XAdd(e.ctx, &redis.XAddArgs{Stream: lua.DrawJournalKey("drop"), Values: []any{"e", "released e1 1  ann"}}).Err()
		}, func() error { return e.rdb.Del(e.ctx, lua.DrawJournalKey("drop")).Err() }},
	} {
		if err := c.add(); err != nil {
			t.Fatal(err)
		}
		if got := over(); got != archive.Wait {
			t.Errorf("%s: got %v, want Wait", c.name, got)
		}
		if err := c.clear(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestArchiveDrawWaitsForItsClose: an admin stops a draw sale while its
// entries are taken, or while its close settles it (captures done, holds
// being released at the provider: no order unpaid, no entry change left
// to journal). The sale is not over until its close finished: archived,
// it leaves the leader's listing, so a close that has not run never runs
// (every entered hold stays authorised on its buyer's card) and a close
// that fails is never run again (holds neither captured nor released,
// captured winners without their orders).
func TestArchiveDrawWaitsForItsClose(t *testing.T) {
	e := newEnv(t, sqliteDSN(t), nil)
	open := e.clock.Now()
	closeAt, ends := open.Add(time.Hour), open.Add(2*time.Hour)
	if _, err := e.svc.CreateSale(e.ctx, flashgate.Sale{ID: "drop", Name: "Drop", PriceCents: 500, Total: 2, PerUser: 1,
		Queue: flashgate.QueueDraw, EntriesOpenAt: &open, EntriesCloseAt: &closeAt, EndsAt: &ends}); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.Stop(e.ctx, "drop"); err != nil {
		t.Fatal(err)
	}
	over := func() archive.State {
		t.Helper()
		row, err := e.db.Sale(e.ctx, "drop")
		if err != nil {
			t.Fatal(err)
		}
		st, err := e.svc.archive.Over(e.ctx, row)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	for _, c := range []struct {
		name string
		step func() error
		want archive.State
	}{
		{"before its close", func() error { return nil }, archive.Wait},
		{"its close under way (the draw's file stored)", func() error {
			_, err := e.db.PutDrawFile(e.ctx, "drop", []byte("a draw"))
			return err
		}, archive.Wait},
		{"its close finished", func() error { return e.db.DrawDone(e.ctx, "drop") }, archive.Ready},
	} {
		if err := c.step(); err != nil {
			t.Fatal(err)
		}
		if got := over(); got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}
