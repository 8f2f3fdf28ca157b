// Package failover notices a new Redis primary under a sale and rebuilds
// the sale from the database before it sells again. It runs on the leader,
// every tick.
package failover

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/buckets"
	"github.com/flashgate/flashgate/controlplane/internal/fencing"
	"github.com/flashgate/flashgate/controlplane/resync"
	"github.com/flashgate/flashgate/lua"
)

// Failover detection. Replication is asynchronous: a replica promoted to
// primary may lack the last reserves and releases of the old one, and its
// buyers hash may lack buyers whose orders already are rows. Selling from it
// as it is could sell units twice, to the same buyers too. So before a sale
// is bought from again on a new primary, the leader rebuilds it as after a
// Redis loss:
//
//  1. It notices the new primary: lua.PrimaryKey holds the replication id
//     (INFO master_replid) of the primary the sale was last checked on; a
//     promoted replica carries its old primary's value but has an id of its
//     own. On a cluster this is the primary owning the sale's slot, so a
//     slot moving to another primary is noticed the same way. The marker
//     lives in Redis, so a control plane that takes the lead after the
//     failover notices it too.
//  2. It pauses the sale (lua.Pause: start = 0; the database still says
//     open).
//  3. It waits, a tick at a time, until the order sinks have committed every
//     entry of the sale's stream (nothing undelivered, nothing pending), so
//     the database holds every reserve the new primary knows.
//  4. It sets the sale's reserved below any row count and re-syncs: the
//     restore path rebuilds the buyers and releases from the rows and
//     booked from the snapshot, while the hash stays (gateways answer
//     unavailable, never not_found). Then, in one step (lua.Rebuilt), the
//     marker is set to the new id and an open sale is marked to resume.
//  5. At its next tick the watch reopens it with a re-sync (paused.go).
//
// A bucketed sale keeps a marker per slot it lives in and recovers each
// bucket alone: see buckets.go.

// Watcher is the failover watch. Its methods are safe for concurrent use.
type Watcher struct {
	rdb     redis.UniversalClient
	log     *slog.Logger
	buckets *buckets.Keeper
	sync    *resync.Syncer
	resync  ResyncFunc
	// standalone is set (Standalone) when the store has no replication by
	// design: the watch being off is no warning there.
	standalone atomic.Bool
	// recoveringSales holds the ids of bucketed sales a slot of which is
	// being recovered (buckets.go).
	recoveringSales sync.Map
	// replBlind is set once the watch has noted that Redis cannot tell its
	// replication state, until it can again.
	replBlind atomic.Bool
	// now is the wall clock of the pause notes (time.Now).
	now func() time.Time
	// mu guards paused: the live sales paused at the last pass (paused.go).
	mu     sync.Mutex
	paused map[string]Pause
}

// ResyncFunc re-syncs one sale under ctx's fencing token, the control
// plane's Resync (which counts its failures).
type ResyncFunc func(ctx context.Context, id string) (before, after resync.Figures, err error)

// New returns a Watcher over rdb: it rebuilds an unbucketed sale with
// resyncSale and the buckets of a bucketed one with keeper and syncer.
func New(rdb redis.UniversalClient, log *slog.Logger, keeper *buckets.Keeper, syncer *resync.Syncer, resyncSale ResyncFunc) *Watcher {
	return &Watcher{rdb: rdb, log: log, buckets: keeper, sync: syncer, resync: resyncSale, now: time.Now}
}

// slotMarker is one primary marker a sale keeps: an unbucketed sale one,
// for its slot; a bucketed sale one for its own hash, one per bucket and one
// for its ledger, each in the slot it watches.
type slotMarker struct {
	key    string // the marker, lua.PrimaryKey or lua.LedgerPrimaryKey
	probe  string // a key of the watched slot, to find its primary
	bucket int    // the bucket's index; markSale or markLedger otherwise
}

const (
	markSale   = -1 // the sale's own hash
	markLedger = -2 // a bucketed sale's allocation ledger
)

// markersOf lists the markers sale keeps.
func markersOf(sale flashgate.Sale) []slotMarker {
	out := []slotMarker{{key: lua.PrimaryKey(sale.ID), probe: lua.SaleKey(sale.ID), bucket: markSale}}
	if !sale.Bucketed() {
		return out
	}
	for b, t := range buckets.Layout(sale).Tags() {
		out = append(out, slotMarker{key: lua.PrimaryKey(t), probe: lua.SaleKey(t), bucket: b})
	}
	return append(out, slotMarker{key: lua.LedgerPrimaryKey(sale.ID), probe: lua.LedgerKey(sale.ID), bucket: markLedger})
}

