package failover

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/lua"
)

// Every pause has an owner. A sale (or bucket) is paused when its hash has
// start = 0 and resume set: resume = 2 by lua.Pause and the reserve scripts'
// failover fence, resume = 1 by a rebuild (the watch's, or a re-sync's of a
// hash Redis lost or holds from an older snapshot). A re-sync reopens only
// resume = 1; the watch owns the rest:
//
//   - a marker that differs from the primary's id: the watch recovers the
//     sale (recoverSale), ending with resume = 1;
//   - resume = 2 while the marker already names the primary (the fence
//     paused the sale after a recovery had checked it, or a recovery was
//     cut short): nobody else would act, so the watch recovers it again;
//   - resume = 1: the watch re-syncs it at its next tick, which reopens it,
//     so a rebuilt sale sells again within a tick whatever the order of the
//     restart, the watch, the re-syncs and the sinks.
//
// The watch also keeps, per paused live sale, since when (as it first saw
// it) and why: the admin status and flashgate_sale_paused_seconds show
// them, and a sale paused past a bound raises an alert.

// What a pass of the watch did about a paused sale (Pause.Reason).
const (
	noteNewPrimary = "new redis primary: pausing the sale until it is rebuilt from the database"
	noteDraining   = "new redis primary: waiting for the order sinks to drain the sale's stream before the rebuild"
	noteRebuilding = "new redis primary: rebuilding the sale from the database"
	noteRebuilt    = "rebuilt from the database: reopens at the next tick"
	noteOrphan     = "paused by the failover fence after its primary was checked: rebuilding it from the database"
	noteReopening  = "rebuilt: reopening with a re-sync"
	noteReopened   = "reopened" // the pass reopened it: no longer paused
	notePaused     = "paused (start = 0, resume = %d): the failover watch looks at it every tick"
)

// Pause is why, and since when, a live sale has been paused, as the
// failover watch saw it at its last pass.
type Pause struct {
	// Since is when the watch first saw the sale paused.
	Since time.Time
	// Reason is where its recovery stands.
	Reason string
}

// pass is what one pass of the watch saw of a sale.
type pass struct {
	id     string
	paused int // the largest resume of its paused hashes, 0 when none is
	note   string
}

// holdsStock reports whether m's slot holds a hash a buyer reserves from:
// an unbucketed sale's own, or a bucket's.
func (m slotMarker) holdsStock(sale flashgate.Sale) bool {
	return m.bucket >= 0 || m.bucket == markSale && !sale.Bucketed()
}

// pauseOf reads an HMGET of start and resume: the hash's resume when it is
// paused (start is not 1 and resume is 1 or more), else 0.
func pauseOf(cmd *redis.SliceCmd) int {
	if cmd == nil {
		return 0
	}
	v, err := cmd.Result()
	if err != nil || len(v) != 2 {
		return 0
	}
	return lua.PauseOf(v[0], v[1])
}

// pausedOf is the largest pauseOf of cmds.
func pausedOf(cmds []*redis.SliceCmd) int {
	p := 0
	for _, c := range cmds {
		p = max(p, pauseOf(c))
	}
	return p
}

// ownPause acts on a paused sale whose marker names its primary: nobody
// else would (see the top of this file). It returns what it did.
func (s *Watcher) ownPause(ctx context.Context, sale flashgate.Sale, replID string, paused int) (string, error) {
	if paused == 0 || sale.State != flashgate.StateOpen {
		return "", nil
	}
	if paused >= 2 {
		s.log.Warn("sale paused with no recovery under way (its marker names this primary): rebuilding it from the database", "sale", sale.ID)
		note, err := s.recoverSale(ctx, sale, replID, replID)
		if note == noteDraining || note == noteRebuilding {
			note = noteOrphan
		}
		return note, err
	}
	if _, _, err := s.resync(ctx, sale.ID); err != nil {
		return noteReopening, fmt.Errorf("reopening a rebuilt sale: %w", err)
	}
	return noteReopened, nil
}

// notePasses records what a pass saw: the sales paused in it keep the time
// they were first seen paused; the others are forgotten. nil forgets all.
func (s *Watcher) notePasses(seen []pass) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	next := make(map[string]Pause, len(seen))
	for _, ps := range seen {
		if ps.paused == 0 || ps.note == noteReopened {
			continue
		}
		p, ok := s.paused[ps.id]
		if !ok {
			p.Since = now
		}
		switch {
		case ps.note != "":
			p.Reason = ps.note
		case p.Reason == "":
			p.Reason = fmt.Sprintf(notePaused, ps.paused)
		}
		next[ps.id] = p
	}
	s.paused = next
}

// Forget drops what the watch knew of paused sales: the control plane no
// longer leads, so another one's watch owns them.
func (s *Watcher) Forget() { s.notePasses(nil) }

// Paused returns the live sales paused at the watch's last pass.
func (s *Watcher) Paused() map[string]Pause {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.paused)
}

// PausedSale is Paused for one sale.
func (s *Watcher) PausedSale(id string) (Pause, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.paused[id]
	return p, ok
}
