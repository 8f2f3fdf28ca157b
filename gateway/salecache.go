package gateway

import (
	"context"
	"errors"
	"hash/maphash"
	"slices"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/gateway/queueedge"
	"github.com/flashgate/flashgate/internal/jsonstr"
	"github.com/flashgate/flashgate/lua"
)

// saleMeta is one reading of a sale's catalog entry; immutable once stored.
type saleMeta struct {
	found bool
	sale  flashgate.Sale
	// vs is the sale's variants, nil for a sale of one stock.
	vs *variantSet
}

// variantSet is a sale's variants as the catalog lists them, with what the
// refresh and the purchase path need precomputed; immutable once built.
type variantSet struct {
	ids, names []string
	// at maps each id to its index in ids.
	at map[string]int
	// fields are the sale hash fields a refresh reads: each variant's
	// total, then its booked (lua.VariantField).
	fields []string
	// soldOut holds each variant's 409 body, {"error":"sold_out","variant":"<id>"}.
	soldOut [][]byte
}

// newVariantSet returns vs's set, nil for none.
func newVariantSet(vs []flashgate.Variant) *variantSet {
	if len(vs) == 0 {
		return nil
	}
	set := &variantSet{at: make(map[string]int, len(vs))}
	for i, v := range vs {
		set.at[v.ID] = i
		set.ids = append(set.ids, v.ID)
		set.names = append(set.names, v.Name)
		set.fields = append(set.fields, lua.VariantField(v.ID, lua.FieldTotal), lua.VariantField(v.ID, lua.FieldBooked))
		b := jsonstr.Append([]byte(`{"error":"sold_out","variant":`), v.ID)
		set.soldOut = append(set.soldOut, append(b, '}'))
	}
	return set
}

// index returns the index of the variant named id, or -1.
func (vs *variantSet) index(id []byte) int {
	if i, ok := vs.at[string(id)]; ok {
		return i
	}
	return -1
}

// sale is the gateway's cached view of one sale. The hot path reads it
// without locks.
type sale struct {
	id    string
	ready chan struct{} // closed once the first load finished
	// loaded is set just before ready closes: the hot path reads it
	// instead of receiving from ready, which takes the channel's lock.
	loaded atomic.Bool
	state  atomic.Pointer[saleState]
	meta   atomic.Pointer[saleMeta]
	api    atomic.Pointer[apiDoc]

	fair queueedge.Cache // the fair queue's keys and rank keys (queue_state.go)

	asked   atomic.Bool // someone asked since the last refresh
	limiter *rate.Limiter

	// lostRace, when not nil, runs in admit between its reading of
	// admitted and its compare-and-swap: tests make another buyer win the
	// race there.
	lostRace func()

	// The counters below are written by requests on every core: they
	// keep off the cache lines of the fields above, which every request
	// reads, so that a rejection on one core does not take those lines
	// from the other.
	_ [64]byte
	// admitted counts purchases admitted here, ever; flushed is how many of
	// them were added to "access" on the primary (written by the flusher).
	admitted atomic.Int64
	flushed  atomic.Int64
	// rejected counts purchases turned away here, ever; rejectedFlushed is
	// the flusher's share of it.
	rejected        atomic.Int64
	rejectedFlushed atomic.Int64
	idle            int // refreshes since someone asked (refresher only)
	_               [64]byte
}

// lookup returns the cached sale for id, loading it synchronously the first
// time (one load per id, however many requests wait for it). It returns
// a sale that is not kept when the cache is full.
func (s *Server) lookup(id []byte) *sale {
	slot := &s.hot[maphash.Bytes(s.seed, id)%hotSales]
	e := slot.Load()
	if e == nil || e.id != string(id) {
		s.mu.RLock()
		if e = s.sales[string(id)]; e != nil {
			// Under the read lock: a sale leaves sales (and its slot)
			// under the write lock, so no slot holds a sale that left.
			slot.Store(e)
		}
		s.mu.RUnlock()
	}
	if e != nil {
		if !e.asked.Load() {
			e.asked.Store(true)
		}
		if !e.loaded.Load() {
			<-e.ready
		}
		return e
	}
	s.mu.Lock()
	if e = s.sales[string(id)]; e != nil {
		s.mu.Unlock()
		<-e.ready
		return e
	}
	e = s.newSale(string(id))
	keep := len(s.sales) < s.cfg.MaxSales
	if keep {
		s.sales[e.id] = e
	}
	s.mu.Unlock()
	e.asked.Store(true)
	func() {
		defer close(e.ready) // even if load panics, or waiters hang forever
		defer e.loaded.Store(true)
		s.load(e)
	}()
	if !keep && e.exists() {
		e = s.keepReal(e)
	}
	return e
}

// exists reports whether a loaded sale is known to Redis or the catalog.
func (e *sale) exists() bool {
	st, m := e.state.Load(), e.meta.Load()
	return st != nil && st.found || m != nil && m.found
}

// keepReal caches a real sale that found the cache full, in place of an id
// that is no sale: anyone can fill the cache with such ids, and a real sale
// left out would be re-read on every request, with its admissions neither
// capped nor counted. It returns the sale to use.
func (s *Server) keepReal(e *sale) *sale {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.sales[e.id]; old != nil {
		return old
	}
	for _, v := range s.sales {
		if st := v.state.Load(); st != nil && !v.exists() {
			s.unlist(v)
			s.sales[e.id] = e
			return e
		}
	}
	return e
}

