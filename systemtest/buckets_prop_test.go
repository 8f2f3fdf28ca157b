package systemtest

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/internal/testenv/testclock"
	"github.com/flashgate/flashgate/inventory"
	"github.com/flashgate/flashgate/lua"
	"github.com/flashgate/flashgate/ordersink"
	"github.com/flashgate/flashgate/sqldb"
)

// bucketModel is one rapid run over a bucketed sale: the tiers wired as in
// production (control plane, inventory, order sink) on a real redis-server
// and SQLite, the leader's fencing token, and every reserve that succeeded.
type bucketModel struct {
	ctx    context.Context
	rdb    *redis.Client
	db     *sqldb.DB
	clock  *testclock.Clock
	inv    *inventory.Service
	cp     *controlplane.Service
	sink   *ordersink.Drainer
	sale   string
	total  int64
	layout lua.Layout
	users  []string
	ok     map[string]reservation
	token  int64 // the current leader's fencing token
	fresh  int   // fresh users minted at settlement
	// inflight are spills an inventory began and stalled in (crashSpill):
	// each may go on later (lateSpill).
	inflight []spillStep
	crashes  int // order ids minted for crashed spills
	// unmarkLate are released spilled orders whose home marker a crashed
	// release left behind (crashRelease): the re-sync clears it.
	unmarkLate map[string]bool
	// variants are the sale's variants, nil for one stock; variantOf is
	// the variant each successful reserve named.
	variants  []flashgate.Variant
	variantOf map[string]string
}

// spillStep is a spill stalled after its claim (reserved false) or after
// its reserve in bucket (reserved true).
type spillStep struct {
	user, order, variant string
	home, bucket         int
	qty                  int64
	reserved             bool
}

func (m *bucketModel) newToken(t *rapid.T) {
	tok, err := m.rdb.Incr(m.ctx, lua.FenceKey()).Result()
	if err != nil {
		t.Fatal(err)
	}
	m.token = tok
}

func (m *bucketModel) reserve(t *rapid.T) {
	m.reserveAs(t, rapid.SampledFrom(m.users).Draw(t, "user"), rapid.Int64Range(1, 2).Draw(t, "qty"), m.variant(t))
}

// variant draws one of the sale's variant ids, "" for a sale of one stock.
func (m *bucketModel) variant(t *rapid.T) string {
	if len(m.variants) == 0 {
		return ""
	}
	return rapid.SampledFrom(m.variants).Draw(t, "variant").ID
}

// free is each bucket's unheld units of variant ("" the bucket's own).
func (m *bucketModel) free(t *rapid.T, variant string) []int64 {
	totals, booked, _ := m.stock(t)
	out := make([]int64, len(totals))
	for b := range totals {
		out[b] = totals[b] - booked[b]
	}
	if variant == "" {
		return out
	}
	for b, tag := range m.layout.Tags() {
		v, err := m.rdb.HMGet(m.ctx, lua.SaleKey(tag), lua.VariantField(variant, lua.FieldTotal), lua.VariantField(variant, lua.FieldBooked)).Result()
		if err != nil {
			t.Fatal(err)
		}
		out[b] = lua.Int(v[0]) - lua.Int(v[1])
	}
	return out
}

