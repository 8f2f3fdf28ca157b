package controlplane

import (
	"context"
	"net"
	"reflect"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/internal/testenv/testclock"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/lua"
)

// bucketBuyer reserves for users in their home buckets of a bucketed sale,
// as the inventory tier does, and counts each user's orders.
type bucketBuyer struct {
	t    *testing.T
	rdb  redis.UniversalClient
	l    lua.Layout
	seq  int
	wins map[string]int
}

// buy tries one unit for user in their home bucket; it returns the code.
func (k *bucketBuyer) buy(user string) int64 {
	k.t.Helper()
	k.seq++
	b := k.l.Home(user)
	v, err := lua.Reserve.Run(context.Background(), k.rdb, lua.ReserveKeys(k.l.Tag(b)),
		"o"+strconv.Itoa(k.seq), user, 1, t0.UnixMilli(), k.l.Sale, b).Slice()
	if err != nil {
		k.t.Fatalf("reserve: %v", err)
	}
	code := v[0].(int64)
	if code == lua.ReserveOK {
		k.wins[user]++
	}
	return code
}

// usersOf returns n users whose home is bucket b, named prefix + index.
func usersOf(l lua.Layout, b, n int, prefix string) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		if u := prefix + strconv.Itoa(i); l.Home(u) == b {
			out = append(out, u)
		}
	}
	return out
}

// bucketTotals returns the total of every bucket of l.
func bucketTotals(t *testing.T, c redis.Cmdable, l lua.Layout) []int64 {
	t.Helper()
	out := make([]int64, l.N())
	for b := range out {
		out[b] = field(t, c, l.Tag(b), lua.FieldTotal)
	}
	return out
}

