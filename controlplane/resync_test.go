package controlplane

import (
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/lua"
)

// TestRefundExpiryResync: after k refunds and expiries (whose releases
// failed) and a re-sync, exactly k more units can be reserved by new users,
// never more, and the admission cap read from a replica went up.
func TestRefundExpiryResync(t *testing.T) {
	for _, backend := range redisBackends {
		t.Run(backend, func(t *testing.T) { testRefundExpiryResync(t, backend) })
	}
}

func testRefundExpiryResync(t *testing.T, backend string) {
	e := newEnvOn(t, backend, sqliteDSN(t), nil)
	// The gateways' reads: a replica, or a ReadOnly cluster client.
	var rc redis.Cmdable
	if e.cluster != nil {
		rc = e.cluster.Client(t, true)
	} else {
		replica := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(e.srv.Port))
		replica.WaitReplica(t)
		rc = replica.Client(t)
	}

	const sale, total = "drop", 10
	e.openSale(sale, total, 0)
	if got := e.reserveMany(sale, "first", total+5); got != total {
		t.Fatalf("first wave reserved %d, want %d", got, total)
	}
	orders := e.persist(sale)
	// The gateways admitted exactly the cap: no more traffic gets in.
	capBefore := flashgate.AdmitCap(total, 0)
	if err := e.rdb.HSet(e.ctx, lua.SaleKey(sale), lua.FieldAccess, capBefore).Err(); err != nil {
		t.Fatal(err)
	}
	for _, o := range orders[:8] {
		if _, err := e.svc.Pay(e.ctx, o.ID, o.UserID); err != nil {
			t.Fatalf("Pay(%s): %v", o.ID, err)
		}
	}
	for _, o := range orders[:2] {
		got, err := e.svc.Refund(e.ctx, o.ID)
		if err != nil || got.Status != flashgate.StatusRefunded {
			t.Fatalf("Refund(%s) = %v, %v; want refunded", o.ID, got.Status, err)
		}
	}
	// The two unpaid orders expire, but their releases fail: only the
	// re-sync can give those units back.
	e.rel.Fail.Store(true)
	e.clock.Set(t0.Add(16 * time.Minute))
	n, err := e.svc.ExpireDue(e.ctx)
	if err != nil || n != 2 {
		t.Fatalf("ExpireDue = %d, %v; want 2, nil", n, err)
	}
	e.rel.Fail.Store(false)
	if got, want := field(t, e.rdb, sale, lua.FieldBooked), int64(total-2); got != want {
		t.Fatalf("booked before re-sync = %d, want %d (refunds released, expiries not)", got, want)
	}

	before, after, err := e.svc.Resync(e.ctx, sale)
	if err != nil {
		t.Fatalf("Resync: %v", err)
	}
	const k = 4
	if after.Booked != total-k || after.Remaining != k {
		t.Fatalf("after re-sync booked %d remaining %d, want %d and %d", after.Booked, after.Remaining, total-k, k)
	}
	wantCap := capBefore + 6 // access + ceil(4 × 1.5)
	if before.AdmissionCap != capBefore || after.AdmissionCap != wantCap {
		t.Fatalf("admission cap %d → %d, want %d → %d", before.AdmissionCap, after.AdmissionCap, capBefore, wantCap)
	}
	testwait.Eventually(t, 10*time.Second, func() bool {
		return field(t, rc, sale, lua.FieldCount) == wantCap
	}, "the replica's admission cap to rise")
	if got := e.reserveMany(sale, "second", 20); got != k {
		t.Fatalf("after re-sync new users reserved %d units, want exactly %d", got, k)
	}
	if got := field(t, e.rdb, sale, lua.FieldBooked); got != total {
		t.Fatalf("booked = %d, want %d", got, total)
	}
	// Sold out: another re-sync (with the new orders persisted or not)
	// never raises the cap.
	e.persist(sale)
	_, after2, err := e.svc.Resync(e.ctx, sale)
	if err != nil {
		t.Fatal(err)
	}
	if after2.Booked != total || after2.AdmissionCap != wantCap {
		t.Fatalf("sold-out re-sync: booked %d cap %d, want %d and %d", after2.Booked, after2.AdmissionCap, total, wantCap)
	}
	if got := e.reserveMany(sale, "third", 5); got != 0 {
		t.Fatalf("sold out, yet %d more reserved", got)
	}
	if got := e.rel.N.Load(); got != 2 {
		t.Fatalf("releases done = %d, want 2 (the refunds)", got)
	}
}

