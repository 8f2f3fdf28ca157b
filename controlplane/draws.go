package controlplane

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/drawclose"
	"github.com/flashgate/flashgate/controlplane/drawjournal"
	"github.com/flashgate/flashgate/draw"
)

// The draws' wiring: the close lives in controlplane/drawclose, the
// journal of entries in controlplane/drawjournal, the draw itself in draw.

// DrawReserver makes a draw winner's order (inventory.Service.ReserveWinner);
// DrawCapturer captures and releases card holds (payments.Pacer).
type (
	DrawReserver = drawclose.Reserver
	DrawCapturer = draw.Capturer
)

// newDrawCloser is the draws' closer of a Service being built; its seeds
// are keyed with the fair queues' seed secret.
func newDrawCloser(s *Service, cfg Config) *drawclose.Closer {
	seed := cfg.QueueSeedSecret
	if len(seed) == 0 {
		seed = DeriveQueueSeedSecret(cfg.AdminToken)
	}
	return drawclose.New(drawclose.Config{
		Redis: s.rdb, Store: s.store, Reserver: cfg.DrawReserver, Capturer: cfg.DrawCapturer,
		SeedSecret: seed, Workers: cfg.DrawWorkers, Clock: s.clock, Logger: s.log,
		Flush: s.flushDraw,
	})
}

// flushDraw writes sale's journaled entry changes to the database
// (drawjournal.Flush), one flush of this process at a time, shared by the
// callers that asked while another ran (flushGroup). Flushes of two
// processes (an old leader's and a new one's) may still run at once: each
// entry's latest change wins (flashgate.DrawEntry.Seq), and a flush that
// fails leaves its changes in the journal for the next. A rebuild of the
// sale (resync.Syncer.RestoreDraw) does not take this lock: a flush whose
// write lands after the rebuild read the rows finds the restore's mark
// changed and puts its rows into Redis itself, in any process.
func (s *Service) flushDraw(ctx context.Context, sale string) (int, error) {
	return s.drawFlush.do(ctx, sale, func(ctx context.Context) (int, error) {
		return drawjournal.Flush(ctx, s.rdb, s.store, sale, 0)
	})
}

// flushGroup (its zero value ready) runs one flush at a time and lets
// every caller that asked while one ran share the next, as a database's
// group commit does: a caller needs a flush that began after it asked (a
// hold waiting on its entry's row, drawhold, needs the journal as it was
// when the entry was made), not one of its own. A crowd entering a draw
// then costs a flush per flush's time rather than one flush each in turn.
type flushGroup struct {
	mu sync.Mutex
	// run holds a token while a flush runs (made with sales, under mu): a
	// channel, not a mutex, so that a caller whose context ends while it
	// waits leaves (a hold whose buyer went, its request's deadline past,
	// waited out every flush queued before it and then ran one that its
	// context cut short at once, while those behind it waited on).
	run chan struct{}
	// sales is each sale's flushes: the last one begun and the last one
	// finished, with its result (guarded by mu; begun and finished move
	// only while run's token is held).
	sales map[string]*flushes
}

type flushes struct {
	begun, finished uint64
	n               int
	err             error
}

