package draw

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/flashgate/flashgate"
)

// Capturer captures and releases the entries' card holds at the provider:
// payments.Pacer, which keeps to the provider's rate, or payments.Stripe.
type Capturer interface {
	Capture(ctx context.Context, intentID, key string) (flashgate.Intent, error)
	Cancel(ctx context.Context, intentID string) (flashgate.Intent, error)
}

// CaptureKey is the idempotency key of an entry's capture: one per entry,
// so that a settlement run again never charges an entry twice.
func CaptureKey(entryID string) string { return "flashgate-capture-" + entryID }

// DefaultWorkers is SettleConfig.Workers when 0.
const DefaultWorkers = 32

// Progress counts a settlement's steps as they happen; read it while
// Settle runs (the admin status, metrics).
type Progress struct {
	// Captured holds charged; Promoted those of them that were not the
	// draw's winners (each took the units of a capture that failed);
	// Declined captures that failed (declined, expired, released);
	// Released holds canceled.
	Captured, Promoted, Declined, Released atomic.Int64
}

// SettleConfig configures Settle; the zero value works.
type SettleConfig struct {
	// Workers is how many captures, and apart from them how many
	// cancels, are in flight at once; 0 means DefaultWorkers. The
	// Capturer sets the rate.
	Workers int
	// Progress, when set, is kept up to date.
	Progress *Progress
	// Captured, when set, is called once for each entry whose hold was
	// captured, from several goroutines.
	Captured func(Entry, flashgate.Intent)
}

// Settlement is what Settle did.
type Settlement struct {
	// Captured are the entries charged, per variant, in the seed's order.
	Captured map[string][]Entry
	// Unsold is each variant's units left uncaptured because no entrant
	// left fits them.
	Unsold map[string]int
	// Promoted, Declined and Released count as Progress does.
	Promoted, Declined, Released int
}

// Hold states of a settlement's candidates.
const (
	untouched uint8 = iota
	capturing
	captured
	failed
	releasing
)

// variantState is one variant's candidates and where the settlement
// stands with them; guarded by settler.mu.
type variantState struct {
	name  string
	cands []int32 // entries of the variant, in the seed's order
	state []uint8
	left  int // units neither captured nor being captured
	// front is the first candidate that may be untouched; back the
	// last; reach the furthest ever taken for a capture.
	front, back, reach int
	inflight           int
	// fits is false once a scan found no untouched candidate that fits
	// in left, until left grows again.
	fits bool
	done bool
}

type settler struct {
	c       Capturer
	entries []Entry
	winner  []bool // by entry index: the draw's winners
	cfg     SettleConfig
	prog    *Progress

	mu   sync.Mutex
	cond *sync.Cond
	vs   []*variantState
	rr   int // the cancel pool's next variant, round robin
	err  error
}

// Settle captures the draw's winners and releases everyone else's hold:
// each variant's winners (Winners) are captured first, with their own
// workers; a capture that fails for good (flashgate.ErrNotCapturable or
// ErrNotFound: declined, expired, released) gives its units to the next
// entrant of that variant in the seed's order who fits them, whose hold is
// captured instead, until the units are captured or nobody is left. Holds
// are released meanwhile from the back of each variant's order (the
// entrants last to be promoted), keeping the next units + 16 candidates
// beyond the furthest capture, and every hold left once the variant is
// done. Every entry needs its IntentID. A failure of the provider that the
// Capturer gave up on ends the settlement with an error; running Settle
// again is safe (captures are keyed by entry, CaptureKey; a cancel of a
// released hold changes nothing) and finishes the work.
func Settle(ctx context.Context, c Capturer, sale string, seed []byte, stock map[string]int, entries []Entry, cfg SettleConfig) (*Settlement, error) {
	won, err := Winners(sale, seed, entries, stock)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if e.IntentID == "" {
			return nil, fmt.Errorf("%w: entry %q has no intent", ErrInvalid, e.ID)
		}
	}
	r, err := rank(sale, seed, entries)
	if err != nil {
		return nil, err
	}
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	s := &settler{c: c, entries: entries, winner: make([]bool, len(entries)), cfg: cfg, prog: cfg.Progress}
	if s.prog == nil {
		s.prog = &Progress{}
	}
	s.cond = sync.NewCond(&s.mu)
	ids := make(map[string]int, len(won))
	for v := range won {
		for _, e := range won[v] {
			ids[e.ID] = 1
		}
	}
	byName := map[string]*variantState{}
	for _, x := range r {
		e := entries[x.i]
		if ids[e.ID] == 1 {
			s.winner[x.i] = true
		}
		vs := byName[e.Variant]
		if vs == nil {
			vs = &variantState{name: e.Variant, left: stock[e.Variant], fits: true, reach: -1}
			byName[e.Variant] = vs
			s.vs = append(s.vs, vs)
		}
		vs.cands = append(vs.cands, x.i)
	}
	for _, vs := range s.vs {
		vs.state = make([]uint8, len(vs.cands))
		vs.back = len(vs.cands) - 1
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { s.mu.Lock(); s.cond.Broadcast(); s.mu.Unlock() })
	defer stop()
	var wg sync.WaitGroup
	for range cfg.Workers {
		wg.Go(func() { s.captures(ctx, cancel) })
		wg.Go(func() { s.cancels(ctx, cancel) })
	}
	wg.Wait()
	if s.err != nil {
		return nil, s.err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := &Settlement{Captured: map[string][]Entry{}, Unsold: map[string]int{}}
	for _, vs := range s.vs {
		for j, i := range vs.cands {
			if vs.state[j] == captured {
				out.Captured[vs.name] = append(out.Captured[vs.name], entries[i])
			}
		}
	}
	for v, n := range stock {
		out.Unsold[v] = n
		if vs := byName[v]; vs != nil {
			out.Unsold[v] = vs.left
		}
	}
	out.Promoted, out.Declined, out.Released = int(s.prog.Promoted.Load()), int(s.prog.Declined.Load()), int(s.prog.Released.Load())
	return out, nil
}