// hotSales is the number of slots of Server.hot.
const hotSales = 256

// unlist moves e from sales to retired, and out of its hot slot. The
// caller holds s.mu.
func (s *Server) unlist(e *sale) {
	delete(s.sales, e.id)
	s.hot[maphash.String(s.seed, e.id)%hotSales].CompareAndSwap(e, nil)
	s.retired = append(s.retired, e)
}

func (s *Server) newSale(id string) *sale {
	e := &sale{id: id, ready: make(chan struct{})}
	e.fair.Init(s.qkeys, id)
	if s.cfg.SaleRate > 0 {
		e.limiter = rate.NewLimiter(s.saleShare())
	}
	return e
}

// load reads a new sale's catalog entry and Redis state, in that order:
// readStates asks the primary about a sale the catalog knows and the
// replica does not hold yet.
func (s *Server) load(e *sale) {
	ctx, cancel := context.WithTimeout(s.base, s.cfg.RedisTimeout)
	s.loadMeta(ctx, e)
	cancel()
	if states, err := s.readStates(s.base, []*sale{e}); err == nil {
		e.state.Store(states[0])
	}
	s.rebuildAPI(e)
}

// loadMeta reads e's catalog entry, keeping the old one (and its pointer,
// so its page stays cached) when nothing changed.
func (s *Server) loadMeta(ctx context.Context, e *sale) {
	sl, err := s.cfg.Catalog.Sale(ctx, e.id)
	var m *saleMeta
	switch {
	case err == nil:
		m = &saleMeta{found: true, sale: sl}
	case errors.Is(err, flashgate.ErrNotFound):
		m = &saleMeta{}
	default:
		s.log.Warn("gateway: reading the catalog", "sale", e.id, "err", err)
		return
	}
	if old := e.meta.Load(); old != nil && sameMeta(old, m) {
		return
	}
	m.vs = newVariantSet(m.sale.Variants)
	e.meta.Store(m)
}

func sameMeta(a, b *saleMeta) bool {
	if a.found != b.found {
		return false
	}
	x, y := a.sale, b.sale
	return x.Name == y.Name && x.PriceCents == y.PriceCents && x.Total == y.Total &&
		x.State == y.State && sameTime(x.StartsAt, y.StartsAt) && sameTime(x.EndsAt, y.EndsAt) &&
		slices.Equal(x.Variants, y.Variants)
}

func sameTime(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(*b)
}

// snapshot returns the cached sales (and the retired ones) for the
// background goroutines.
func (s *Server) snapshot(withRetired bool) []*sale {
	s.mu.RLock()
	defer s.mu.RUnlock()
	list := make([]*sale, 0, len(s.sales)+len(s.retired))
	for _, e := range s.sales {
		list = append(list, e)
	}
	if withRetired {
		list = append(list, s.retired...)
	}
	return list
}

// refreshState re-reads every cached sale's state in one pipeline, and
// drops the sales nobody asked about for SaleIdle (a tenth of it for ids
// that are no sale at all).
//
// A sale whose first load is still running is left out: that load owns
// its first state, and a read begun before its catalog entry was known
// would skip a fair sale's queue fields and could store an older state
// over the load's (the queue routes would answer 503 until the next tick).
func (s *Server) refreshState(ctx context.Context) {
	all := s.snapshot(false)
	list := all[:0]
	for _, e := range all {
		if e.loaded.Load() {
			list = append(list, e)
		}
	}
	if len(list) == 0 {
		return
	}
	states, err := s.readStates(ctx, list)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("gateway: refreshing sale state", "err", err)
		}
	}
	idleTicks := int(s.cfg.SaleIdle / s.cfg.StateRefresh)
	var drop []*sale
	for i, e := range list {
		if states != nil {
			e.state.Store(states[i])
			s.rebuildAPI(e)
		}
		if e.asked.Swap(false) {
			e.idle = 0
			continue
		}
		e.idle++
		limit := idleTicks
		if st := e.state.Load(); st != nil && !st.found {
			limit = idleTicks / 10
		}
		if e.idle > limit {
			drop = append(drop, e)
		}
	}
	if len(drop) > 0 {
		s.mu.Lock()
		for _, e := range drop {
			if s.sales[e.id] == e && !e.asked.Load() {
				s.unlist(e)
			}
		}
		s.mu.Unlock()
	}
}

// refreshCatalog re-reads the catalog entry of every cached sale that
// Redis or the catalog knows.
func (s *Server) refreshCatalog(ctx context.Context) {
	for _, e := range s.snapshot(false) {
		if ctx.Err() != nil {
			return
		}
		if st, m := e.state.Load(), e.meta.Load(); st != nil && !st.found && m != nil && !m.found {
			// No sale by that id, in Redis or the catalog: anyone can make
			// us cache thousands, so they cost no catalog reads. Creating
			// the sale puts it in Redis, and then its entry is read again.
			continue
		}
		c, cancel := context.WithTimeout(ctx, s.cfg.RedisTimeout)
		old := e.meta.Load()
		s.loadMeta(c, e)
		cancel()
		if e.meta.Load() != old {
			s.rebuildAPI(e)
		}
	}
}
