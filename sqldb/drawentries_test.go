package sqldb

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/pgtest"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
)

// TestDrawSale: a draw sale's mode and entry window survive the row.
func TestDrawSale(t *testing.T) {
	each(t, func(t *testing.T, _ string, db *DB) {
		ctx := context.Background()
		open, closeAt := t0, t0.Add(48*time.Hour)
		s := flashgate.Sale{ID: "d", Name: "Draw", PriceCents: 100, Total: 5, Queue: flashgate.QueueDraw, EntriesOpenAt: &open, EntriesCloseAt: &closeAt}
		if err := db.CreateSale(ctx, s); err != nil {
			t.Fatal(err)
		}
		got, err := db.Sale(ctx, "d")
		if err != nil {
			t.Fatal(err)
		}
		if !got.Draw() || got.EntriesOpenAt == nil || !got.EntriesOpenAt.Equal(open) || got.EntriesCloseAt == nil || !got.EntriesCloseAt.Equal(closeAt) {
			t.Errorf("Sale(d): got queue %q, window %v..%v; want draw, %v..%v", got.Queue, got.EntriesOpenAt, got.EntriesCloseAt, open, closeAt)
		}
		if err := db.CreateSale(ctx, flashgate.Sale{ID: "f", Name: "First", Total: 1}); err != nil {
			t.Fatal(err)
		}
		if got, _ := db.Sale(ctx, "f"); got.EntriesOpenAt != nil || got.EntriesCloseAt != nil {
			t.Errorf("Sale(f): got a window %v..%v, want none", got.EntriesOpenAt, got.EntriesCloseAt)
		}
	})
}