// Watch checks every live sale (an archived one is checked once
// reopened) for a new primary and moves the recovery of each affected sale
// on by one step. It also owns every pause it finds (paused.go): a sale
// paused with no recovery under way is rebuilt, a rebuilt one reopened. It
// runs on the leader, every tick, with the live sales the tick read.
func (s *Watcher) Watch(ctx context.Context, sales []flashgate.Sale) {
	if len(sales) == 0 {
		s.notePasses(nil)
		return
	}
	// Every marker, and the pause fields of every hash holding stock, in
	// one pipeline (split per node on a cluster); a node that fails costs
	// only its own sales this tick.
	marks := make([][]slotMarker, len(sales))
	cmds := make([][]*redis.StringCmd, len(sales))
	states := make([][]*redis.SliceCmd, len(sales))
	_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, sale := range sales {
			marks[i] = markersOf(sale)
			for _, m := range marks[i] {
				cmds[i] = append(cmds[i], p.Get(ctx, m.key))
				var st *redis.SliceCmd
				if m.holdsStock(sale) {
					st = p.HMGet(ctx, m.probe, lua.FieldStart, lua.FieldResume)
				}
				states[i] = append(states[i], st)
			}
		}
		return nil
	})
	ids := map[string]string{} // primary address → replication id, this pass
	seen := make([]pass, 0, len(sales))
	for i, sale := range sales {
		var err error
		ps := pass{id: sale.ID, paused: pausedOf(states[i])}
		if sale.Bucketed() {
			ps.note, err = s.checkBuckets(ctx, sale, marks[i], cmds[i], states[i], ids)
		} else {
			marker, rerr := cmds[i][0].Result()
			if rerr != nil && !errors.Is(rerr, redis.Nil) {
				if ctx.Err() != nil {
					return // shutting down: not a failure of the store
				}
				s.log.Warn("failover watch: reading the primary marker", "sale", sale.ID, "err", rerr)
				seen = append(seen, ps)
				continue
			}
			ps.note, err = s.checkPrimary(ctx, sale, marker, pauseOf(states[i][0]), ids)
		}
		if errors.Is(err, errNoReplicationState) {
			s.noteBlind(err)
			s.notePasses(nil)
			return // the same store for every sale: nothing to check
		}
		if err != nil {
			ps.note = fmt.Sprintf("%s (failed this tick: %v)", ps.note, err)
			if ctx.Err() != nil {
				return
			}
			s.log.Warn("failover watch", "sale", sale.ID, "err", err)
		}
		seen = append(seen, ps)
	}
	s.notePasses(seen)
	s.replBlind.Store(false)
}

// errNoReplicationState is returned (wrapped) by replicationID when Redis
// answers but cannot tell its replication id: a store without INFO
// replication, as the demo's embedded one, or one with INFO renamed.
var errNoReplicationState = errors.New("redis cannot tell its replication id")

// noteBlind logs once, until Redis can tell its replication state again,
// that failovers go unnoticed: the watch, and the reserve scripts' fence
// (which cannot tell either), are off.
func (s *Watcher) noteBlind(err error) {
	switch {
	case s.replBlind.Swap(true):
	case s.standalone.Load():
		s.log.Info("failover watch off: the store has no replication, so there is no replica to fail over to")
	default:
		s.log.Warn("failover watch off: redis cannot tell its replication state (INFO replication); a promoted replica would not be noticed", "err", err)
	}
}

// checkPrimary compares sale's marker with the replication id of the
// primary that holds the sale now, and recovers the sale when they differ.
// When they agree it owns the sale's pause, if any (paused.go). It returns
// what it did, for the sale's pause note.
func (s *Watcher) checkPrimary(ctx context.Context, sale flashgate.Sale, marker string, paused int, ids map[string]string) (string, error) {
	replID, err := s.replicationID(ctx, lua.SaleKey(sale.ID), ids)
	if err != nil {
		return "failover watch: cannot read the primary's replication id", err
	}
	switch {
	case marker == replID:
		return s.ownPause(ctx, sale, replID, paused)
	case marker == "":
		// First look at this sale on this Redis (or Redis lost it all, which
		// the re-sync's own rebuild covers): remember the primary.
		return "", s.rdb.Set(ctx, lua.PrimaryKey(sale.ID), replID, 0).Err()
	}
	return s.recoverSale(ctx, sale, marker, replID)
}