// do returns the result of a flush of sale that began after do was
// called: one that another caller ran meanwhile, or flush run here. A
// flush cut short by its own caller's context is shared with no one. A
// caller whose context ends while it waits for another's flush returns
// the context's error.
func (g *flushGroup) do(ctx context.Context, sale string, flush func(context.Context) (int, error)) (int, error) {
	g.mu.Lock()
	if g.sales == nil {
		g.sales = map[string]*flushes{}
		g.run = make(chan struct{}, 1)
	}
	f := g.sales[sale]
	if f == nil {
		f = &flushes{}
		g.sales[sale] = f
	}
	want := f.begun + 1
	run := g.run
	g.mu.Unlock()
	select {
	case run <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	defer func() { <-run }()
	g.mu.Lock()
	if f.finished >= want {
		n, err := f.n, f.err
		g.mu.Unlock()
		return n, err
	}
	f.begun++
	k := f.begun
	g.mu.Unlock()
	n, err := flush(ctx)
	if ctx.Err() == nil {
		g.mu.Lock()
		f.finished, f.n, f.err = k, n, err
		g.mu.Unlock()
	}
	return n, err
}

// drawTick writes each live draw sale's journaled entry changes to the
// database (controlplane/drawjournal), publishes its seed's commitment once
// entries are open, and starts its close, under the term's context term,
// once they have closed; the leader calls it every tick.
func (s *Service) drawTick(ctx, term context.Context, sales []flashgate.Sale) {
	now := s.clock.Now()
	for _, sale := range sales {
		if !sale.Draw() {
			continue
		}
		if _, err := s.flushDraw(ctx, sale.ID); err != nil && ctx.Err() == nil {
			s.log.Warn("draw journal", "sale", sale.ID, "err", err)
		}
		if err := s.draws.Commit(ctx, sale); err != nil && ctx.Err() == nil {
			s.log.Warn("draw seed", "sale", sale.ID, "err", err)
		}
		if drawclose.Due(sale, now) {
			s.startDrawClose(term, sale)
		}
	}
}

// drawRetry is how long after a failed close the leader runs it again.
const drawRetry = time.Second

// startDrawClose runs sale's close in a goroutine of the term ctx, unless
// it runs already or finished; Close waits for it.
func (s *Service) startDrawClose(ctx context.Context, sale flashgate.Sale) {
	s.mu.Lock()
	if !s.canDraw {
		told := s.noReserver[sale.ID]
		s.noReserver[sale.ID] = true
		s.mu.Unlock()
		if !told {
			s.log.Warn("draw close: no reserver configured; the draw is not closed here", "sale", sale.ID)
		}
		return
	}
	if s.closed || s.drawing[sale.ID] || s.drawn[sale.ID] {
		s.mu.Unlock()
		return
	}
	s.drawing[sale.ID] = true
	s.wg.Add(1) // under mu, after checking closed: see runContext
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		done, err := s.CloseDraw(ctx, sale)
		if err != nil && ctx.Err() == nil {
			s.log.Warn("draw close", "sale", sale.ID, "err", err)
		}
		if !done && ctx.Err() == nil {
			// Bounded by the term: a new tick starts it again after this.
			t := time.NewTimer(drawRetry)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
		}
		s.mu.Lock()
		delete(s.drawing, sale.ID)
		if done {
			s.drawn[sale.ID] = true
		}
		s.mu.Unlock()
	}()
}

// CloseDraw closes a draw sale whose entries closed, or goes on with a
// close cut short (drawclose.Closer.Close), and reports whether the close
// finished. The leader runs it; tests call it with their clock.
func (s *Service) CloseDraw(ctx context.Context, sale flashgate.Sale) (bool, error) {
	return s.draws.Close(ctx, sale)
}

// CommitDraw publishes a draw sale's seed commitment once its entries are
// open (drawclose.Closer.Commit); the leader does it every tick.
func (s *Service) CommitDraw(ctx context.Context, sale flashgate.Sale) error {
	return s.draws.Commit(ctx, sale)
}

// DrawFile returns a draw's entries file (draw.File's text form), stored at
// its close; flashgate.ErrNotFound before it.
func (s *Service) DrawFile(ctx context.Context, saleID string) ([]byte, error) {
	if _, err := s.store.Sale(ctx, saleID); err != nil {
		return nil, err
	}
	body, _, err := s.store.DrawFile(ctx, saleID)
	return body, err
}

// DrawProgress returns the settlement of sale's draw under way or last run
// in this process; nil when none ran here.
func (s *Service) DrawProgress(saleID string) *draw.Progress { return s.draws.Progress(saleID) }

// drawFinished reports whether sale is no draw, or a draw whose close
// finished (as this process saw it, else as the database says): the
// scheduler closes a draw's sale at ends_at only then.
func (s *Service) drawFinished(ctx context.Context, sale flashgate.Sale) bool {
	if !sale.Draw() || !s.canDraw {
		return true // no close of this process would ever finish it
	}
	s.mu.Lock()
	done := s.drawn[sale.ID]
	s.mu.Unlock()
	if done {
		return true
	}
	_, done, err := s.store.DrawFile(ctx, sale.ID)
	if err == nil && done {
		s.mu.Lock()
		s.drawn[sale.ID] = true
		s.mu.Unlock()
	}
	return err == nil && done
}

// drawHold returns the card hold whose capture paid o when o is a draw
// winner's order (its id is drawclose.OrderID of its entry's), "" for any
// other order: an admin refund refunds that hold (orders.Config.DrawHold).
// It reads the one entry the order's id names.
func (s *Service) drawHold(ctx context.Context, o flashgate.Order) (string, error) {
	sale, err := s.store.Sale(ctx, o.SaleID)
	if err != nil || !sale.Draw() {
		return "", err
	}
	id, ok := strings.CutPrefix(o.ID, drawclose.OrderID(""))
	if !ok {
		return "", nil
	}
	r, err := s.store.DrawEntry(ctx, o.SaleID, id)
	switch {
	case errors.Is(err, flashgate.ErrNotFound):
		return "", nil
	case err != nil:
		return "", err
	case r.UserID != o.UserID:
		return "", nil
	}
	return r.PaymentIntent, nil
}