// reserveAs is one reserve of user (of variant, "" none) through the
// inventory.
func (m *bucketModel) reserveAs(t *rapid.T, user string, qty int64, variant string) {
	id, err := m.inv.Reserve(m.ctx, m.sale, user, variant, qty)
	var pe *flashgate.PurchasedError
	switch {
	case err == nil:
		if _, dup := m.ok[id]; dup {
			t.Fatalf("order id %s answered twice", id)
		}
		m.ok[id] = reservation{user: user, qty: qty}
		m.variantOf[id] = variant
	case errors.Is(err, flashgate.ErrSoldOut):
		// The spill path: sold out only while no bucket has qty free (of
		// the variant asked for).
		for b, f := range m.free(t, variant) {
			if f >= qty {
				t.Fatalf("%s (home %d) heard sold out for %d of %q while bucket %d has %d free", user, m.layout.Home(user), qty, variant, b, f)
			}
		}
	case errors.Is(err, flashgate.ErrUnavailable):
		// Only while a stalled spill of this user holds its claim.
		v := m.rdb.HGet(m.ctx, lua.BuyersKey(m.layout.Tag(m.layout.Home(user))), user).Val()
		if _, _, final, ok := lua.ParseMarker(v); !ok || final {
			t.Fatalf("reserve of %s: %v, with home entry %q", user, err, v)
		}
	case errors.As(err, &pe), errors.Is(err, flashgate.ErrBadRequest):
	default:
		t.Fatalf("reserve: %v", err)
	}
}

// crashSpill is an inventory that stalls (or dies) in the middle of a
// spill: after claiming the user's home bucket, or after reserving in a
// spill bucket too, before finalising the claim.
func (m *bucketModel) crashSpill(t *rapid.T) {
	user := rapid.SampledFrom(m.users).Draw(t, "user")
	h := m.layout.Home(user)
	b := rapid.IntRange(0, m.layout.N()-1).Draw(t, "spill bucket")
	if b == h {
		return
	}
	m.crashes++
	st := spillStep{user: user, order: "crash-" + m.sale + "-" + strconv.Itoa(m.crashes), home: h, bucket: b, qty: 1, variant: m.variant(t)}
	code, err := lua.Claim.Run(m.ctx, m.rdb, lua.ClaimKeys(m.layout.Tag(h)), user, st.order, m.clock.Now().UnixMilli()).Slice()
	if err != nil {
		t.Fatal(err)
	}
	if code[0] != int64(0) {
		return // the user holds something at home: no spill
	}
	if rapid.Bool().Draw(t, "reserved before the crash") {
		m.spillReserve(t, &st)
	}
	m.inflight = append(m.inflight, st)
}

// spillReserve is the spill reserve of st in its bucket.
func (m *bucketModel) spillReserve(t *rapid.T, st *spillStep) {
	v, err := lua.Reserve.Run(m.ctx, m.rdb, lua.SpillReserveKeys(m.layout.Tag(st.bucket)), st.order, st.user, st.qty,
		m.clock.Now().UnixMilli(), m.sale, st.bucket, lua.SpillArg, st.variant).Slice()
	if err != nil {
		t.Fatal(err)
	}
	if v[0] == int64(lua.ReserveOK) {
		m.ok[st.order] = reservation{user: st.user, qty: st.qty}
		m.variantOf[st.order] = st.variant
		st.reserved = true
	}
}

// lateSpill is a stalled spill going on: its reserve (refused when the
// leader settled its claim and fenced it), then its finalisation.
func (m *bucketModel) lateSpill(t *rapid.T) {
	if len(m.inflight) == 0 {
		return
	}
	i := rapid.IntRange(0, len(m.inflight)-1).Draw(t, "stalled spill")
	st := m.inflight[i]
	m.inflight = append(m.inflight[:i], m.inflight[i+1:]...)
	if rapid.Bool().Draw(t, "the buyer tries again first") {
		// Refused while the claim is pending; once the leader settled it,
		// the late spill must not give the buyer a second order.
		m.reserveAs(t, st.user, 1, st.variant)
		m.check(t)
	}
	if !st.reserved {
		m.spillReserve(t, &st)
	}
	if st.reserved {
		if err := lua.Finalize.Run(m.ctx, m.rdb, lua.MarkerKeys(m.layout.Tag(st.home)), st.user, st.order, st.bucket).Err(); err != nil {
			t.Fatal(err)
		}
	} else if err := lua.Unclaim.Run(m.ctx, m.rdb, lua.UnclaimKeys(m.layout.Tag(st.home)), st.user, st.order).Err(); err != nil {
		t.Fatal(err)
	}
}