// TestBucketFailoverRebuildsBeforeSelling is
// TestFailoverRebuildsBeforeSelling on a bucketed sale of 3 buckets of 5
// units. In each bucket: one unit sold and drained (A), one sold and
// replicated but not yet drained (C), then, while the replica's link is
// held back, two sold and drained (B). The primary dies (kill -9) and the
// replica is promoted: every bucket's primary is new, holds A and C, and
// lost B. The first tick must pause every bucket (a marker per bucket: the
// sale's own marker pauses nothing a buyer reserves in) and rebuild each
// only once C is drained: a rebuild before counts the rows (A, B) but not
// C, which the sink commits afterwards, and the bucket sells C's unit again.
func TestBucketFailoverRebuildsBeforeSelling(t *testing.T) {
	ctx := context.Background()
	primary := redistest.Start(t, "--repl-diskless-sync-delay", "0")
	link := redistest.StartProxy(t, primary.Addr)
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(link.Port))
	replica.WaitReplica(t)
	var cur atomic.Value
	cur.Store(primary.Addr)
	rdb := redis.NewClient(&redis.Options{
		Addr: "primary", MaxRetries: 2,
		Dialer: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, cur.Load().(string))
		},
	})
	t.Cleanup(func() { _ = rdb.Close() })
	db := openDB(t, sqliteDSN(t))
	svc, err := New(Config{Redis: rdb, Store: db, Releaser: &luaReleaser{RDB: rdb}, AdminToken: testToken,
		Clock: testclock.New(t0), Logger: quietLogger(), PersistWait: -1, NodeID: "test"})
	if err != nil {
		t.Fatal(err)
	}
	lastResync := time.Now()
	tick := func() { svc.tick(ctx, &lastResync) }

	const sale, total, n = "bf", 15, 3
	created, err := svc.CreateSale(ctx, flashgate.Sale{ID: sale, Name: "B", PriceCents: 500, Total: total, Buckets: n})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(ctx, sale); err != nil {
		t.Fatal(err)
	}
	l := lua.Layout{Sale: sale, Salts: created.BucketSalts}
	tick() // leads, and marks every slot's primary
	k := &bucketBuyer{t: t, rdb: rdb, l: l, wins: map[string]int{}}
	// persistAfter drains, as the order sink does, the entries of each
	// bucket's stream after the id in after (all of them when empty).
	persistAfter := func(after map[string]string) {
		for _, tag := range l.Tags() {
			from := "-"
			if id := after[tag]; id != "" {
				from = "(" + id
			}
			msgs, err := rdb.XRange(ctx, lua.OrdersKey(tag), from, "+").Result()
			if err != nil {
				t.Fatalf("XRANGE: %v", err)
			}
			var orders []flashgate.Order
			var ids []string
			for _, m := range msgs {
				e, _ := lua.ReadEntry(m.Values)
				b, _ := strconv.Atoi(e.Bucket)
				orders = append(orders, flashgate.Order{ID: e.Order, SaleID: sale, UserID: e.User,
					Quantity: 1, PriceCents: 500, Status: flashgate.StatusPendingPayment, CreatedAt: t0, Bucket: b})
				ids = append(ids, m.ID)
			}
			if len(ids) == 0 {
				continue
			}
			if _, err := db.InsertOrders(ctx, orders); err != nil {
				t.Fatalf("InsertOrders: %v", err)
			}
			if err := rdb.XDel(ctx, lua.OrdersKey(tag), ids...).Err(); err != nil {
				t.Fatalf("XDEL: %v", err)
			}
		}
	}
	persist := func() { persistAfter(nil) }
	var groupA, groupC, groupB []string
	for b := range n {
		us := usersOf(l, b, 4, "u")
		groupA, groupC, groupB = append(groupA, us[0]), append(groupC, us[1]), append(groupB, us[2:]...)
	}
	buyAllOf := func(users []string) {
		for _, u := range users {
			if code := k.buy(u); code != lua.ReserveOK {
				t.Fatalf("%s: code %d, want OK", u, code)
			}
		}
	}
	buyAllOf(groupA)
	persist()
	buyAllOf(groupC)
	if err := rdb.Wait(ctx, 1, 5000).Err(); err != nil {
		t.Fatalf("WAIT: %v", err)
	}
	lastC := map[string]string{}
	for _, tag := range l.Tags() {
		m, err := rdb.XRevRangeN(ctx, lua.OrdersKey(tag), "+", "-", 1).Result()
		if err != nil || len(m) != 1 {
			t.Fatalf("the last entry of %s: %v, %v", tag, m, err)
		}
		lastC[tag] = m[0].ID
	}
	link.Pause()
	buyAllOf(groupB)
	persistAfter(lastC) // B only: C stays in the stream

	primary.Stop()
	rc := replica.Client(t)
	if err := rc.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatalf("REPLICAOF NO ONE: %v", err)
	}
	cur.Store(replica.Addr)
	if got := field(t, rc, l.Tag(0), lua.FieldBooked); got != 2 {
		t.Fatalf("promoted replica's bucket 0 booked: got %d, want 2 (A and C; B lost)", got)
	}

	// The first tick on the new primary, before a re-sync is due: no
	// bucket may sell until it is rebuilt.
	lastResync = time.Now()
	tick()
	for b := range n {
		if got, _ := rc.HGet(ctx, lua.SaleKey(l.Tag(b)), lua.FieldStart).Result(); got != "0" {
			t.Errorf("bucket %d start after the first tick on the new primary: got %q, want \"0\" (paused)", b, got)
		}
	}
	buyAll := func(round string) {
		for _, u := range append(append(append([]string{}, groupA...), groupB...), groupC...) {
			k.buy(u)
		}
		for i := range 30 {
			k.buy(round + strconv.Itoa(i))
		}
	}
	buyAll("n")
	persist()
	for range 3 {
		lastResync = lastResync.Add(-time.Hour) // due
		tick()
		persist()
	}
	buyAll("m")
	persist()
	if _, _, err := svc.Resync(ctx, sale); err != nil {
		t.Fatalf("Resync: %v", err)
	}

	live, err := db.LiveOrders(ctx, sale)
	if err != nil {
		t.Fatal(err)
	}
	byUser := map[string]int{}
	for _, o := range live {
		byUser[o.UserID]++
	}
	if len(live) != total {
		t.Errorf("live orders after the failover: got %d, want %d (every unit sold once, the 3 the rebuild freed too)", len(live), total)
	}
	for u, c := range k.wins {
		if c > 1 || byUser[u] > 1 {
			t.Errorf("user %s: %d reserves, %d rows; want at most 1", u, c, byUser[u])
		}
	}
	var sum int64
	for b, tt := range bucketTotals(t, rc, l) {
		sum += tt
		if bk := field(t, rc, l.Tag(b), lua.FieldBooked); bk > tt {
			t.Errorf("bucket %d: booked %d over its total %d", b, bk, tt)
		}
	}
	if sum > total {
		t.Errorf("buckets' totals: got %d, want at most %d", sum, total)
	}
}

