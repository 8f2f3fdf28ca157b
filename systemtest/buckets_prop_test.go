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
	"github.com/flashgate/flashgate/internal/redistest"
	"github.com/flashgate/flashgate/internal/testclock"
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
}

func (m *bucketModel) newToken(t *rapid.T) {
	tok, err := m.rdb.Incr(m.ctx, lua.FenceKey()).Result()
	if err != nil {
		t.Fatal(err)
	}
	m.token = tok
}

func (m *bucketModel) reserve(t *rapid.T) {
	user := rapid.SampledFrom(m.users).Draw(t, "user")
	qty := rapid.Int64Range(1, 2).Draw(t, "qty")
	id, err := m.inv.Reserve(m.ctx, m.sale, user, qty)
	var pe *flashgate.PurchasedError
	switch {
	case err == nil:
		if _, dup := m.ok[id]; dup {
			t.Fatalf("order id %s answered twice", id)
		}
		m.ok[id] = reservation{user: user, qty: qty}
	case errors.Is(err, flashgate.ErrSoldOut), errors.As(err, &pe), errors.Is(err, flashgate.ErrBadRequest):
	default:
		t.Fatalf("reserve: %v", err)
	}
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
	if _, err := m.cp.ExpireDue(m.ctx); err != nil {
		t.Fatalf("expire: %v", err)
	}
}

func (m *bucketModel) drain(t *rapid.T) {
	if _, err := m.sink.DrainOnce(m.ctx); err != nil {
		t.Fatalf("DrainOnce: %v", err)
	}
}

func (m *bucketModel) resync(t *rapid.T) {
	if _, _, err := m.cp.Resync(m.ctx, m.sale); err != nil {
		t.Fatalf("resync: %v", err)
	}
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
	tag := m.layout.Tag(rapid.IntRange(0, m.layout.N()-1).Draw(t, "lost bucket"))
	if err := m.rdb.Del(m.ctx, lua.SaleKey(tag), lua.BuyersKey(tag), lua.ReleasedKey(tag), lua.OrdersKey(tag)).Err(); err != nil {
		t.Fatal(err)
	}
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
	// database.
	holder := map[string]int{}
	for b, tag := range m.layout.Tags() {
		buyers, err := m.rdb.HKeys(m.ctx, lua.BuyersKey(tag)).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range buyers {
			if prev, dup := holder[u]; dup {
				t.Fatalf("user %s is a buyer in buckets %d and %d", u, prev, b)
			}
			holder[u] = b
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
		if o.Bucket != m.layout.Home(o.UserID) {
			t.Fatalf("row %s: bucket %d, want %s's home %d", o.ID, o.Bucket, o.UserID, m.layout.Home(o.UserID))
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
	// Every free unit of every bucket sells to buyers whose home it is.
	totals, booked, _ := m.stock(t)
	for b := range totals {
		for free := totals[b] - booked[b]; free > 0; {
			m.fresh++
			u := "fresh" + strconv.Itoa(m.fresh)
			if m.layout.Home(u) != b {
				continue
			}
			if _, err := m.inv.Reserve(m.ctx, m.sale, u, 1); err != nil {
				t.Fatalf("bucket %d with %d free units: a fresh buyer got %v", b, free, err)
			}
			free--
		}
	}
	_, booked, _ = m.stock(t)
	var sold int64
	for _, n := range booked {
		sold += n
	}
	if sold != m.total {
		t.Fatalf("at settlement: sold %d, want every one of %d units", sold, m.total)
	}
}

// TestBucketInvariants interleaves reserves, cancels, payments, refunds,
// expiries, drains, re-syncs, rebalancing steps, leader crashes between
// the two halves of a move (with the dead leader's grant arriving late) and
// a bucket lost by Redis and rebuilt from the database on
// a bucketed sale, checking after every step that no bucket holds more
// than its total, the buckets' totals add up to the sale's (less what a
// move holds in flight, never more), one live order per user across all
// buckets, and at the end that every 201 is one row and every unit sells.
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
			ok: map[string]reservation{}}
		m.inv = inventory.New(rdb, inventory.Config{Logger: quiet})
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
			"lose a bucket": m.loseBucket,
		}
		names := []string{"cancel", "crash mid-move", "drain", "expire", "lose a bucket", "pay/refund", "rebalance", "reserve", "resync"}
		for steps := rapid.IntRange(1, 30).Draw(t, "steps"); steps > 0; steps-- {
			actions[rapid.SampledFrom(names).Draw(t, "action")](t)
			m.check(t)
		}
		m.settle(t)
	})
}