// recoverSale moves the recovery of sale on a new primary on by one step:
// pause, then, once the stream has drained, rebuild and mark. It returns
// where the recovery stands.
func (s *Watcher) recoverSale(ctx context.Context, sale flashgate.Sale, old, replID string) (string, error) {
	paused, err := lua.Pause.Run(ctx, s.rdb, lua.SaleKeys(sale.ID), fencing.Of(ctx)).Int64()
	if err != nil {
		return noteNewPrimary, fmt.Errorf("pausing after a failover: %w", err)
	}
	if paused == lua.PauseFenced {
		return noteNewPrimary, fencing.Err("pausing after a failover", fencing.Of(ctx))
	}
	if paused == 1 {
		s.log.Warn("new redis primary: sale paused until rebuilt from the database",
			"sale", sale.ID, "old_replid", old, "new_replid", replID)
	}
	drained, err := s.streamDrained(ctx, sale.ID)
	if err != nil || !drained {
		return noteDraining, err
	}
	// Reserved below every row sends the re-sync down its restore path
	// (buyers and releases from the rows, booked from the snapshot) without
	// deleting the hash, so gateways go on answering from it (paused).
	if err := fencing.Mark(ctx, s.rdb, sale.ID, lua.FieldReserved, -1); err != nil {
		return noteRebuilding, fmt.Errorf("marking the sale for its rebuild: %w", err)
	}
	_, after, err := s.resync(ctx, sale.ID)
	if err != nil {
		return noteRebuilding, fmt.Errorf("rebuilding after a failover: %w", err)
	}
	// The marker names the new primary and an open sale is marked to reopen
	// in one step (lua.Rebuilt): a buyer between two writes would have met
	// the fence and paused the sale with nobody left to reopen it.
	if err := s.markRebuilt(ctx, sale.ID, replID, sale.State == flashgate.StateOpen); err != nil {
		return noteRebuilding, err
	}
	s.log.Warn("sale rebuilt from the database after a failover", "sale", sale.ID, "booked", after.Booked)
	return noteRebuilt, nil
}

// markRebuilt names primary replID in the marker of tag (a sale or a
// bucket) and, when resume is set, marks it to reopen (lua.Rebuilt).
func (s *Watcher) markRebuilt(ctx context.Context, tag, replID string, resume bool) error {
	tok := fencing.Of(ctx)
	flag := "0"
	if resume {
		flag = "1"
	}
	n, err := lua.Rebuilt.Run(ctx, s.rdb, lua.RebuiltKeys(tag), tok, replID, flag).Int()
	if err != nil {
		return fmt.Errorf("marking %s rebuilt: %w: %w", tag, flashgate.ErrUnavailable, err)
	}
	if n == lua.RebuiltFenced {
		return fencing.Err("marking "+tag+" rebuilt", tok)
	}
	return nil
}

// streamDrained reports whether the order sinks have committed every entry
// of the sale's stream: the stream is empty (the sinks trim what they
// commit), or the sink group has read up to its last id and acknowledged
// all it read.
func (s *Watcher) streamDrained(ctx context.Context, id string) (bool, error) {
	key := lua.OrdersKey(id)
	info, err := s.rdb.XInfoStream(ctx, key).Result()
	if err != nil {
		if redis.HasErrorPrefix(err, "no such key") {
			return true, nil
		}
		return false, fmt.Errorf("reading the stream: %w", err)
	}
	if info.Length == 0 {
		// The sinks trim what they committed (lua.AckTrim) and delete what they set aside.
		return true, nil
	}
	groups, err := s.rdb.XInfoGroups(ctx, key).Result()
	if err != nil {
		return false, fmt.Errorf("reading the stream's groups: %w", err)
	}
	for _, g := range groups {
		if g.Name == lua.SinkGroup {
			return g.Pending == 0 && g.LastDeliveredID == info.LastGeneratedID, nil
		}
	}
	return false, nil
}

// replicationID returns the replication id of the primary that holds key:
// on a cluster the owner of its slot, else the one primary. ids caches
// the answers of one pass by primary address.
func (s *Watcher) replicationID(ctx context.Context, key string, ids map[string]string) (string, error) {
	node := redis.Cmdable(s.rdb)
	addr := ""
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		c, err := cc.MasterForKey(ctx, key)
		if err != nil {
			return "", fmt.Errorf("finding the sale's primary: %w", err)
		}
		node, addr = c, c.Options().Addr
	}
	if v, ok := ids[addr]; ok {
		return v, nil
	}
	info, err := node.Info(ctx, "replication").Result()
	var refused redis.Error
	if errors.As(err, &refused) {
		return "", fmt.Errorf("%w: %w", errNoReplicationState, err)
	}
	if err != nil {
		return "", fmt.Errorf("reading the primary's replication id: %w", err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "master_replid:"); ok && v != "" {
			if strings.Contains(info, "role:slave") {
				return "", fmt.Errorf("%s is a replica, not a primary", addr)
			}
			ids[addr] = v
			return v, nil
		}
	}
	return "", fmt.Errorf("%w: no master_replid in INFO replication", errNoReplicationState)
}