// settleClaims is the leader settling the claims older than its bound.
func (m *bucketModel) settleClaims(t *rapid.T) {
	m.clock.Add(6 * time.Second)
	if _, _, err := m.cp.SettleClaims(m.ctx, m.sale); err != nil {
		t.Fatalf("settling claims: %v", err)
	}
}

// crashRelease is a release of a spilled order whose process dies after
// the units went back to the spill bucket and before the home marker went:
// the database holds the cancel and its queued release, which the next
// re-sync delivers again.
func (m *bucketModel) crashRelease(t *rapid.T) {
	var spilled []flashgate.Order
	for _, o := range m.live(t, flashgate.StatusPendingPayment) {
		if o.Bucket != m.layout.Home(o.UserID) {
			spilled = append(spilled, o)
		}
	}
	if len(spilled) == 0 {
		return
	}
	o := rapid.SampledFrom(spilled).Draw(t, "spilled order")
	if _, err := m.db.Transition(m.ctx, o.ID, []flashgate.OrderStatus{flashgate.StatusPendingPayment}, flashgate.StatusCancelled, m.clock.Now()); err != nil {
		t.Fatal(err)
	}
	if err := lua.Release.Run(m.ctx, m.rdb, lua.ReleaseKeys(m.layout.Tag(o.Bucket)), o.ID, o.UserID, o.Quantity, o.Variant).Err(); err != nil {
		t.Fatal(err)
	}
	m.unmarkLate[o.ID] = true
}

func (m *bucketModel) live(t *rapid.T, st ...flashgate.OrderStatus) []flashgate.Order {
	live, err := m.db.LiveOrders(m.ctx, m.sale)
	if err != nil {
		t.Fatal(err)
	}
	var out []flashgate.Order
	for _, o := range live {
		for _, s := range st {
			if o.Status == s {
				out = append(out, o)
			}
		}
	}
	return out
}

func (m *bucketModel) cancel(t *rapid.T) {
	live := m.live(t, flashgate.StatusPendingPayment, flashgate.StatusPaid)
	if len(live) == 0 {
		return
	}
	o := rapid.SampledFrom(live).Draw(t, "order")
	if _, err := m.cp.Cancel(m.ctx, o.ID, o.UserID); err != nil && !errors.Is(err, flashgate.ErrNotPayable) {
		t.Fatalf("cancel %s: %v", o.ID, err)
	}
}

func (m *bucketModel) payRefund(t *rapid.T) {
	live := m.live(t, flashgate.StatusPendingPayment, flashgate.StatusPaid)
	if len(live) == 0 {
		return
	}
	o := rapid.SampledFrom(live).Draw(t, "order")
	if o.Status == flashgate.StatusPendingPayment {
		if _, err := m.cp.Pay(m.ctx, o.ID, o.UserID); err != nil {
			t.Fatalf("pay %s: %v", o.ID, err)
		}
		return
	}
	if _, err := m.cp.Refund(m.ctx, o.ID); err != nil {
		t.Fatalf("refund %s: %v", o.ID, err)
	}
}

func (m *bucketModel) expire(t *rapid.T) {
	m.clock.Add(16 * time.Minute)
	if _, err := m.cp.ExpireDue(controlplane.WithFencingToken(m.ctx, m.token)); err != nil {
		t.Fatalf("expire: %v", err)
	}
}

func (m *bucketModel) drain(t *rapid.T) {
	if _, err := m.sink.DrainOnce(m.ctx); err != nil {
		t.Fatalf("DrainOnce: %v", err)
	}
}

func (m *bucketModel) resync(t *rapid.T) {
	if _, _, err := m.cp.Resync(controlplane.WithFencingToken(m.ctx, m.token), m.sale); err != nil {
		t.Fatalf("resync: %v", err)
	}
	// The pending releases went to Redis again: markers a crashed release
	// left are gone.
	clear(m.unmarkLate)
}

