package drawjournal_test

import (
	"bytes"
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/drawclose"
	"github.com/flashgate/flashgate/controlplane/drawhold"
	"github.com/flashgate/flashgate/controlplane/drawjournal"
	"github.com/flashgate/flashgate/controlplane/internal/cptest"
	"github.com/flashgate/flashgate/draw"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/internal/testenv/testclock"
	"github.com/flashgate/flashgate/lua"
)

// noReserver is the close's reserve path where no entry may win.
type noReserver struct{ t *testing.T }

func (r noReserver) ReserveWinner(context.Context, string, string, string, string, int64) (string, error) {
	r.t.Errorf("ReserveWinner called: want no winner")
	return "", flashgate.ErrUnavailable
}

// heldProvider is a provider whose every hold is authorised; it records
// the holds released.
type heldProvider struct {
	mu       sync.Mutex
	released []string
}

func (p *heldProvider) Hold(context.Context, flashgate.Hold) (flashgate.Intent, error) {
	return flashgate.Intent{}, flashgate.ErrUnavailable
}

func (p *heldProvider) Intent(_ context.Context, id string) (flashgate.Intent, error) {
	return flashgate.Intent{ID: id, Status: flashgate.IntentRequiresCapture}, nil
}

func (p *heldProvider) Cancel(_ context.Context, id string) (flashgate.Intent, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.released = append(p.released, id)
	return flashgate.Intent{ID: id, Status: flashgate.IntentCanceled}, nil
}

// TestFlushAcrossClose: a flush of a draw's journal (another process's,
// or one begun before the close's) reads ann's e1 entered (her hold
// authorised before the close); Redis then loses the sale, and the draw's
// close runs (while the sale is lost, or once it is rebuilt from the rows,
// e1 pending there): its final flush finds the journal empty, it draws the
// rows without e1, lists e1's pending hold for release and finishes. Only
// then does the first flush's write reach the database. Before the fix it
// wrote e1 entered (and put it into Redis so when the restore had begun
// since its read): an entered entry's hold is the close's, and the close
// was done, so e1 stood entered out of the draw and her hold stayed on her
// card (the interleaving explorer's draw seed 20263039). The write must
// leave e1 pending, and the read path release her hold.
func TestFlushAcrossClose(t *testing.T) {
	for _, be := range drawBackends {
		for _, c := range []struct {
			name string
			// rebuilt: the sale is rebuilt before the close (the write
			// then finds the restore's mark changed); else after the
			// write.
			rebuilt bool
		}{{"close while the sale is lost", false}, {"close after the rebuild", true}} {
			t.Run(be.name+"/"+c.name, func(t *testing.T) { flushAcrossClose(t, be.dsn(t), c.rebuilt) })
		}
	}
}

func flushAcrossClose(t *testing.T, dsn string, rebuilt bool) {
	fx := newDrawFixture(t, dsn, 1)
	ctx, db, rdb, sale, closeAt := fx.ctx, fx.db, fx.rdb, fx.sale, fx.closeAt
	rebuild := func() { t.Helper(); fx.rebuild(t, db) }
	after := testclock.New(closeAt.Add(time.Second))
	closer := drawclose.New(drawclose.Config{Redis: rdb, Store: db, Reserver: noReserver{t}, Capturer: drawclose.Instant{},
		SeedSecret: []byte("k"), Clock: after, Logger: cptest.QuietLogger(),
		Flush: func(ctx context.Context, sale string) (int, error) { return drawjournal.Flush(ctx, rdb, db, sale, 0) }})
	now := time.Now().UnixMilli()
	rebuild() // the sale's hash, from the database
	if v, err := lua.DrawEnter.Run(ctx, rdb, lua.DrawEnterKeys(sale.ID, ""), "ann", "e1", "", 1, now, 0).Slice(); err != nil || v[0] != int64(lua.DrawOK) {
		t.Fatalf("DrawEnter: %v, %v", v, err)
	}
	if v, err := lua.DrawHold.Run(ctx, rdb, lua.DrawHoldKeys(sale.ID), "ann", "e1", "pi_e1", now).Slice(); err != nil || v[0] != int64(lua.DrawOK) {
		t.Fatalf("DrawHold: %v, %v", v, err)
	}
	if _, err := drawjournal.Flush(ctx, rdb, db, sale.ID, 0); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	// Her hold authorised in time: e1 entered, in the journal only.
	if v, err := lua.DrawSet.Run(ctx, rdb, lua.DrawChangeKeys(sale.ID), "ann", "e1", string(flashgate.DrawEntered), now, string(flashgate.DrawPending)).Slice(); err != nil || v[0] != int64(lua.DrawOK) {
		t.Fatalf("DrawSet: %v, %v", v, err)
	}
	gate := &writeGate{Store: db, hook: func() {
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			t.Fatalf("FLUSHALL: %v", err)
		}
		if rebuilt {
			rebuild()
		}
		if done, err := closer.Close(ctx, sale); err != nil || !done {
			t.Fatalf("Close: %v, %v; want done", done, err)
		}
	}}
	if _, err := drawjournal.Flush(ctx, rdb, gate, sale.ID, 0); err != nil {
		t.Fatalf("the flush across the close: %v", err)
	}
	if !rebuilt {
		rebuild()
	}

	body, done, err := db.DrawFile(ctx, sale.ID)
	if err != nil || !done {
		t.Fatalf("DrawFile: done %v, %v; want the close finished", done, err)
	}
	f, err := draw.Read(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	drawn := make([]string, 0, len(f.Entries))
	for _, e := range f.Entries {
		drawn = append(drawn, e.ID)
	}
	r, err := db.DrawEntry(ctx, sale.ID, "e1")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := rdb.HGet(ctx, lua.DrawKey(sale.ID), "ann").Result(); err != nil || got != "pending e1 1 " || r.State != flashgate.DrawPending || len(drawn) != 0 {
		t.Errorf("e1: got row %s, in Redis %q (%v), drawn %v; want pending in both, out of the draw", r.State, got, err, drawn)
	}
	// The read path (the leader's, after the close) releases her hold.
	p := &heldProvider{}
	h := drawhold.New(drawhold.Config{Redis: rdb, Store: db, Provider: p, Clock: after, Logger: cptest.QuietLogger(), Rate: 1000})
	if _, err := h.Reconcile(ctx, []flashgate.Sale{sale}); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	if !slices.Contains(p.released, "pi_e1") {
		t.Errorf("holds released: got %v, want pi_e1 (ann's hold, out of the draw)", p.released)
	}
}