// TestDrawEntries: entries are stored and moved by id, a step that names
// no intent or order keeps the row's, and a user holds one live entry.
func TestDrawEntries(t *testing.T) {
	each(t, func(t *testing.T, _ string, db *DB) {
		ctx := context.Background()
		e1 := flashgate.DrawEntry{ID: "e1", SaleID: "d", UserID: "ann", Variant: "S", Quantity: 2, State: flashgate.DrawPending, CreatedAt: t0}
		e2 := flashgate.DrawEntry{ID: "e2", SaleID: "d", UserID: "bob", Quantity: 1, State: flashgate.DrawPending, PaymentIntent: "pi_2", CreatedAt: t0}
		if err := db.PutDrawEntries(ctx, []flashgate.DrawEntry{e1, e2}); err != nil {
			t.Fatal(err)
		}
		e1.State, e1.PaymentIntent, e1.UpdatedAt = flashgate.DrawEntered, "pi_1", t0.Add(time.Second)
		e2.State, e2.PaymentIntent, e2.UpdatedAt = flashgate.DrawWithdrawn, "", t0.Add(time.Second)
		e3 := flashgate.DrawEntry{ID: "e3", SaleID: "d", UserID: "bob", Quantity: 1, State: flashgate.DrawPending, CreatedAt: t0.Add(2 * time.Second)}
		if err := db.PutDrawEntries(ctx, []flashgate.DrawEntry{e1, e2, e3}); err != nil {
			t.Fatal(err)
		}
		got, err := db.DrawEntries(ctx, "d")
		if err != nil {
			t.Fatal(err)
		}
		e2.PaymentIntent = "pi_2"
		e3.UpdatedAt = e3.CreatedAt
		if want := []flashgate.DrawEntry{e1, e2, e3}; !reflect.DeepEqual(got, want) {
			t.Errorf("DrawEntries: got %+v, want %+v", got, want)
		}
		if one, err := db.DrawEntry(ctx, "d", "e2"); err != nil || !reflect.DeepEqual(one, e2) {
			t.Errorf("DrawEntry e2: got %+v, %v; want %+v", one, err, e2)
		}
		for _, k := range [][2]string{{"d", "e9"}, {"other", "e1"}} {
			if _, err := db.DrawEntry(ctx, k[0], k[1]); !errors.Is(err, flashgate.ErrNotFound) {
				t.Errorf("DrawEntry %s of sale %s: got %v, want ErrNotFound", k[1], k[0], err)
			}
		}
		// A stale change (older than the row's) changes nothing.
		stale := e1
		stale.State, stale.UpdatedAt = flashgate.DrawPending, t0
		if err := db.PutDrawEntries(ctx, []flashgate.DrawEntry{stale}); err != nil {
			t.Fatal(err)
		}
		if got, _ := db.DrawEntries(ctx, "d"); len(got) == 0 || got[0].State != flashgate.DrawEntered {
			t.Errorf("after a stale change: got %+v, want e1 entered", got)
		}
		// Of two changes in one millisecond (of one rank: drawRank), the
		// later in sequence wins whichever is written last.
		later := e1
		later.State, later.UpdatedAt, later.Seq = flashgate.DrawWithdrawn, e1.UpdatedAt.Add(time.Second), 3
		earlier := later
		earlier.State, earlier.Seq = flashgate.DrawLost, 2
		for _, e := range []flashgate.DrawEntry{later, earlier} {
			if err := db.PutDrawEntries(ctx, []flashgate.DrawEntry{e}); err != nil {
				t.Fatal(err)
			}
		}
		if got, _ := db.DrawEntries(ctx, "d"); len(got) == 0 || got[0].State != flashgate.DrawWithdrawn || got[0].Seq != 3 {
			t.Errorf("after an earlier change of the same millisecond: got %+v, want e1 withdrawn, seq 3", got)
		}
		later.State, later.Seq = flashgate.DrawReleased, 4
		if err := db.PutDrawEntries(ctx, []flashgate.DrawEntry{later}); err != nil {
			t.Fatal(err)
		}
		if got, _ := db.DrawEntries(ctx, "d"); len(got) == 0 || got[0].State != flashgate.DrawReleased {
			t.Errorf("after a later change of the same millisecond: got %+v, want e1 released", got)
		}
		// A change back to a state the entry has left (a move goes
		// forward only) changes nothing, whatever its stamp says: the
		// journal's are Redis's clock, a close's own this process's.
		for _, st := range []flashgate.DrawEntryState{flashgate.DrawLost, flashgate.DrawEntered, flashgate.DrawPending} {
			back := later
			back.State, back.UpdatedAt = st, later.UpdatedAt.Add(time.Hour)
			if err := db.PutDrawEntries(ctx, []flashgate.DrawEntry{back}); err != nil {
				t.Fatal(err)
			}
			if got, _ := db.DrawEntries(ctx, "d"); len(got) == 0 || got[0].State != flashgate.DrawReleased {
				t.Errorf("after a later-stamped change back to %s: got %+v, want e1 released", st, got)
			}
		}
		// A new live entry of bob's (Redis lost his e3) supersedes his
		// live row: e3 becomes withdrawn, stamped as e4, and goes to
		// before; cat's e5 is stored all the same. A before that fails
		// stores nothing of its transaction.
		e4 := flashgate.DrawEntry{ID: "e4", SaleID: "d", UserID: "bob", Quantity: 1, State: flashgate.DrawPending, CreatedAt: t0.Add(3 * time.Second), Seq: 7}
		e5 := flashgate.DrawEntry{ID: "e5", SaleID: "d", UserID: "cat", Quantity: 1, State: flashgate.DrawPending, CreatedAt: t0}
		boom := errors.New("boom")
		if err := db.SupersedeDrawEntries(ctx, []flashgate.DrawEntry{e5, e4}, nil, func([]flashgate.DrawEntry) error { return boom }); !errors.Is(err, boom) {
			t.Errorf("a before that fails: got %v, want %v", err, boom)
		}
		if got, _ := db.DrawEntries(ctx, "d"); len(got) != 3 || got[2].State != flashgate.DrawPending {
			t.Errorf("after a failed before: got %+v, want e1, e2, e3 pending", got)
		}
		var told []flashgate.DrawEntry
		before := func(old []flashgate.DrawEntry) error { told = append(told, old...); return nil }
		if err := db.SupersedeDrawEntries(ctx, []flashgate.DrawEntry{e5, e4}, nil, before); err != nil {
			t.Fatalf("a second live entry: %v", err)
		}
		wantTold := []flashgate.DrawEntry{{ID: "e3", SaleID: "d", UserID: "bob", Quantity: 1, State: flashgate.DrawWithdrawn,
			CreatedAt: e3.CreatedAt, UpdatedAt: e4.CreatedAt, Seq: 7}}
		if !reflect.DeepEqual(told, wantTold) {
			t.Errorf("superseded: got %+v, want %+v", told, wantTold)
		}
		states := map[string]flashgate.DrawEntryState{}
		all, _ := db.DrawEntries(ctx, "d")
		for _, e := range all {
			states[e.ID] = e.State
		}
		if want := map[string]flashgate.DrawEntryState{"e1": flashgate.DrawReleased, "e2": flashgate.DrawWithdrawn,
			"e3": flashgate.DrawWithdrawn, "e4": flashgate.DrawPending, "e5": flashgate.DrawPending}; !reflect.DeepEqual(states, want) {
			t.Errorf("after a second live entry: got %v, want %v", states, want)
		}
		// The same batch again (a flush whose trim failed) supersedes
		// nothing: e4 is no new entry.
		told = nil
		if err := db.SupersedeDrawEntries(ctx, []flashgate.DrawEntry{e5, e4}, nil, before); err != nil || told != nil {
			t.Errorf("the batch again: got %v, superseded %+v; want nil, none", err, told)
		}
		if err := db.PutDrawEntries(ctx, []flashgate.DrawEntry{{ID: "e6", SaleID: "d", UserID: "x", Quantity: 1, State: "bogus"}}); !errors.Is(err, flashgate.ErrBadRequest) {
			t.Errorf("a bad state: got %v, want ErrBadRequest", err)
		}
	})
}