func (m *bucketModel) rebalance(t *rapid.T) {
	if _, err := m.cp.Rebalance(m.ctx, m.sale, m.token); err != nil {
		t.Fatalf("rebalance: %v", err)
	}
}

// crashMidMove is a leader that records a move in the ledger and shrinks
// the giving bucket (and maybe records the shrink), then dies before the
// grant; a new leader takes over with a higher token. The dead leader may
// still send its grant late: it must be refused or count once.
func (m *bucketModel) crashMidMove(t *rapid.T) {
	from := rapid.IntRange(0, m.layout.N()-1).Draw(t, "from")
	to := rapid.IntRange(0, m.layout.N()-1).Draw(t, "to")
	if from == to {
		return
	}
	want := rapid.Int64Range(0, m.total).Draw(t, "want")
	variant := m.variant(t)
	old := m.token
	v, err := lua.Ledger.Run(m.ctx, m.rdb, lua.LedgerKeys(m.sale), "begin", old, from, to, want, variant).Slice()
	if err != nil {
		t.Fatal(err)
	}
	m.newToken(t)
	if code, _ := v[0].(int64); code != 0 {
		return // a move is in flight already: the next rebalance finishes it
	}
	seq, _ := v[1].(int64)
	freed, err := lua.Shrink.Run(m.ctx, m.rdb, lua.SaleKeys(m.layout.Tag(from)), seq, want, variant).Int64()
	if err != nil {
		t.Fatal(err)
	}
	if rapid.Bool().Draw(t, "shrink recorded") {
		if err := lua.Ledger.Run(m.ctx, m.rdb, lua.LedgerKeys(m.sale), "shrunk", old, seq, freed).Err(); err != nil {
			t.Fatal(err)
		}
	}
	m.check(t)
	if rapid.Bool().Draw(t, "new leader first") {
		m.rebalance(t)
		m.check(t)
	}
	if rapid.Bool().Draw(t, "late stale grant") {
		if err := lua.Grant.Run(m.ctx, m.rdb, lua.SaleKeys(m.layout.Tag(to)), old, seq, freed, variant).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// loseBucket is Redis losing one bucket's keys once its stream drained (a
// failover that lost writes, say), and the leader's re-sync rebuilding it
// from the database (two passes: a rebuilt open bucket reopens on the
// second) with what no other bucket and no move in flight holds.
func (m *bucketModel) loseBucket(t *rapid.T) {
	for i := 0; i < 100; i++ {
		m.drain(t)
		if n, err := m.sink.Backlog(m.ctx); err != nil {
			t.Fatal(err)
		} else if n == 0 {
			break
		}
	}
	lost := rapid.IntRange(0, m.layout.N()-1).Draw(t, "lost bucket")
	tag := m.layout.Tag(lost)
	if err := m.rdb.Del(m.ctx, lua.SaleKey(tag), lua.BuyersKey(tag), lua.ReleasedKey(tag), lua.OrdersKey(tag), lua.ClaimsKey(tag)).Err(); err != nil {
		t.Fatal(err)
	}
	// A spill stalled across the loss of its claim (its home bucket) or of
	// the fence that settling its claim left in its bucket is the limit
	// docs/internals.md states: it is not modelled (it dies here).
	kept := m.inflight[:0]
	for _, st := range m.inflight {
		pending := m.rdb.HGet(m.ctx, lua.BuyersKey(m.layout.Tag(st.home)), st.user).Val() == lua.ClaimMarker(st.order)
		if st.home != lost && (st.bucket != lost || pending) {
			kept = append(kept, st)
		}
	}
	m.inflight = kept
	// The order sink meets a stream whose consumer group is gone as after
	// any Redis loss: here it restarts (its handling is the sink's own).
	m.sink = ordersink.New(m.rdb, m.db, ordersink.Config{Consumer: "sink", Logger: quiet})
	m.resync(t)
	m.resync(t)
}

// stock reads every bucket's total and booked, and the units a move in
// flight holds (freed from one bucket, not yet credited to another).
func (m *bucketModel) stock(t *rapid.T) (totals, booked []int64, inFlight int64) {
	totals, booked, inFlight, _ = m.stockOf(t)
	return totals, booked, inFlight
}

// stockOf is stock with the variant of the move in flight ("" none, or
// one stock).
func (m *bucketModel) stockOf(t *rapid.T) (totals, booked []int64, inFlight int64, variant string) {
	totals, booked = bucketBooked(t, m.ctx, m.rdb, m.layout)
	h, err := m.rdb.HMGet(m.ctx, lua.LedgerKey(m.sale), "seq", "phase", "from", "to", "freed", "variant").Result()
	if err != nil {
		t.Fatal(err)
	}
	str := func(x any) string { s, _ := x.(string); return s }
	n := func(x any) int64 { k, _ := strconv.ParseInt(str(x), 10, 64); return k }
	switch str(h[1]) {
	case "grant":
		// Credited already when the taker's gseq reached the move.
		to := int(n(h[3]))
		g, _ := m.rdb.HGet(m.ctx, lua.SaleKey(m.layout.Tag(to)), lua.FieldGrantSeq).Int64()
		if g < n(h[0]) {
			inFlight = n(h[4])
		}
	case "shrink":
		from := int(n(h[2]))
		v, _ := m.rdb.HMGet(m.ctx, lua.SaleKey(m.layout.Tag(from)), lua.FieldShrinkSeq, lua.FieldShrinkFreed).Result()
		to := int(n(h[3]))
		g, _ := m.rdb.HGet(m.ctx, lua.SaleKey(m.layout.Tag(to)), lua.FieldGrantSeq).Int64()
		if n(v[0]) == n(h[0]) && g < n(h[0]) {
			inFlight = n(v[1])
		}
	}
	return totals, booked, inFlight, str(h[5])
}

// checkVariants asserts the invariants of a sale sold in variants between
// any two steps: each bucket's total and booked the sums of its variants',
// no variant booked beyond its total in a bucket, and each variant's
// totals over the buckets its own (less a move of it in flight).
func (m *bucketModel) checkVariants(t *rapid.T, totals, booked []int64, inFlight int64, moving string) {
	sums := make([]int64, len(m.variants))
	vt := make([]int64, len(totals))
	vb := make([]int64, len(totals))
	for b, tag := range m.layout.Tags() {
		for i, v := range m.variants {
			h, err := m.rdb.HMGet(m.ctx, lua.SaleKey(tag), lua.VariantField(v.ID, lua.FieldTotal), lua.VariantField(v.ID, lua.FieldBooked)).Result()
			if err != nil {
				t.Fatal(err)
			}
			total, bk := lua.Int(h[0]), lua.Int(h[1])
			if bk < 0 || bk > total {
				t.Fatalf("bucket %d variant %s: booked %d of total %d", b, v.ID, bk, total)
			}
			sums[i] += total
			vt[b] += total
			vb[b] += bk
		}
		if vt[b] != totals[b] || vb[b] != booked[b] {
			t.Fatalf("bucket %d: total %d booked %d, its variants' sum to %d and %d", b, totals[b], booked[b], vt[b], vb[b])
		}
	}
	for i, v := range m.variants {
		want := v.Total
		if v.ID == moving {
			want -= inFlight
		}
		if sums[i] != want {
			t.Fatalf("variant %s: buckets hold %d, want %d (move of %q in flight: %d)", v.ID, sums[i], want, moving, inFlight)
		}
	}
}

// check asserts the invariants that hold between any two steps.
func (m *bucketModel) check(t *rapid.T) {
	totals, booked, inFlight, moving := m.stockOf(t)
	if m.variants != nil {
		m.checkVariants(t, totals, booked, inFlight, moving)
	}
	var sum int64
	for b := range totals {
		if booked[b] < 0 || booked[b] > totals[b] {
			t.Fatalf("bucket %d: booked %d of total %d", b, booked[b], totals[b])
		}
		sum += totals[b]
	}
	if sum > m.total {
		t.Fatalf("buckets' totals %v add up to %d, above the sale's %d", totals, sum, m.total)
	}
	if sum+inFlight != m.total {
		t.Fatalf("buckets' totals %v (%d) + in flight %d: got %d, want the sale's %d", totals, sum, inFlight, sum+inFlight, m.total)
	}
	// One live order per user across all buckets, in Redis and in the
	// database; a spill marker in a home bucket is no order.
	holder := map[string]int{}
	entries := make([]map[string]string, m.layout.N())
	for b, tag := range m.layout.Tags() {
		buyers, err := m.rdb.HGetAll(m.ctx, lua.BuyersKey(tag)).Result()
		if err != nil {
			t.Fatal(err)
		}
		entries[b] = buyers
		for u, v := range buyers {
			if _, _, _, isMarker := lua.ParseMarker(v); isMarker {
				if b != m.layout.Home(u) {
					t.Fatalf("user %s: marker %q outside the home bucket, in %d", u, v, b)
				}
				continue
			}
			if prev, dup := holder[u]; dup {
				t.Fatalf("user %s is a buyer in buckets %d and %d", u, prev, b)
			}
			holder[u] = b
		}
	}
	// An order outside its buyer's home has a marker naming it at home
	// (a claim while its spill is unfinished).
	for b := range entries {
		for u, v := range entries[b] {
			if _, _, _, isMarker := lua.ParseMarker(v); isMarker || b == m.layout.Home(u) {
				continue
			}
			hv := entries[m.layout.Home(u)][u]
			if o, _, _, ok := lua.ParseMarker(hv); !ok || o != v {
				t.Fatalf("user %s holds %s in bucket %d, home %d holds %q", u, v, b, m.layout.Home(u), hv)
			}
		}
	}
	live, err := m.db.LiveOrders(m.ctx, m.sale)
	if err != nil {
		t.Fatal(err)
	}
	users := map[string]bool{}
	liveOf := map[string]int64{}
	var liveUnits int64
	for _, o := range live {
		if users[o.UserID] {
			t.Fatalf("user %s holds two live rows", o.UserID)
		}
		users[o.UserID] = true
		liveUnits += o.Quantity
		r, ok := m.ok[o.ID]
		if !ok || r.user != o.UserID || r.qty != o.Quantity || m.variantOf[o.ID] != o.Variant {
			t.Fatalf("row %+v: got no matching reserve (%+v of %q, %v)", o, r, m.variantOf[o.ID], ok)
		}
		liveOf[o.Variant] += o.Quantity
		if h := m.layout.Home(o.UserID); o.Bucket != h {
			hv := entries[h][o.UserID]
			if id, _, _, ok := lua.ParseMarker(hv); !ok || id != o.ID {
				t.Fatalf("row %s of %s in bucket %d: home %d holds %q, want a marker of it", o.ID, o.UserID, o.Bucket, h, hv)
			}
		}
	}
	// A final marker names a reserved order that is live (or not yet a
	// row), unless a crashed release left it for the re-sync.
	for h := range entries {
		for u, v := range entries[h] {
			id, b, final, ok := lua.ParseMarker(v)
			if !ok || !final {
				continue
			}
			if r, reserved := m.ok[id]; !reserved || r.user != u {
				t.Fatalf("user %s: marker %q names no reserve of theirs", u, v)
			}
			o, err := m.db.Order(m.ctx, id)
			if err == nil && (!o.Status.Live() && !m.unmarkLate[id] || o.Bucket != b) {
				t.Fatalf("user %s: marker %q names row %+v", u, v, o)
			}
		}
	}
	if liveUnits > m.total {
		t.Fatalf("live units %d above the sale's %d", liveUnits, m.total)
	}
	for _, v := range m.variants {
		if liveOf[v.ID] > v.Total {
			t.Fatalf("variant %s: %d live units, above its %d", v.ID, liveOf[v.ID], v.Total)
		}
	}
}

// settle drains everything, re-syncs, finishes any move, then buys every
// unit left with fresh buyers: every unit was sold or buyable, and every
// successful reserve is one row.
func (m *bucketModel) settle(t *rapid.T) {
	for i := 0; ; i++ {
		m.drain(t)
		n, err := m.sink.Backlog(m.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if i == 100 {
			t.Fatalf("backlog still %d", n)
		}
	}
	// The stalled spills' inventories give up; the leader settles the
	// claims they left once they are stale.
	m.inflight = nil
	m.clock.Add(6 * time.Second)
	m.resync(t)
	m.rebalance(t)
	m.check(t)
	if _, _, inFlight := m.stock(t); inFlight != 0 {
		t.Fatalf("after the leader's step %d units are still in flight", inFlight)
	}
	for id, r := range m.ok {
		o, err := m.db.Order(m.ctx, id)
		if err != nil {
			t.Fatalf("reserve %s never became a row: %v", id, err)
		}
		if o.UserID != r.user || o.Quantity != r.qty {
			t.Fatalf("row %s: got %+v, want %+v", id, o, r)
		}
	}
	// While any bucket has a free unit (of some variant), a buyer of it
	// whose home bucket has none buys it (through the spill path), else any
	// fresh buyer does.
	variants := []string{""}
	if m.variants != nil {
		variants = variants[:0]
		for _, v := range m.variants {
			variants = append(variants, v.ID)
		}
	}
	for k := 0; ; k++ {
		if k > int(m.total)+1 {
			t.Fatalf("settling: more buyers than units")
		}
		var free int64
		empty, some, variant := -1, -1, ""
		for _, v := range variants {
			fs := m.free(t, v)
			var vfree int64
			for _, f := range fs {
				vfree += f
			}
			if vfree == 0 {
				continue
			}
			free += vfree
			variant = v
			for b, f := range fs {
				if f == 0 && empty < 0 {
					empty = b
				}
				if f > 0 && some < 0 {
					some = b
				}
			}
			break
		}
		if free == 0 {
			break
		}
		target := empty
		if target < 0 {
			target = some
		}
		var u string
		for {
			m.fresh++
			u = "fresh" + strconv.Itoa(m.fresh)
			if m.layout.Home(u) == target {
				break
			}
		}
		id, err := m.inv.Reserve(m.ctx, m.sale, u, variant, 1)
		if err != nil {
			t.Fatalf("free of %q per bucket %v: a fresh buyer of bucket %d got %v", variant, m.free(t, variant), target, err)
		}
		m.ok[id] = reservation{user: u, qty: 1}
		m.variantOf[id] = variant
	}
	_, booked, _ := m.stock(t)
	var sold int64
	for _, n := range booked {
		sold += n
	}
	if sold != m.total {
		t.Fatalf("at settlement: sold %d, want every one of %d units", sold, m.total)
	}
	m.drain(t)
	m.check(t)
}

// TestBucketInvariants interleaves reserves, cancels, payments, refunds,
// expiries, drains, re-syncs, rebalancing steps, leader crashes between
// the two halves of a move (with the dead leader's grant arriving late) and
// a bucket lost by Redis and rebuilt from the database on
// a bucketed sale, with the spill path (a buyer whose home bucket is sold
// out buys in another bucket), inventories stalled or dead between its
// steps (and going on late), the leader settling stale claims, and
// releases of spilled orders (one that dies before its home marker went),
// checking after every step that no bucket holds more than its total, the
// buckets' totals add up to the sale's (less what a move holds in flight,
// never more), one live order per user across all buckets, every order
// outside its buyer's home marked there, sold out only while no bucket has
// the units, and at the end that every 201 is one row and that while any
// bucket has a free unit a buyer whose home bucket is empty still buys it.
// Half the runs sell the sale in two or three variants: every reserve,
// spill, release and move then names one, and the checks hold per variant
// too (each bucket's figures the sums of its variants', each variant's
// totals over the buckets its own, less a move of it in flight, its live
// units within its total, every row of the variant its reserve named).
func TestBucketInvariants(t *testing.T) {
	rs := redistest.Start(t)
	rdb := rs.Client(t)
	ctx := context.Background()
	// One database for every run (each run its own sale): an expiry also
	// expires earlier runs' orders, whose sales Redis no longer holds.
	db, err := sqldb.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "fg.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	run := 0
	rapid.Check(t, func(t *rapid.T) {
		run++
		if err := rdb.FlushDB(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		var err error
		m := &bucketModel{ctx: ctx, rdb: rdb, db: db, clock: testclock.New(time.Now()), sale: "run" + strconv.Itoa(run),
			ok: map[string]reservation{}, unmarkLate: map[string]bool{}, variantOf: map[string]string{}}
		m.inv = inventory.New(rdb, inventory.Config{Logger: quiet, Clock: m.clock})
		m.cp, err = controlplane.New(controlplane.Config{Redis: rdb, Store: db, Releaser: m.inv, Clock: m.clock,
			AdminToken: "bucket-test-token-0123456789", Logger: quiet, PersistWait: -1, PaymentWindow: 15 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		m.sink = ordersink.New(rdb, db, ordersink.Config{Consumer: "sink", Logger: quiet})
		n := rapid.IntRange(2, 4).Draw(t, "buckets")
		m.total = rapid.Int64Range(int64(n), 12).Draw(t, "total")
		// Half the runs sell the sale in 2-3 variants, of random totals.
		if nv := rapid.IntRange(0, 3).Draw(t, "variants"); nv >= 2 && int64(nv) <= m.total {
			left := m.total
			for i := range nv {
				vt := left - int64(nv-1-i)
				if i < nv-1 {
					vt = rapid.Int64Range(1, left-int64(nv-1-i)).Draw(t, "variant total")
				}
				m.variants = append(m.variants, flashgate.Variant{ID: "v" + strconv.Itoa(i), Name: "V", Total: vt})
				left -= vt
			}
		}
		created, err := m.cp.CreateSale(ctx, flashgate.Sale{ID: m.sale, Name: "Prop", PriceCents: 5, Total: m.total, Buckets: n, PerUser: 2, Variants: m.variants})
		if err != nil {
			t.Fatal(err)
		}
		m.layout = lua.Layout{Sale: m.sale, Salts: created.BucketSalts}
		if err := m.cp.Start(ctx, m.sale); err != nil {
			t.Fatal(err)
		}
		for i := rapid.IntRange(2, 12).Draw(t, "users"); i > 0; i-- {
			m.users = append(m.users, "u"+strconv.Itoa(i))
		}
		m.newToken(t)
		actions := map[string]func(*rapid.T){
			"reserve": m.reserve, "cancel": m.cancel, "pay/refund": m.payRefund, "expire": m.expire,
			"drain": m.drain, "resync": m.resync, "rebalance": m.rebalance, "crash mid-move": m.crashMidMove,
			"lose a bucket": m.loseBucket, "crash mid-spill": m.crashSpill, "late spill": m.lateSpill,
			"settle claims": m.settleClaims, "crash mid-release": m.crashRelease,
		}
		names := []string{"cancel", "crash mid-move", "crash mid-release", "crash mid-spill", "drain", "expire", "late spill",
			"lose a bucket", "pay/refund", "rebalance", "reserve", "reserve", "resync", "settle claims"}
		for steps := rapid.IntRange(1, 30).Draw(t, "steps"); steps > 0; steps-- {
			actions[rapid.SampledFrom(names).Draw(t, "action")](t)
			m.check(t)
		}
		m.settle(t)
	})
}