// TestClusterBucketFailover moves the slot of one bucket of a 3-bucket sale
// to its replica on a real Redis Cluster (CLUSTER FAILOVER), and makes the
// new owner lose what asynchronous replication can lose: a reserve (a
// buyer and its unit) and a shrink whose units the ledger had credited to
// bucket 1. The next tick pauses and rebuilds that bucket alone: the other
// buckets sell on, the lost buyer is back, its total is what the other
// buckets do not hold (no unit twice), and it reopens at the next re-sync.
func TestClusterBucketFailover(t *testing.T) {
	e := newEnvOn(t, "own-cluster", sqliteDSN(t), nil)
	ctx, cl, cc, svc := e.ctx, e.cluster, e.rdb.(*redis.ClusterClient), e.svc
	lastResync := time.Now()
	tick := func() { svc.tick(ctx, &lastResync) }
	const sale, total = "cbf", 30
	l := e.startBucketed(flashgate.Sale{ID: sale, Name: "B", PriceCents: 500, Total: total, Buckets: 3})
	tick()
	k := &bucketBuyer{t: t, rdb: cc, l: l, wins: map[string]int{}}
	zero, one := usersOf(l, 0, 6, "z"), usersOf(l, 1, 6, "w")
	for _, u := range append(append([]string{}, zero[:4]...), one[:4]...) {
		if code := k.buy(u); code != lua.ReserveOK {
			t.Fatalf("%s: code %d", u, code)
		}
	}
	for _, tag := range l.Tags() {
		e.persist(tag)
	}
	// A move of 3 units from bucket 0 to bucket 1, recorded done: bucket
	// 0's total 10 → 7, bucket 1's 10 → 13.
	if err := cc.HIncrBy(ctx, lua.SaleKey(l.Tag(1)), lua.FieldTotal, 3).Err(); err != nil {
		t.Fatal(err)
	}
	tag0 := l.Tag(0)
	clusterFailover(t, ctx, cl, cc, lua.SaleKey(tag0))
	// The new owner lost zero[3]'s reserve (its buyer entry and unit) and
	// never saw the shrink: its total is 10, so the buckets' totals add up
	// to 33 of 30.
	if err := cc.HDel(ctx, lua.BuyersKey(tag0), zero[3]).Err(); err != nil {
		t.Fatal(err)
	}
	if err := cc.HIncrBy(ctx, lua.SaleKey(tag0), lua.FieldBooked, -1).Err(); err != nil {
		t.Fatal(err)
	}
	if err := cc.HIncrBy(ctx, lua.SaleKey(tag0), lua.FieldReserved, -1).Err(); err != nil {
		t.Fatal(err)
	}

	lastResync = time.Now()
	testwait.Eventually(t, 10*time.Second, func() bool {
		tick()
		v, _ := cc.HMGet(ctx, lua.SaleKey(tag0), lua.FieldStart, lua.FieldResume).Result()
		return v[0] == "0" && v[1] == "1"
	}, "bucket 0 to be rebuilt on the new primary")
	if code := k.buy(zero[4]); code != lua.ReservePaused {
		t.Errorf("a buyer of the rebuilt bucket before the next re-sync: code %d, want %d (paused)", code, lua.ReservePaused)
	}
	if code := k.buy(one[4]); code != lua.ReserveOK {
		t.Errorf("a buyer of bucket 1 during the recovery of bucket 0: code %d, want %d (sells on)", code, lua.ReserveOK)
	}
	totals := bucketTotals(t, cc, l)
	if totals[0] != 7 || totals[0]+totals[1]+totals[2] != total {
		t.Errorf("bucket totals after the rebuild: got %v, want [7 13 10] (what the others do not hold)", totals)
	}
	if got := field(t, cc, tag0, lua.FieldBooked); got != 4 {
		t.Errorf("bucket 0 booked after the rebuild: got %d, want 4 (from the rows)", got)
	}
	lastResync = lastResync.Add(-time.Hour)
	tick()
	if code := k.buy(zero[3]); code != lua.ReservePurchased {
		t.Errorf("%s, whose reserve the new primary lost, buying again: code %d, want %d (already purchased)", zero[3], code, lua.ReservePurchased)
	}
	if code := k.buy(zero[5]); code != lua.ReserveOK {
		t.Errorf("a new buyer of bucket 0 after the next re-sync: code %d, want %d (reopened)", code, lua.ReserveOK)
	}
}

// TestLedgerFailoverRepaired: the ledger's primary failed over and lost its
// last moves (seq 0) while a bucket carries move 5, which freed 2 units that
// no bucket was credited with. The next tick moves the ledger to 5, with the
// 2 units in flight back to their giver, so no later move is numbered 5
// (its shrink would answer the units already freed) and nothing stays
// stranded.
func TestLedgerFailoverRepaired(t *testing.T) {
	e := newEnv(t, sqliteDSN(t), nil)
	const sale = "lf"
	l := e.startBucketed(flashgate.Sale{ID: sale, Name: "L", Total: 12, Buckets: 3})
	lastResync := time.Now()
	e.svc.tick(e.ctx, &lastResync)
	if err := e.rdb.HSet(e.ctx, lua.SaleKey(l.Tag(0)), lua.FieldTotal, 2, lua.FieldShrinkSeq, 5, lua.FieldShrinkFreed, 2).Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.Set(e.ctx, lua.LedgerPrimaryKey(sale), "an-older-primary", 0).Err(); err != nil {
		t.Fatal(err)
	}
	e.svc.tick(e.ctx, &lastResync)
	v, err := lua.Ledger.Run(e.ctx, e.rdb, lua.LedgerKeys(sale), "get", 0).Slice()
	if err != nil {
		t.Fatal(err)
	}
	// A move in flight reads [1, seq, phase, from, to, want, freed, variant].
	want := []any{int64(1), int64(5), "grant", int64(0), int64(0)}
	if len(v) != 8 || !reflect.DeepEqual(v[:5], want) || v[6] != int64(2) {
		t.Fatalf("ledger after the repair: got %v, want move 5 in flight, 2 units from bucket 0 back to it", v)
	}
	if _, err := e.svc.Rebalance(e.ctx, sale, e.svc.fence.Load()); err != nil {
		t.Fatal(err)
	}
	totals := bucketTotals(t, e.rdb, l)
	if sum := totals[0] + totals[1] + totals[2]; sum != 12 {
		t.Errorf("buckets' totals after the repaired move: got %v (sum %d), want 12", totals, sum)
	}
}