// TestRecordDrawHold: a hold is stored with its entry's row, whose intent
// is kept once set (and kept by the journal's later changes); an entry
// with no row yet is reported, and nothing is inserted.
func TestRecordDrawHold(t *testing.T) {
	each(t, func(t *testing.T, _ string, db *DB) {
		ctx := context.Background()
		hold := func(id, intent string) bool {
			t.Helper()
			ok, err := db.RecordDrawHold(ctx, "d", id, intent)
			if err != nil {
				t.Fatalf("RecordDrawHold %s: %v", id, err)
			}
			return ok
		}
		if hold("e1", "pi_1") {
			t.Errorf("RecordDrawHold e1, no row: got true, want false")
		}
		e1 := flashgate.DrawEntry{ID: "e1", SaleID: "d", UserID: "ann", Variant: "S", Quantity: 1, State: flashgate.DrawPending, CreatedAt: t0}
		if err := db.PutDrawEntries(ctx, []flashgate.DrawEntry{e1}); err != nil {
			t.Fatal(err)
		}
		if !hold("e1", "pi_1") || !hold("e1", "pi_other") {
			t.Errorf("RecordDrawHold e1: got false, want true")
		}
		e1.State, e1.UpdatedAt = flashgate.DrawEntered, t0.Add(time.Minute)
		if err := db.PutDrawEntries(ctx, []flashgate.DrawEntry{e1}); err != nil {
			t.Fatal(err)
		}
		rows, err := db.DrawEntries(ctx, "d")
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range rows {
			got = append(got, r.ID+"/"+string(r.State)+"/"+r.PaymentIntent)
		}
		if want := []string{"e1/entered/pi_1"}; !reflect.DeepEqual(got, want) {
			t.Errorf("rows: got %v, want %v", got, want)
		}
	})
}

