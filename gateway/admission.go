package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"hash/maphash"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"
	"golang.org/x/time/rate"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/jsonstr"
	"github.com/flashgate/flashgate/lua"
)

// stateFields are the sale hash fields one refresh reads, in this order.
var stateFields = []string{
	lua.FieldTotal, lua.FieldBooked, lua.FieldStart, lua.FieldClosed,
	lua.FieldCount, lua.FieldAccess, lua.FieldPrice, lua.FieldResume,
	lua.FieldLayout, // last: see sumBuckets
}

// saleState is one reading of a sale's Redis hash. It is immutable once
// stored in sale.state.
type saleState struct {
	found                               bool // the hash exists
	start, closed                       bool
	resume                              bool // paused by a failover until re-synced
	total, booked, count, access, price int64
	// base is sale.flushed when the reading started: admissions counted
	// locally after it are not in access yet.
	base int64
	// q is a fair queue's reading (queue.go); nil for a first-come sale.
	q *queueView
}

// saleMeta is one reading of a sale's catalog entry; immutable once stored.
type saleMeta struct {
	found bool
	sale  flashgate.Sale
}

// apiDoc is the precomputed answer to GET /api/sales/{id}.
type apiDoc struct {
	status int
	body   []byte
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

	// admitted counts purchases admitted here, ever; flushed is how many of
	// them were added to "access" on the primary (written by the flusher).
	admitted atomic.Int64
	flushed  atomic.Int64
	// rejected counts purchases turned away here, ever; rejectedFlushed is
	// the flusher's share of it.
	rejected        atomic.Int64
	rejectedFlushed atomic.Int64

	fair fairCache // queue.go

	asked   atomic.Bool // someone asked since the last refresh
	idle    int         // refreshes since someone asked (refresher only)
	limiter *rate.Limiter
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
	e.meta.Store(m)
}

func sameMeta(a, b *saleMeta) bool {
	if a.found != b.found {
		return false
	}
	x, y := a.sale, b.sale
	return x.Name == y.Name && x.PriceCents == y.PriceCents && x.Total == y.Total &&
		x.State == y.State && sameTime(x.StartsAt, y.StartsAt) && sameTime(x.EndsAt, y.EndsAt)
}

func sameTime(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(*b)
}

// readStates reads the state of each sale with one pipeline on the replica
// while it is healthy (see replicaUsable), else on the primary. Each
// attempt has its own RedisTimeout.
func (s *Server) readStates(parent context.Context, list []*sale) ([]*saleState, error) {
	try := func(c redis.UniversalClient) ([]*saleState, error) {
		ctx, cancel := context.WithTimeout(parent, s.cfg.RedisTimeout)
		defer cancel()
		return s.readFrom(ctx, c, list)
	}
	if s.cfg.Replica == s.cfg.Primary {
		return try(s.cfg.Primary)
	}
	if s.replicaUsable(parent) {
		states, err := try(s.cfg.Replica)
		if err == nil {
			if s.replicaFailed.Swap(false) {
				s.log.Info("gateway: replica in sync again, reading from it")
			}
			s.confirmMissing(parent, list, states)
			return states, nil
		}
		s.replicaDown(err)
	}
	s.m.replicaFallback()
	return try(s.cfg.Primary)
}

// confirmMissing re-reads on the primary the sales that the replica does
// not hold but the catalog knows, replacing their states: a replica lags
// its primary, and "not found" for a sale just created would turn its
// first buyers away for good (a 404 is final). Ids no one created cost no primary
// read. On error the replica's reading stands.
func (s *Server) confirmMissing(parent context.Context, list []*sale, states []*saleState) {
	var idx []int
	var miss []*sale
	for i, st := range states {
		if m := list[i].meta.Load(); !st.found && m != nil && m.found {
			idx = append(idx, i)
			miss = append(miss, list[i])
		}
	}
	if len(miss) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(parent, s.cfg.RedisTimeout)
	defer cancel()
	fresh, err := s.readFrom(ctx, s.cfg.Primary, miss)
	if err != nil {
		return
	}
	for k, i := range idx {
		states[i] = fresh[k]
	}
}