// TestBucketFailoverLostBucket: the new primary of bucket 2 lacks the
// bucket altogether (its hash never replicated). The recovery must leave
// it to the re-sync's rebuild of a lost bucket, not write a partial hash
// (a total and no price: orders at 0 cents): after the next passes bucket
// 2 sells again at the sale's price, and the buckets' totals add up to the
// sale's.
func TestBucketFailoverLostBucket(t *testing.T) {
	e := newEnv(t, sqliteDSN(t), nil)
	const sale, total = "lb", 12
	l := e.startBucketed(flashgate.Sale{ID: sale, Name: "L", Total: total, Buckets: 3, PriceCents: 500})
	lastResync := time.Now()
	tick := func() { e.svc.tick(e.ctx, &lastResync) }
	tick()
	tag := l.Tag(2)
	if err := e.rdb.Del(e.ctx, lua.SaleKey(tag)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.Set(e.ctx, lua.PrimaryKey(tag), "an-older-primary", 0).Err(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		lastResync = lastResync.Add(-time.Hour)
		tick()
	}
	k := &bucketBuyer{t: t, rdb: e.rdb, l: l, wins: map[string]int{}}
	if code := k.buy(usersOf(l, 2, 1, "x")[0]); code != lua.ReserveOK {
		t.Errorf("a buyer of the lost bucket after the re-syncs: code %d, want %d", code, lua.ReserveOK)
	}
	if got := field(t, e.rdb, tag, lua.FieldPrice); got != 500 {
		t.Errorf("the lost bucket's price after the re-syncs: got %d, want 500", got)
	}
	var sum int64
	for _, tt := range bucketTotals(t, e.rdb, l) {
		sum += tt
	}
	if sum != total {
		t.Errorf("buckets' totals: got %d, want %d", sum, total)
	}
}

// TestNoRebalanceWhileBucketRecovers: bucket 1's primary changed and its
// stream has not drained yet, so it waits paused for its rebuild, whose
// total is computed from what the other buckets hold. Meanwhile a
// rebalancing step must move nothing — here it would move units from the
// paused bucket (whose booked may lack reserves its new primary lost) to
// the sold-out bucket 0.
func TestNoRebalanceWhileBucketRecovers(t *testing.T) {
	e := newEnv(t, sqliteDSN(t), nil)
	const sale = "nr"
	l := e.startBucketed(flashgate.Sale{ID: sale, Name: "N", Total: 12, Buckets: 3})
	lastResync := time.Now()
	e.svc.tick(e.ctx, &lastResync)
	k := &bucketBuyer{t: t, rdb: e.rdb, l: l, wins: map[string]int{}}
	for _, u := range usersOf(l, 0, 4, "z") { // bucket 0 sells out
		k.buy(u)
	}
	k.buy(usersOf(l, 1, 1, "w")[0]) // an entry in bucket 1's stream
	if err := e.rdb.Set(e.ctx, lua.PrimaryKey(l.Tag(1)), "an-older-primary", 0).Err(); err != nil {
		t.Fatal(err)
	}
	e.svc.tick(e.ctx, &lastResync)
	if got, _ := e.rdb.HGet(e.ctx, lua.SaleKey(l.Tag(1)), lua.FieldStart).Result(); got != "0" {
		t.Fatalf("bucket 1 start: got %q, want \"0\" (paused until its stream drains)", got)
	}
	before := bucketTotals(t, e.rdb, l)
	moved, err := e.svc.Rebalance(e.ctx, sale, e.svc.fence.Load())
	if err != nil {
		t.Fatal(err)
	}
	if after := bucketTotals(t, e.rdb, l); moved != 0 || !slices.Equal(after, before) {
		t.Errorf("a rebalancing step during the recovery: moved %d, totals %v → %v; want nothing moved", moved, before, after)
	}
}