// TestSupersedeDrawEntriesAtOnce: several processes flushing one draw's
// journal at once (each gateway's holds flush it, as the leader's tick
// does), each from where another's trim left it, write the same rows
// while new entries arrive and older ones are entered;
// none fails (on PostgreSQL two such flushes deadlocked on the table's
// unique indexes, 40P01, until lockDraws).
func TestSupersedeDrawEntriesAtOnce(t *testing.T) {
	each(t, func(t *testing.T, _ string, db *DB) {
		ctx := context.Background()
		const flushers, rounds = 4, 40
		var mu sync.Mutex
		var journal []flashgate.DrawEntry
		var wg sync.WaitGroup
		errs := make(chan error, flushers*rounds)
		for f := range flushers {
			wg.Go(func() {
				for r := range rounds {
					mu.Lock()
					n := len(journal)
					journal = append(journal, flashgate.DrawEntry{ID: fmt.Sprintf("e%d-%d", f, r), SaleID: "d", UserID: fmt.Sprintf("u%d-%d", f, r),
						Variant: "S", Quantity: 1, State: flashgate.DrawPending, CreatedAt: t0.Add(time.Duration(n) * time.Millisecond), Seq: int64(n)})
					if n >= 6 {
						// An entry made a few records back is entered now.
						e := journal[n-6]
						e.State, e.PaymentIntent, e.UpdatedAt, e.Seq = flashgate.DrawEntered, "pi_"+e.ID, e.CreatedAt.Add(time.Second), int64(n)
						journal = append(journal, e)
					}
					// Each flush reads the journal after another's trim.
					batch := slices.Clone(journal[rand.IntN(len(journal)):])
					mu.Unlock()
					if err := db.SupersedeDrawEntries(ctx, batch, nil, nil); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("a flush among %d at once: %v", flushers, err)
		}
		if err := db.SupersedeDrawEntries(ctx, journal, nil, nil); err != nil {
			t.Fatal(err)
		}
		got, err := db.DrawEntries(ctx, "d")
		if err != nil {
			t.Fatal(err)
		}
		if want := flushers * rounds; len(got) != want {
			t.Errorf("got %d rows, want %d", len(got), want)
		}
	})
}

// TestSupersedeDrawEntriesFrozenHolder: a process frozen inside a flush's
// transaction (SIGSTOP, a stalled VM; here its before waits), holding the
// draw's lock (lockDraws), holds another process's flush of the draw off
// only until the server ends its idle transaction, as the leader fence's
// (raiseFence): every flush of the draw, each gateway's holds' and the
// close's, waited until it resumed. The frozen one then fails, writing
// nothing.
func TestSupersedeDrawEntriesFrozenHolder(t *testing.T) {
	dsn := pgtest.New(t)
	frozen, other := open(t, dsn), open(t, dsn)
	ctx := context.Background()
	live := func(id, user string, seq int64) flashgate.DrawEntry {
		return flashgate.DrawEntry{ID: id, SaleID: "d", UserID: user, Variant: "S", Quantity: 1, State: flashgate.DrawPending,
			CreatedAt: t0.Add(time.Duration(seq) * time.Millisecond), Seq: seq}
	}
	if err := frozen.PutDrawEntries(ctx, []flashgate.DrawEntry{live("e1", "ann", 1)}); err != nil {
		t.Fatal(err)
	}
	held, resume := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		// ann's new entry supersedes e1: before runs, and freezes.
		first <- frozen.SupersedeDrawEntries(ctx, []flashgate.DrawEntry{live("e2", "ann", 2)}, nil, func([]flashgate.DrawEntry) error {
			close(held)
			<-resume
			return nil
		})
	}()
	<-held
	second := make(chan error, 1)
	go func() { second <- other.PutDrawEntries(ctx, []flashgate.DrawEntry{live("e3", "bob", 3)}) }()
	var err error
	_, ok := testwait.For(30*time.Second, func() bool {
		select {
		case err = <-second:
			return true
		default:
			return false
		}
	})
	close(resume)
	switch {
	case !ok:
		t.Errorf("a flush beside one frozen in its transaction: written only once it resumed (%v), want while it is frozen", <-second)
	case err != nil:
		t.Errorf("a flush beside one frozen in its transaction: %v", err)
	}
	if err := <-first; err == nil {
		t.Errorf("the frozen flush, resumed after its transaction was ended: got no error, want one")
	}
	got, err := other.DrawEntries(ctx, "d")
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]flashgate.DrawEntryState{}
	for _, e := range got {
		states[e.ID] = e.State
	}
	if want := map[string]flashgate.DrawEntryState{"e1": flashgate.DrawPending, "e3": flashgate.DrawPending}; !reflect.DeepEqual(states, want) {
		t.Errorf("rows: got %v, want %v", states, want)
	}
}

// TestDrawClosing: once a draw's close recorded its read of the rows
// (DrawClosing, again and again), a write with a move to entered of that
// draw goes through closing first, which picks what is stored; before the
// record, without such a move, or of another draw, closing is not called.
func TestDrawClosing(t *testing.T) {
	each(t, func(t *testing.T, _ string, db *DB) {
		ctx := context.Background()
		entry := func(id, sale, user string, st flashgate.DrawEntryState, ms int) flashgate.DrawEntry {
			return flashgate.DrawEntry{ID: id, SaleID: sale, UserID: user, Quantity: 1, State: st, PaymentIntent: "pi_" + id,
				CreatedAt: t0.Add(time.Duration(ms) * time.Millisecond)}
		}
		if err := db.PutDrawEntries(ctx, []flashgate.DrawEntry{entry("e1", "d", "ann", flashgate.DrawPending, 1),
			entry("e2", "d", "bob", flashgate.DrawPending, 1), entry("e3", "d", "cid", flashgate.DrawPending, 1),
			entry("f1", "f", "ann", flashgate.DrawPending, 1)}); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name    string
			closing []string // DrawClosing of these sales first
			write   flashgate.DrawEntry
			called  bool
			want    flashgate.DrawEntryState // the row's state after
		}{
			{"before the close", nil, entry("e1", "d", "ann", flashgate.DrawEntered, 2), false, flashgate.DrawEntered},
			{"after the close's record", []string{"d"}, entry("e2", "d", "bob", flashgate.DrawEntered, 2), true, flashgate.DrawPending},
			{"recorded again", []string{"d"}, entry("e2", "d", "bob", flashgate.DrawEntered, 3), true, flashgate.DrawPending},
			{"no move to entered", nil, entry("e3", "d", "cid", flashgate.DrawWithdrawn, 2), false, flashgate.DrawWithdrawn},
			{"another draw", nil, entry("f1", "f", "ann", flashgate.DrawEntered, 2), false, flashgate.DrawEntered},
		} {
			for _, s := range tc.closing {
				if err := db.DrawClosing(ctx, s); err != nil {
					t.Fatalf("%s: DrawClosing(%s): %v", tc.name, s, err)
				}
			}
			called := false
			// closing stores nothing: the move to entered is left out.
			err := db.SupersedeDrawEntries(ctx, []flashgate.DrawEntry{tc.write}, func(es []flashgate.DrawEntry) ([]flashgate.DrawEntry, error) {
				called = true
				if len(es) != 1 || es[0].ID != tc.write.ID {
					t.Errorf("%s: closing got %+v, want %s", tc.name, es, tc.write.ID)
				}
				return nil, nil
			}, nil)
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			r, err := db.DrawEntry(ctx, tc.write.SaleID, tc.write.ID)
			if err != nil {
				t.Fatal(err)
			}
			if called != tc.called || r.State != tc.want {
				t.Errorf("%s: got closing called %v, row %s; want %v, %s", tc.name, called, r.State, tc.called, tc.want)
			}
		}
	})
}