// TestResyncCountsUnpersisted: units reserved but not yet in the database
// stay booked across a re-sync (booked = L + reserved − P).
func TestResyncCountsUnpersisted(t *testing.T) {
	for _, backend := range redisBackends {
		t.Run(backend, func(t *testing.T) { testResyncCountsUnpersisted(t, backend) })
	}
}

func testResyncCountsUnpersisted(t *testing.T, backend string) {
	e := newEnvOn(t, backend, sqliteDSN(t), nil)
	e.openSale("s", 10, 0)
	if got := e.reserveMany("s", "a", 6); got != 6 {
		t.Fatalf("reserved %d, want 6", got)
	}
	persisted := e.persist("s")
	e.reserveMany("s", "b", 2) // reserved, still in the stream
	if _, err := e.svc.Refund(e.ctx, persisted[0].ID); err != nil {
		t.Fatal(err)
	}
	_, after, err := e.svc.Resync(e.ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if after.Booked != 7 {
		t.Fatalf("booked = %d, want 7 (5 live rows + 2 unpersisted)", after.Booked)
	}
	if after.Reserved != 8 {
		t.Fatalf("reserved = %d, want 8", after.Reserved)
	}
}

// TestFlushAllResync: after FLUSHALL mid-sale a re-sync rebuilds every sale
// from the database; buyers from before still cannot buy again, and the sale
// never oversells. On a Redis Cluster the three sales live on the three
// primaries and the flush empties every one.
func TestFlushAllResync(t *testing.T) {
	for _, backend := range redisBackends {
		t.Run(backend, func(t *testing.T) { testFlushAllResync(t, backend) })
	}
}

func testFlushAllResync(t *testing.T, backend string) {
	e := newEnvOn(t, backend, sqliteDSN(t), nil)
	const total = 20
	e.openSale("open", total, 2)
	if _, err := e.svc.CreateSale(e.ctx, flashgate.Sale{ID: "later", Name: "Later", Total: 5, PerUser: 2, PriceCents: 900}); err != nil {
		t.Fatal(err)
	}
	e.openSale("shut", 3, 0)
	if err := e.svc.Stop(e.ctx, "shut"); err != nil {
		t.Fatal(err)
	}
	if backend == "cluster" {
		if n := e.primaries("open", "later", "shut"); n != 3 {
			t.Fatalf("the three sales are on %d primaries, want 3", n)
		}
	}
	if got := e.reserveMany("open", "early", 10); got != 10 {
		t.Fatalf("reserved %d, want 10", got)
	}
	early := e.persist("open")
	if _, err := e.svc.Cancel(e.ctx, early[0].ID, early[0].UserID); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	e.flushAll()
	e.svc.resyncAll(e.ctx)

	// The rebuilt open sale waits one pass: a sink may still commit a batch
	// it read before the flush. Two such orders land now, after the snapshot.
	if got := field(t, e.rdb, "open", lua.FieldStart); got != 0 {
		t.Fatalf("open sale right after the rebuild: start = %d, want 0 (paused one pass)", got)
	}
	// Paused, not "not started": the buyer is told to retry (503).
	if code, _ := e.reserve("open", "eager"); code != lua.ReservePaused {
		t.Fatalf("reserve right after the rebuild: code %d, want %d (paused)", code, lua.ReservePaused)
	}
	now := time.Now()
	if _, err := e.db.InsertOrders(e.ctx, []flashgate.Order{
		{ID: "inflight-1", SaleID: "open", UserID: "inflight-1", Quantity: 1, CreatedAt: now, UpdatedAt: now},
		{ID: "inflight-2", SaleID: "open", UserID: "inflight-2", Quantity: 1, CreatedAt: now, UpdatedAt: now},
	}); err != nil {
		t.Fatal(err)
	}
	e.svc.resyncAll(e.ctx)

	for _, c := range []struct {
		sale                string
		start, closed, book int64
		total, perUser      int64
	}{
		{"open", 1, 0, 11, total, 1},
		{"later", 0, 0, 0, 5, 2},
		{"shut", 0, 1, 0, 3, 1},
	} {
		for f, want := range map[string]int64{lua.FieldStart: c.start, lua.FieldClosed: c.closed, lua.FieldBooked: c.book, lua.FieldTotal: c.total, lua.FieldPerUser: c.perUser} {
			if got := field(t, e.rdb, c.sale, f); got != want {
				t.Errorf("sale %s: %s = %d, want %d", c.sale, f, got, want)
			}
		}
		// A closed sale with nothing left to settle is archived by the
		// second pass, and leaves the set then (archive.go).
		if ok, _ := e.rdb.SIsMember(e.ctx, lua.SalesKey(), c.sale).Result(); !ok {
			if row, _ := e.db.Sale(e.ctx, c.sale); !row.Archived {
				t.Errorf("sale %s missing from %s", c.sale, lua.SalesKey())
			}
		}
	}
	for _, o := range early[1:] {
		code, got := e.reserve("open", o.UserID)
		if code != lua.ReservePurchased || got != o.ID {
			t.Fatalf("buyer %s after flush: code %d order %q, want %d and %q", o.UserID, code, got, lua.ReservePurchased, o.ID)
		}
	}
	// The cancelled buyer may buy again: that is one of the 9 free units.
	if code, _ := e.reserve("open", early[0].UserID); code != lua.ReserveOK {
		t.Fatalf("cancelled buyer after flush: code %d, want %d", code, lua.ReserveOK)
	}
	if got := e.reserveMany("open", "late", 30); got != 8 {
		t.Fatalf("after flush new users reserved %d, want 8", got)
	}
	e.persist("open")
	fig, err := e.db.Figures(e.ctx, "open")
	if err != nil {
		t.Fatal(err)
	}
	if fig.LiveUnits != total || field(t, e.rdb, "open", lua.FieldBooked) != total {
		t.Fatalf("live units %d, booked %d, want both %d", fig.LiveUnits, field(t, e.rdb, "open", lua.FieldBooked), total)
	}
	st, err := e.svc.SaleStatus(e.ctx, "open")
	if err != nil {
		t.Fatal(err)
	}
	if st.State != flashgate.StateSoldOut || st.Remaining != 0 || st.Orders.Persisted != 21 {
		t.Fatalf("status %+v, want sold_out, 0 remaining, 21 rows", st)
	}
}

// TestPayExpireRace races Pay against ExpireDue 1000 times (half on SQLite,
// half on PostgreSQL): each order ends either paid and still holding its
// unit, or expired and released; never both paid and resold.
func TestPayExpireRace(t *testing.T) {
	for _, db := range []struct {
		name string
		dsn  func(*testing.T) string
	}{{"sqlite", sqliteDSN}, {"postgres", postgresDSN}} {
		t.Run(db.name, func(t *testing.T) {
			t.Parallel()
			raceRounds(t, db.dsn(t), 10, 50)
		})
	}
}

func raceRounds(t *testing.T, dsn string, rounds, per int) {
	e := newEnv(t, dsn, nil)
	total := int64(rounds * per)
	const sale = "race"
	e.openSale(sale, total, 0)
	paid := map[string]bool{}
	var all []flashgate.Order
	for r := 0; r < rounds; r++ {
		e.clock.Set(t0.Add(time.Duration(r) * time.Hour))
		if got := e.reserveMany(sale, "r"+strconv.Itoa(r), per); got != per {
			t.Fatalf("round %d reserved %d, want %d", r, got, per)
		}
		orders := e.persist(sale)
		e.clock.Set(t0.Add(time.Duration(r)*time.Hour + 16*time.Minute)) // every order is due
		var wg sync.WaitGroup
		var mu sync.Mutex
		gate := make(chan struct{})
		for _, o := range orders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-gate
				_, err := e.svc.Pay(e.ctx, o.ID, o.UserID)
				switch {
				case err == nil:
					mu.Lock()
					paid[o.ID] = true
					mu.Unlock()
				case !errors.Is(err, flashgate.ErrNotPayable):
					t.Errorf("Pay(%s): %v", o.ID, err)
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			if _, err := e.svc.ExpireDue(e.ctx); err != nil {
				t.Errorf("ExpireDue: %v", err)
			}
		}()
		close(gate)
		wg.Wait()
		// Orders neither paid nor expired by the race expire now.
		if _, err := e.svc.ExpireDue(e.ctx); err != nil {
			t.Fatal(err)
		}
		all = append(all, orders...)
	}
	released, err := e.rdb.SMembers(e.ctx, lua.ReleasedKey(sale)).Result()
	if err != nil {
		t.Fatal(err)
	}
	isReleased := map[string]bool{}
	for _, id := range released {
		isReleased[id] = true
	}
	for _, o := range all {
		row, err := e.db.Order(e.ctx, o.ID)
		if err != nil {
			t.Fatal(err)
		}
		want := flashgate.StatusExpired
		if paid[o.ID] {
			want = flashgate.StatusPaid
		}
		if row.Status != want {
			t.Errorf("order %s is %s, but Pay said %s", o.ID, row.Status, want)
		}
		if paid[o.ID] == isReleased[o.ID] {
			t.Errorf("order %s: paid %v, released %v", o.ID, paid[o.ID], isReleased[o.ID])
		}
	}
	nPaid := int64(len(paid))
	t.Logf("%d races: %d paid, %d expired", len(all), nPaid, int64(len(all))-nPaid)
	if got := field(t, e.rdb, sale, lua.FieldBooked); got != nPaid {
		t.Fatalf("booked = %d, want %d paid", got, nPaid)
	}
	if _, _, err := e.svc.Resync(e.ctx, sale); err != nil {
		t.Fatal(err)
	}
	if got := e.reserveMany(sale, "resale", int(total-nPaid)+10); int64(got) != total-nPaid {
		t.Fatalf("resold %d units, want exactly %d", got, total-nPaid)
	}
}

// TestResyncRedisOlderThanDatabase: Redis comes back from a snapshot taken
// before some orders were persisted (reserved < persisted units). The
// re-sync must give those buyers back their entries, or each could reserve a
// second live order (which the database's unique index would then drop: a
// 201 without a row).
func TestResyncRedisOlderThanDatabase(t *testing.T) {
	for _, backend := range redisBackends {
		t.Run(backend, func(t *testing.T) { testResyncRedisOlderThanDatabase(t, backend) })
	}
}

func testResyncRedisOlderThanDatabase(t *testing.T, backend string) {
	e := newEnvOn(t, backend, sqliteDSN(t), nil)
	e.openSale("s", 10, 0)
	if code, _ := e.reserve("s", "a-0"); code != lua.ReserveOK {
		t.Fatalf("reserve a-0: code %d", code)
	}
	e.persist("s")
	snap := map[string]string{}
	for _, k := range []string{lua.SaleKey("s"), lua.BuyersKey("s")} {
		d, err := e.rdb.Dump(e.ctx, k).Result()
		if err != nil {
			t.Fatalf("DUMP %s: %v", k, err)
		}
		snap[k] = d
	}
	if got := e.reserveMany("s", "b", 3); got != 3 {
		t.Fatalf("reserved %d, want 3", got)
	}
	later := e.persist("s")
	for k, d := range snap { // Redis restarts from the older snapshot
		if err := e.rdb.RestoreReplace(e.ctx, k, 0, d).Err(); err != nil {
			t.Fatalf("RESTORE %s: %v", k, err)
		}
	}
	_, after, err := e.svc.Resync(e.ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if after.Booked != 4 {
		t.Fatalf("booked = %d, want 4 live units", after.Booked)
	}
	for _, o := range later {
		code, got := e.reserve("s", o.UserID)
		if code != lua.ReservePurchased || got != o.ID {
			t.Fatalf("buyer %s after restore: code %d order %q, want %d and %q", o.UserID, code, got, lua.ReservePurchased, o.ID)
		}
	}
}