func (s *Server) readFrom(ctx context.Context, c redis.UniversalClient, list []*sale) ([]*saleState, error) {
	bases := make([]int64, len(list))
	cmds := make([]*redis.SliceCmd, len(list))
	var qcmds []*redis.SliceCmd
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, e := range list {
			bases[i] = e.flushed.Load()
			cmds[i] = p.HMGet(ctx, lua.SaleKey(e.id), stateFields...)
		}
		qcmds = queueReads(ctx, p, list) // queue.go
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]*saleState, len(list))
	for i, cmd := range cmds {
		v := cmd.Val()
		st := &saleState{base: bases[i]}
		if len(v) == len(stateFields) && v[0] != nil {
			st.found = true
			st.total = num(v[0])
			st.booked = num(v[1])
			st.start = num(v[2]) == 1
			st.closed = num(v[3]) == 1
			st.count = num(v[4])
			st.access = num(v[5])
			st.price = num(v[6])
			st.resume = num(v[7]) >= 1
		}
		out[i] = st
	}
	applyQueue(qcmds, out)
	if err := s.sumBuckets(ctx, c, list, cmds, out); err != nil {
		return nil, err
	}
	return out, nil
}

func num(v any) int64 {
	s, ok := v.(string)
	if !ok {
		return 0
	}
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
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
func (s *Server) refreshState(ctx context.Context) {
	list := s.snapshot(false)
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

// flush adds the admissions and rejections counted since the last flush to
// each sale's hash on the primary, in one pipeline.
func (s *Server) flush(ctx context.Context) { s.flushCounts(ctx, true) }

// flushTick is the flusher's step: admissions every time, rejections with
// them or once RejectedFlushInterval has passed since they last went.
func (s *Server) flushTick(ctx context.Context) {
	now := s.clock.Now().UnixNano()
	due := now >= s.rejectedDue.Load()
	if due {
		s.rejectedDue.Store(now + int64(s.cfg.RejectedFlushInterval))
	}
	s.flushCounts(ctx, due)
}

// flushCounts adds the admissions counted since the last flush to each
// sale's hash on the primary in one pipeline, and the rejections of every
// sale when rejected is true, else only of those with admissions to add.
func (s *Server) flushCounts(ctx context.Context, rejected bool) {
	list := s.snapshot(true)
	type delta struct {
		e                  *sale
		admitted, rejected int64
	}
	var ds []delta
	for _, e := range list {
		a := e.admitted.Load() - e.flushed.Load()
		r := e.rejected.Load() - e.rejectedFlushed.Load()
		if a == 0 && !rejected {
			r = 0
		}
		if a != 0 || r != 0 {
			if st := e.state.Load(); st == nil || !st.found {
				// No hash to count in: incrementing would create one.
				e.flushed.Add(a)
				e.rejectedFlushed.Add(r)
				continue
			}
			ds = append(ds, delta{e, a, r})
		}
	}
	if len(ds) > 0 {
		// lua.Tally adds only to a hash that has its total: after a Redis
		// loss, counters must not recreate a partial sale hash, which the
		// re-sync would take for the whole sale. A count whose sale is gone
		// is dropped (the rebuild starts access again from 0).
		ctx, cancel := context.WithTimeout(ctx, s.cfg.RedisTimeout)
		cmds := make([]*redis.Cmd, len(ds))
		tally := func(eval bool) error {
			_, err := s.cfg.Primary.Pipelined(ctx, func(p redis.Pipeliner) error {
				for i, d := range ds {
					if eval && !redis.HasErrorPrefix(cmds[i].Err(), "NOSCRIPT") {
						continue
					}
					keys := lua.SaleKeys(d.e.id)
					if eval {
						cmds[i] = lua.Tally.Eval(ctx, p, keys, d.admitted, d.rejected)
					} else {
						cmds[i] = lua.Tally.EvalSha(ctx, p, keys, d.admitted, d.rejected)
					}
				}
				return nil
			})
			return err
		}
		err := tally(false)
		if redis.HasErrorPrefix(err, "NOSCRIPT") {
			err = tally(true) // a restarted or flushed Redis: send the source
		}
		cancel()
		failed := 0
		for i, d := range ds {
			if cmds[i].Err() != nil {
				failed++
				continue
			}
			d.e.flushed.Add(d.admitted)
			d.e.rejectedFlushed.Add(d.rejected)
		}
		if failed > 0 && s.base.Err() == nil {
			s.log.Warn("gateway: flushing admission counters", "sales", failed, "err", err)
		}
	}
	s.mu.Lock()
	if len(s.retired) > 0 {
		kept := s.retired[:0]
		for _, e := range s.retired {
			if e.admitted.Load() != e.flushed.Load() || e.rejected.Load() != e.rejectedFlushed.Load() {
				kept = append(kept, e)
			}
		}
		s.retired = kept
	}
	s.mu.Unlock()
}

// Local verdicts on a purchase, from the cached state.
const (
	verdictAdmit = iota
	verdictUnavailable
	verdictNotFound
	verdictClosed
	verdictNotStarted
	verdictSoldOut
)

// judge answers a purchase from the cached state alone.
func judge(st *saleState, admitted int64) int {
	switch {
	case st == nil:
		return verdictUnavailable
	case !st.found:
		return verdictNotFound
	case st.closed:
		return verdictClosed
	case !st.start && st.resume:
		// An open sale paused while it is rebuilt after a failover: a
		// moment's unavailability, not "not started" (which buyers take
		// as final).
		return verdictUnavailable
	case !st.start:
		return verdictNotStarted
	case st.booked >= st.total:
		return verdictSoldOut
	case st.q == nil && st.access+admitted-st.base >= st.count:
		// A fair queue's frontier is its cap (queue.go).
		return verdictSoldOut
	}
	return verdictAdmit
}

// admit counts one admission for e unless the cap is reached.
func (e *sale) admit() int {
	for i := 0; i < 1000; i++ {
		n := e.admitted.Load()
		if v := judge(e.state.Load(), n); v != verdictAdmit {
			return v
		}
		if e.admitted.CompareAndSwap(n, n+1) {
			return verdictAdmit
		}
	}
	return verdictSoldOut
}

// publicState is the state GET /api/sales/{id} reports.
func publicState(st *saleState, m *saleMeta) flashgate.SaleState {
	if st == nil || !st.found {
		if m.sale.State != "" {
			return m.sale.State
		}
		return flashgate.StateUpcoming
	}
	switch {
	case st.closed:
		return flashgate.StateClosed
	case st.booked >= st.total:
		return flashgate.StateSoldOut
	case st.start || st.resume:
		return flashgate.StateOpen
	}
	return flashgate.StateUpcoming
}

// rebuildAPI recomputes e's GET /api/sales/{id} answer, keeping the old
// bytes when nothing changed.
func (s *Server) rebuildAPI(e *sale) {
	st, m := e.state.Load(), e.meta.Load()
	missing := st == nil || !st.found // Redis never answered, or has no such sale
	var d apiDoc
	switch {
	case missing && m == nil:
		// The catalog never answered either (it is down): an upcoming sale
		// may be there, so say so rather than guess "not found".
		d = apiDoc(ansUnavail)
	case missing && !m.found:
		d = apiDoc(ansNotFound)
	default:
		if m == nil {
			m = &saleMeta{}
		}
		d = apiDoc{status: fasthttp.StatusOK, body: saleJSON(e.id, st, m)}
	}
	if old := e.api.Load(); old != nil && old.status == d.status && string(old.body) == string(d.body) {
		return
	}
	e.api.Store(&d)
}

func saleJSON(id string, st *saleState, m *saleMeta) []byte {
	name, price, total := m.sale.Name, m.sale.PriceCents, m.sale.Total
	remaining := total
	if st != nil && st.found {
		total = st.total
		remaining = st.total - st.booked
		if !m.found {
			price = st.price
		}
	}
	remaining = max(remaining, 0)
	b := make([]byte, 0, 192)
	b = append(b, `{"id":`...)
	b = jsonstr.Append(b, id)
	b = append(b, `,"name":`...)
	nb, _ := json.Marshal(name)
	b = append(b, nb...)
	b = append(b, `,"price_cents":`...)
	b = strconv.AppendInt(b, price, 10)
	b = append(b, `,"total":`...)
	b = strconv.AppendInt(b, total, 10)
	b = append(b, `,"remaining":`...)
	b = strconv.AppendInt(b, remaining, 10)
	b = append(b, `,"state":"`...)
	b = append(b, publicState(st, m)...)
	b = append(b, `","starts_at":`...)
	if t := m.sale.StartsAt; t != nil {
		b = append(b, '"')
		b = t.UTC().AppendFormat(b, time.RFC3339)
		b = append(b, '"')
	} else {
		b = append(b, "null"...)
	}
	b = appendQueueJSON(b, st, m) // queue.go
	return append(b, '}')
}

// allowUser spends one of user's tokens.
func (s *Server) allowUser(user string, now time.Time) bool {
	if s.users == nil {
		return true
	}
	return s.users.allow(maphash.String(s.seed, user), now.UnixNano())
}