// TestSupersedeOlderEntry: a buyer's new live entry supersedes the buyer's
// live row of another id made before it; one made before the row (its
// first change written late, after the buyer entered again on a rebuilt
// Redis) is stored withdrawn instead, reported as superseded, and the row
// stands.
func TestSupersedeOlderEntry(t *testing.T) {
	for _, c := range []struct {
		name     string
		at       time.Duration // the new entry's stamp after the row's
		wantOld  flashgate.DrawEntryState
		wantNew  flashgate.DrawEntryState
		wantGone string // the entry reported superseded
	}{
		{"later", time.Second, flashgate.DrawWithdrawn, flashgate.DrawPending, "e1"},
		{"same stamp", 0, flashgate.DrawWithdrawn, flashgate.DrawPending, "e1"},
		{"earlier", -time.Second, flashgate.DrawEntered, flashgate.DrawWithdrawn, "e2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			each(t, func(t *testing.T, _ string, db *DB) {
				ctx := context.Background()
				row := flashgate.DrawEntry{ID: "e1", SaleID: "d", UserID: "ann", Quantity: 1, State: flashgate.DrawEntered, PaymentIntent: "pi_1", CreatedAt: t0}
				if err := db.PutDrawEntries(ctx, []flashgate.DrawEntry{row}); err != nil {
					t.Fatal(err)
				}
				e2 := flashgate.DrawEntry{ID: "e2", SaleID: "d", UserID: "ann", Quantity: 1, State: flashgate.DrawPending, PaymentIntent: "pi_2", CreatedAt: t0.Add(c.at)}
				var gone []string
				if err := db.SupersedeDrawEntries(ctx, []flashgate.DrawEntry{e2}, nil, func(old []flashgate.DrawEntry) error {
					for _, o := range old {
						gone = append(gone, o.ID+" "+o.PaymentIntent)
					}
					return nil
				}); err != nil {
					t.Fatal(err)
				}
				for _, w := range []struct {
					id   string
					want flashgate.DrawEntryState
				}{{"e1", c.wantOld}, {"e2", c.wantNew}} {
					if r, err := db.DrawEntry(ctx, "d", w.id); err != nil || r.State != w.want {
						t.Errorf("%s: got %s, %v; want %s", w.id, r.State, err, w.want)
					}
				}
				want := c.wantGone + " pi_" + c.wantGone[1:]
				if !slices.Equal(gone, []string{want}) {
					t.Errorf("superseded: got %v, want [%s]", gone, want)
				}
			})
		})
	}
}