// TestFlushAfterCloseRecord: after the draw's close recorded its read of
// the rows (a close run again after one cut short, say), a flush writes
// the moves to entered still in the journal (the close's final flush
// writes them so) and leaves out only those Redis lost since its read.
func TestFlushAfterCloseRecord(t *testing.T) {
	for _, be := range drawBackends {
		t.Run(be.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			db, rdb := cptest.OpenDB(t, be.dsn(t)), redistest.Start(t).Client(t)
			open := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
			closeAt := open.Add(time.Hour)
			sale := flashgate.Sale{ID: "dr", Name: "Drop", Total: 2, PerUser: 1, PriceCents: 500, State: flashgate.StateOpen,
				Queue: flashgate.QueueDraw, EntriesOpenAt: &open, EntriesCloseAt: &closeAt}
			if err := db.CreateSale(ctx, sale); err != nil {
				t.Fatalf("CreateSale: %v", err)
			}
			if err := lua.Prepare.Run(ctx, rdb, lua.SaleKeys(sale.ID), 2, 1, 1, 500, "", lua.DrawQueueArg(sale), "").Err(); err != nil {
				t.Fatal(err)
			}
			now := time.Now().UnixMilli()
			for _, u := range []string{"ann", "bob"} {
				id := "e-" + u
				if v, err := lua.DrawEnter.Run(ctx, rdb, lua.DrawEnterKeys(sale.ID, ""), u, id, "", 1, now, 0).Slice(); err != nil || v[0] != int64(lua.DrawOK) {
					t.Fatalf("DrawEnter %s: %v, %v", id, v, err)
				}
			}
			if _, err := drawjournal.Flush(ctx, rdb, db, sale.ID, 0); err != nil {
				t.Fatalf("Flush: %v", err)
			}
			for _, u := range []string{"ann", "bob"} {
				if v, err := lua.DrawSet.Run(ctx, rdb, lua.DrawChangeKeys(sale.ID), u, "e-"+u, string(flashgate.DrawEntered), now, string(flashgate.DrawPending)).Slice(); err != nil || v[0] != int64(lua.DrawOK) {
					t.Fatalf("DrawSet %s: %v, %v", u, v, err)
				}
			}
			// The flush has read both moves; bob's is then lost from the
			// journal (as Redis losing it would), and the close records.
			gate := &writeGate{Store: db, hook: func() {
				msgs, err := rdb.XRange(ctx, lua.DrawJournalKey(sale.ID), "-", "+").Result()
				if err != nil || len(msgs) != 2 {
					t.Fatalf("the journal: %v, %v; want two moves", msgs, err)
				}
				if err := rdb.XDel(ctx, lua.DrawJournalKey(sale.ID), msgs[1].ID).Err(); err != nil {
					t.Fatal(err)
				}
				if err := db.DrawClosing(ctx, sale.ID); err != nil {
					t.Fatalf("DrawClosing: %v", err)
				}
			}}
			if n, err := drawjournal.Flush(ctx, rdb, gate, sale.ID, 0); err != nil || n != 2 {
				t.Fatalf("Flush: %d, %v; want 2 read", n, err)
			}
			for _, c := range []struct {
				id   string
				want flashgate.DrawEntryState
			}{{"e-ann", flashgate.DrawEntered}, {"e-bob", flashgate.DrawPending}} {
				if r, err := db.DrawEntry(ctx, sale.ID, c.id); err != nil || r.State != c.want {
					t.Errorf("%s: got %s, %v; want %s", c.id, r.State, err, c.want)
				}
			}
			if n, err := rdb.XLen(ctx, lua.DrawJournalKey(sale.ID)).Result(); err != nil || n != 0 {
				t.Errorf("the journal after the flush: %d entries, %v; want none", n, err)
			}
		})
	}
}
