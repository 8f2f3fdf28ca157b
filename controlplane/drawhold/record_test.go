package drawhold_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/drawhold"
	"github.com/flashgate/flashgate/controlplane/drawjournal"
	"github.com/flashgate/flashgate/controlplane/internal/cptest"
	"github.com/flashgate/flashgate/sqldb"
)

// TestHoldRecordedBeforeItsSecret: a hold is stored with its entry's row
// before the buyer is given what authorises it (the journal flushed first
// when the row is not written yet), so that Redis losing the hold's only
// other record leaves no authorised hold that nothing releases; a hold not
// recorded is answered without its secret, and asking again gives it.
func TestHoldRecordedBeforeItsSecret(t *testing.T) {
	e := newEnv(t, true)
	id := e.enter("buyer-1", 1)
	d, err := e.h.Hold(e.ctx, sale, "buyer-1")
	if err != nil || d.ClientSecret == "" {
		t.Fatalf("Hold: got %+v, %v; want a hold with its client secret", d, err)
	}
	if got, _ := e.held.Load(id); got != d.PaymentIntent {
		t.Errorf("the store's hold of %s: got %v, want %s", id, got, d.PaymentIntent)
	}

	id2 := e.enter("buyer-2", 1)
	e.refuse.Store(true)
	d, err = e.h.Hold(e.ctx, sale, "buyer-2")
	if !errors.Is(err, flashgate.ErrUnavailable) || d.ClientSecret != "" {
		t.Errorf("Hold, not recorded: got %+v, %v; want no client secret, %v", d, err, flashgate.ErrUnavailable)
	}
	if got, ok := e.held.Load(id2); ok {
		t.Errorf("the store's hold of %s: got %v, want none", id2, got)
	}
	d, err = e.h.Hold(e.ctx, sale, "buyer-2") // the page asks again
	if !errors.Is(err, flashgate.ErrUnavailable) || d.ClientSecret != "" {
		t.Errorf("Hold again, not recorded: got %+v, %v; want no client secret, %v", d, err, flashgate.ErrUnavailable)
	}
	if e.flushes.Load() == 0 {
		t.Errorf("journal flushes for a hold whose row is not written: got 0, want some")
	}
	e.writes.Store(true) // the next flush writes the row
	d, err = e.h.Hold(e.ctx, sale, "buyer-2")
	if err != nil || d.ClientSecret == "" {
		t.Fatalf("Hold again, recorded: got %+v, %v; want its client secret", d, err)
	}
	if got, _ := e.held.Load(id2); got != d.PaymentIntent {
		t.Errorf("the store's hold of %s: got %v, want %s", id2, got, d.PaymentIntent)
	}
}

// dbSales is the holder's Store on a database: its rows record the holds
// (sqldb.DB.RecordDrawHold), sales holds the sale.
type dbSales struct {
	sales
	db *sqldb.DB
}

func (s dbSales) RecordDrawHold(ctx context.Context, saleID, entryID, intent string) (bool, error) {
	return s.db.RecordDrawHold(ctx, saleID, entryID, intent)
}

// TestHoldRecordedPastOneBatch: a hold whose entry's change sits in the
// journal behind more than one flush's batch of others (a crowd entering
// at once) is recorded: the hold flushes until its row is written, not
// once. It was answered ErrUnavailable, and since the holds of a process
// share a flush (a crowd's every hold got the one next flush, not a flush
// of its own in turn), a crowd whose journal ran a batch ahead of the
// flushes had its holds refused until the journal caught up.
func TestHoldRecordedPastOneBatch(t *testing.T) {
	const batch, ahead = 2, 5 // the crowd's changes ahead: three batches
	e := newEnv(t, true)
	db := cptest.OpenDB(t, cptest.SQLiteDSN(t))
	var flushes atomic.Int32
	h := drawhold.New(drawhold.Config{Redis: e.rdb, Store: dbSales{db: db}, Provider: e.stripe, Clock: e.clock,
		Logger: cptest.QuietLogger(), Grace: grace, Rate: 1000,
		Flush: func(ctx context.Context, s string) (int, error) {
			flushes.Add(1)
			return drawjournal.Flush(ctx, e.rdb, db, s, batch)
		}})
	for i := range ahead {
		e.enter("crowd-"+strconv.Itoa(i), 1)
	}
	id := e.enter("buyer", 1)
	d, err := h.Hold(e.ctx, sale, "buyer")
	if err != nil || d.ClientSecret == "" {
		t.Fatalf("Hold behind %d changes (batches of %d): got %+v, %v; want its client secret", ahead, batch, d, err)
	}
	r, err := db.DrawEntry(e.ctx, sale, id)
	if err != nil || r.PaymentIntent != d.PaymentIntent {
		t.Errorf("the row of %s: got %+v, %v; want intent %s", id, r, err, d.PaymentIntent)
	}
	if got, want := flushes.Load(), int32(ahead/batch+1); got > want+1 {
		t.Errorf("flushes: got %d, want about %d (until the row is written)", got, want)
	}
}