// fail ends the settlement with err (the first one wins).
func (s *settler) fail(err error, cancel context.CancelFunc) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.cond.Broadcast()
	s.mu.Unlock()
	cancel()
}

// nextCapture claims the next capture, or reports that every variant is
// done (ok false, all true); with neither it waits. Holds s.mu.
func (s *settler) nextCapture(ctx context.Context) (vs *variantState, j int, ok bool) {
	for {
		if ctx.Err() != nil || s.err != nil {
			return nil, 0, false
		}
		all := true
		for _, vs := range s.vs {
			if vs.done {
				continue
			}
			if vs.left > 0 && vs.fits {
				for j := vs.front; j < len(vs.cands); j++ {
					if vs.state[j] != untouched {
						if j == vs.front {
							vs.front++
						}
						continue
					}
					if e := s.entries[vs.cands[j]]; e.Quantity <= vs.left {
						vs.state[j], vs.left, vs.inflight, vs.reach = capturing, vs.left-e.Quantity, vs.inflight+1, max(vs.reach, j)
						return vs, j, true
					}
				}
				vs.fits = false
			}
			if vs.inflight == 0 {
				// No capture can free units any more: whoever is left
				// loses.
				vs.done = true
				s.cond.Broadcast()
				continue
			}
			all = false
		}
		if all {
			return nil, 0, false
		}
		s.cond.Wait()
	}
}

func (s *settler) captures(ctx context.Context, cancel context.CancelFunc) {
	for {
		s.mu.Lock()
		vs, j, ok := s.nextCapture(ctx)
		s.mu.Unlock()
		if !ok {
			return
		}
		i := vs.cands[j]
		e := s.entries[i]
		in, err := s.c.Capture(ctx, e.IntentID, CaptureKey(e.ID))
		if err == nil && in.Status != flashgate.IntentSucceeded {
			err = fmt.Errorf("capturing entry %s: intent %s is %s", e.ID, e.IntentID, in.Status)
		}
		s.mu.Lock()
		vs.inflight--
		switch {
		case err == nil:
			vs.state[j] = captured
			s.prog.Captured.Add(1)
			if !s.winner[i] {
				s.prog.Promoted.Add(1)
			}
		case errors.Is(err, flashgate.ErrNotCapturable) || errors.Is(err, flashgate.ErrNotFound):
			vs.state[j], vs.left, vs.fits = failed, vs.left+e.Quantity, true
			s.prog.Declined.Add(1)
		default:
			vs.state[j] = untouched // unknown: a run again captures it under the same key
			s.mu.Unlock()
			s.fail(fmt.Errorf("settling the draw: capturing entry %s: %w", e.ID, err), cancel)
			return
		}
		s.cond.Broadcast()
		s.mu.Unlock()
		if err == nil && s.cfg.Captured != nil {
			s.cfg.Captured(e, in)
		}
	}
}

// nextCancel claims the next hold to release: any untouched candidate of
// a done variant, from the back; of one not done, only beyond its
// furthest capture plus units + 16 candidates. It waits while there is
// none and not every variant is done. Holds s.mu.
func (s *settler) nextCancel(ctx context.Context) (vs *variantState, j int, ok bool) {
	for {
		if ctx.Err() != nil || s.err != nil {
			return nil, 0, false
		}
		all := true
		for k := range s.vs {
			vs := s.vs[(s.rr+k)%len(s.vs)]
			for vs.back >= 0 && vs.state[vs.back] != untouched {
				vs.back--
			}
			if vs.back < 0 {
				continue
			}
			all = false
			if !vs.done && vs.back <= vs.reach+stockOf(vs)+16 {
				continue
			}
			j := vs.back
			vs.state[j] = releasing
			vs.back--
			s.rr = (s.rr + k + 1) % len(s.vs)
			return vs, j, true
		}
		if all && s.allDone() {
			return nil, 0, false
		}
		s.cond.Wait()
	}
}

// stockOf is the units a variant's settlement may still have to promote
// for: those left plus those being captured.
func stockOf(vs *variantState) int { return vs.left + vs.inflight }

func (s *settler) allDone() bool {
	for _, vs := range s.vs {
		if !vs.done {
			return false
		}
	}
	return true
}

func (s *settler) cancels(ctx context.Context, cancel context.CancelFunc) {
	for {
		s.mu.Lock()
		vs, j, ok := s.nextCancel(ctx)
		s.mu.Unlock()
		if !ok {
			return
		}
		e := s.entries[vs.cands[j]]
		in, err := s.c.Cancel(ctx, e.IntentID)
		if err == nil && in.Status != flashgate.IntentCanceled && in.Status != "requires_payment_method" {
			err = fmt.Errorf("intent %s of a losing entry is %s", e.IntentID, in.Status)
		}
		if err != nil {
			s.mu.Lock()
			vs.state[j] = untouched
			if j > vs.back {
				vs.back = j
			}
			s.mu.Unlock()
			s.fail(fmt.Errorf("settling the draw: releasing entry %s: %w", e.ID, err), cancel)
			return
		}
		s.prog.Released.Add(1)
	}
}
