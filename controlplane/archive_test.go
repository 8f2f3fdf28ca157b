package controlplane

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/lua"
)

// TestArchive: a closed sale is archived only once it ended for good (its
// stream drained, its settlement reported, no order left unpaid, no
// release left to deliver, no dead letter waiting), and then leaves
// fg:sales and the leader's listing; it still answers its admin figures,
// its orders' lookups and refunds (which sell nothing: the sale stays
// closed and archived), and Start makes it live again, back in fg:sales
// before it takes orders. A bucketed sale takes its buckets out of
// fg:sales too. On SQLite and PostgreSQL, and on a Redis Cluster.
func TestArchive(t *testing.T) {
	for _, c := range []struct {
		name, backend string
		dsn           func(*testing.T) string
	}{{"sqlite", "single", sqliteDSN}, {"postgres", "single", postgresDSN}, {"cluster", "cluster", sqliteDSN}} {
		t.Run(c.name, func(t *testing.T) { testArchive(t, c.backend, c.dsn(t)) })
	}
}

func testArchive(t *testing.T, backend, dsn string) {
	e := newEnvOn(t, backend, dsn, nil)
	const plain, bkt, dead = "plain", "bkt", "dead"
	e.openSale(plain, 10, 1)
	e.openSale(dead, 10, 1)
	l := e.startBucketed(flashgate.Sale{ID: bkt, Name: "Bucketed", PriceCents: 300, Total: 6, Buckets: 3})

	var plainOrders []string
	for i := range 4 {
		code, id := e.reserve(plain, "p"+strconv.Itoa(i))
		if code != lua.ReserveOK {
			t.Fatalf("reserve on plain: code %d", code)
		}
		plainOrders = append(plainOrders, id)
	}
	if code, _ := e.reserve(dead, "d0"); code != lua.ReserveOK {
		t.Fatalf("reserve on dead: code %d", code)
	}
	var bktOrders []string
	for i := range 3 {
		u := "b" + strconv.Itoa(i)
		h := l.Home(u)
		id := "bo" + strconv.Itoa(i)
		v, err := lua.Reserve.Run(e.ctx, e.rdb, lua.ReserveKeys(l.Tag(h)), id, u, 1, e.clock.Now().UnixMilli(), bkt, h).Slice()
		if err != nil || v[0].(int64) != lua.ReserveOK {
			t.Fatalf("reserve on bkt: %v, %v", v, err)
		}
		bktOrders = append(bktOrders, id)
	}
	for _, id := range []string{plain, bkt, dead} {
		if err := e.svc.Stop(e.ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	archived := func(id string) bool {
		t.Helper()
		s, err := e.db.Sale(e.ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return s.Archived
	}
	inSales := func(member string) bool {
		t.Helper()
		return e.rdb.SIsMember(e.ctx, lua.SalesKey(), member).Val()
	}
	// passes runs n re-sync passes of the leader.
	passes := func(n int) {
		for range n {
			e.svc.resyncAll(e.ctx)
		}
	}

	// Closed with a stream backlog: nothing is archived.
	passes(3)
	for _, id := range []string{plain, bkt, dead} {
		if archived(id) {
			t.Fatalf("%s archived with a stream backlog", id)
		}
	}
	// Stored, but pending payment: still not.
	e.persist(plain)
	for b := range l.N() {
		e.persist(l.Tag(b))
	}
	// The dead sale's order goes to its dead-letter stream instead.
	msgs := e.rdb.XRange(e.ctx, lua.OrdersKey(dead), "-", "+").Val()
	if err := e.rdb.XAdd(e.ctx, &redis.XAddArgs{Stream: lua.DeadKey(dead), Values: msgs[0].Values}).Err(); err != nil {
		t.Fatal(err)
	}
	e.rdb.XDel(e.ctx, lua.OrdersKey(dead), msgs[0].ID)
	passes(3)
	if archived(plain) || archived(bkt) {
		t.Fatal("archived with orders pending payment")
	}
	// Pay some; the rest of plain's expire after the payment window.
	for _, id := range plainOrders[:2] {
		if _, err := e.svc.Pay(e.ctx, id, userOf(t, e, id)); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range bktOrders {
		if _, err := e.svc.Pay(e.ctx, id, userOf(t, e, id)); err != nil {
			t.Fatal(err)
		}
	}
	passes(2)
	if !archived(bkt) {
		t.Fatal("bkt not archived: every order paid and stored")
	}
	if archived(plain) {
		t.Fatal("plain archived with 2 orders pending payment")
	}
	e.clock.Add(16 * time.Minute)
	if n, err := e.svc.ExpireDue(e.ctx); err != nil || n != 2 {
		t.Fatalf("ExpireDue: %d, %v; want 2", n, err)
	}
	passes(3) // deliver the expiries' queued releases, then archive
	if !archived(plain) {
		t.Fatal("plain not archived once every order was paid or expired")
	}
	if archived(dead) {
		t.Fatal("dead archived with a dead letter waiting for a replay")
	}
	for _, m := range append([]string{plain, bkt}, l.Tags()...) {
		if inSales(m) {
			t.Errorf("%s still in fg:sales once archived", m)
		}
	}
	if !inSales(dead) {
		t.Error("dead left fg:sales")
	}
	live, err := e.db.LiveSales(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := saleIDs(live); !slices.Equal(got, []string{dead}) {
		t.Errorf("LiveSales: got %v, want [dead]", got)
	}
	// A re-sync (an admin's) of an archived sale leaves it out of fg:sales.
	if _, _, err := e.svc.Resync(e.ctx, plain); err != nil {
		t.Fatal(err)
	}
	if inSales(plain) {
		t.Error("a re-sync put an archived sale back into fg:sales")
	}

	// An archived sale answers its figures and its orders.
	st, err := e.svc.SaleStatus(e.ctx, plain)
	if err != nil || !st.Archived || st.State != flashgate.StateClosed || st.Booked != 2 ||
		st.Settlement == nil || !st.Settlement.Settled || st.Settlement.Difference != 0 {
		t.Fatalf("SaleStatus of archived plain: got %+v, %v", st, err)
	}
	paid := plainOrders[0]
	if o, err := e.svc.Order(e.ctx, paid, userOf(t, e, paid)); err != nil || o.Status != flashgate.StatusPaid {
		t.Fatalf("Order of an archived sale: got %+v, %v", o, err)
	}
	// A refund works and sells nothing: the sale stays closed and archived.
	if o, err := e.svc.Refund(e.ctx, paid); err != nil || o.Status != flashgate.StatusRefunded {
		t.Fatalf("Refund of an archived sale's order: got %+v, %v", o, err)
	}
	if code, _ := e.reserve(plain, "newcomer"); code != lua.ReserveClosed {
		t.Errorf("reserve after a refund on an archived sale: code %d, want closed", code)
	}
	passes(2)
	if !archived(plain) || inSales(plain) {
		t.Error("a refund made the archived sale live")
	}
	if st, _ := e.svc.SaleStatus(e.ctx, plain); st.Booked != 1 || st.Settlement.Difference != 0 {
		t.Errorf("after the refund: booked %d, difference %d; want 1, 0", st.Booked, st.Settlement.Difference)
	}

	// The dead letter is replayed and stored, and its order paid: dead is
	// archived.
	if err := e.rdb.XAdd(e.ctx, &redis.XAddArgs{Stream: lua.OrdersKey(dead), Values: msgs[0].Values}).Err(); err != nil {
		t.Fatal(err)
	}
	e.rdb.Del(e.ctx, lua.DeadKey(dead))
	passes(2)
	if archived(dead) {
		t.Fatal("dead archived with its replayed order in the stream")
	}
	for _, o := range e.persist(dead) {
		if _, err := e.svc.Pay(e.ctx, o.ID, o.UserID); err != nil {
			t.Fatal(err)
		}
	}
	passes(3)
	if !archived(dead) {
		t.Error("dead not archived once its dead letters were gone")
	}

	// Start makes an archived sale live again, back in fg:sales first.
	for _, id := range []string{plain, bkt} {
		if err := e.svc.Start(e.ctx, id); err != nil {
			t.Fatal(err)
		}
		if archived(id) {
			t.Errorf("%s still archived once started", id)
		}
	}
	for _, m := range append([]string{plain, bkt}, l.Tags()...) {
		if !inSales(m) {
			t.Errorf("%s not back in fg:sales once started", m)
		}
	}
	// The leader's second look: a sale that is no longer over once it left
	// fg:sales (reopened, sold and closed again meanwhile) is live again.
	e.openSale("late", 5, 1)
	if code, _ := e.reserve("late", "late-buyer"); code != lua.ReserveOK {
		t.Fatalf("reserve on late: code %d", code)
	}
	if err := e.svc.Stop(e.ctx, "late"); err != nil {
		t.Fatal(err)
	}
	row, err := e.db.Sale(e.ctx, "late")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.archive.Archive(e.ctx, row); err == nil {
		t.Error("archive of a sale with an order in its stream: got no error")
	}
	if archived("late") || !inSales("late") {
		t.Errorf("late after its archiving was undone: archived %v, in fg:sales %v; want false, true", archived("late"), inSales("late"))
	}

	code, id := e.reserve(plain, "newcomer")
	if code != lua.ReserveOK {
		t.Fatalf("reserve on a reopened sale: code %d", code)
	}
	if o, err := e.svc.Order(e.ctx, id, "newcomer"); err != nil || o.Status != flashgate.StatusReserved {
		t.Errorf("reserved order of a reopened sale: got %+v, %v", o, err)
	}
}

// userOf reads the user of a stored order.
func userOf(t *testing.T, e *env, id string) string {
	t.Helper()
	o, err := e.db.Order(e.ctx, id)
	if err != nil {
		t.Fatalf("order %s: %v", id, err)
	}
	return o.UserID
}

func saleIDs(sales []flashgate.Sale) []string {
	out := make([]string, len(sales))
	for i, s := range sales {
		out[i] = s.ID
	}
	return out
}
