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
}

// spillStep is a spill stalled after its claim (reserved false) or after
// its reserve in bucket (reserved true).
type spillStep struct {
	user, order  string
	home, bucket int
	qty          int64
	reserved     bool
}

func (m *bucketModel) newToken(t *rapid.T) {
	tok, err := m.rdb.Incr(m.ctx, lua.FenceKey()).Result()
	if err != nil {
		t.Fatal(err)
	}
	m.token = tok
}

func (m *bucketModel) reserve(t *rapid.T) {
	m.reserveAs(t, rapid.SampledFrom(m.users).Draw(t, "user"), rapid.Int64Range(1, 2).Draw(t, "qty"))
}

// reserveAs is one reserve of user through the inventory.
func (m *bucketModel) reserveAs(t *rapid.T, user string, qty int64) {
	id, err := m.inv.Reserve(m.ctx, m.sale, user, "", qty)
	var pe *flashgate.PurchasedError
	switch {
	case err == nil:
		if _, dup := m.ok[id]; dup {
			t.Fatalf("order id %s answered twice", id)
		}
		m.ok[id] = reservation{user: user, qty: qty}
	case errors.Is(err, flashgate.ErrSoldOut):
		// The spill path: sold out only while no bucket has qty free.
		totals, booked, _ := m.stock(t)
		for b := range totals {
			if totals[b]-booked[b] >= qty {
				t.Fatalf("%s (home %d) heard sold out for %d while bucket %d has %d of %d free", user, m.layout.Home(user), qty, b, totals[b]-booked[b], totals[b])
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
	st := spillStep{user: user, order: "crash-" + m.sale + "-" + strconv.Itoa(m.crashes), home: h, bucket: b, qty: 1}
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
		m.clock.Now().UnixMilli(), m.sale, st.bucket, lua.SpillArg).Slice()
	if err != nil {
		t.Fatal(err)
	}
	if v[0] == int64(lua.ReserveOK) {
		m.ok[st.order] = reservation{user: st.user, qty: st.qty}
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
		m.reserveAs(t, st.user, 1)
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
	if err := lua.Release.Run(m.ctx, m.rdb, lua.ReleaseKeys(m.layout.Tag(o.Bucket)), o.ID, o.UserID, o.Quantity).Err(); err != nil {
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
	old := m.token
	v, err := lua.Ledger.Run(m.ctx, m.rdb, lua.LedgerKeys(m.sale), "begin", old, from, to, want).Slice()
	if err != nil {
		t.Fatal(err)
	}
	m.newToken(t)
	if code, _ := v[0].(int64); code != 0 {
		return // a move is in flight already: the next rebalance finishes it
	}
	seq, _ := v[1].(int64)
	freed, err := lua.Shrink.Run(m.ctx, m.rdb, lua.SaleKeys(m.layout.Tag(from)), seq, want).Int64()
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
		if err := lua.Grant.Run(m.ctx, m.rdb, lua.SaleKeys(m.layout.Tag(to)), old, seq, freed).Err(); err != nil {
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
	totals, booked = bucketBooked(t, m.ctx, m.rdb, m.layout)
	h, err := m.rdb.HMGet(m.ctx, lua.LedgerKey(m.sale), "seq", "phase", "from", "to", "freed").Result()
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
	return totals, booked, inFlight
}

// check asserts the invariants that hold between any two steps.
func (m *bucketModel) check(t *rapid.T) {
	totals, booked, inFlight := m.stock(t)
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
	var liveUnits int64
	for _, o := range live {
		if users[o.UserID] {
			t.Fatalf("user %s holds two live rows", o.UserID)
		}
		users[o.UserID] = true
		liveUnits += o.Quantity
		r, ok := m.ok[o.ID]
		if !ok || r.user != o.UserID || r.qty != o.Quantity {
			t.Fatalf("row %+v: got no matching reserve (%+v, %v)", o, r, ok)
		}
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
	// While any bucket has a free unit, a buyer whose home bucket is empty
	// buys it (through the spill path), else any fresh buyer does.
	for {
		totals, booked, _ := m.stock(t)
		var free int64
		empty, some := -1, -1
		for b := range totals {
			f := totals[b] - booked[b]
			free += f
			if f == 0 && empty < 0 {
				empty = b
			}
			if f > 0 && some < 0 {
				some = b
			}
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
		id, err := m.inv.Reserve(m.ctx, m.sale, u, "", 1)
		if err != nil {
			t.Fatalf("buckets' totals %v, booked %v: a fresh buyer of bucket %d got %v", totals, booked, target, err)
		}
		m.ok[id] = reservation{user: u, qty: 1}
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
			ok: map[string]reservation{}, unmarkLate: map[string]bool{}}
		m.inv = inventory.New(rdb, inventory.Config{Logger: quiet, Clock: m.clock})
		m.cp, err = controlplane.New(controlplane.Config{Redis: rdb, Store: db, Releaser: m.inv, Clock: m.clock,
			AdminToken: "bucket-test-token-0123456789", Logger: quiet, PersistWait: -1, PaymentWindow: 15 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		m.sink = ordersink.New(rdb, db, ordersink.Config{Consumer: "sink", Logger: quiet})
		n := rapid.IntRange(2, 4).Draw(t, "buckets")
		m.total = rapid.Int64Range(int64(n), 12).Draw(t, "total")
		created, err := m.cp.CreateSale(ctx, flashgate.Sale{ID: m.sale, Name: "Prop", PriceCents: 5, Total: m.total, Buckets: n, PerUser: 2})
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
