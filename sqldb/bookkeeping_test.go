package sqldb

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
)

// recount computes a sale's figures from its rows, as Figures did before the
// counters: the reference the counters must always equal.
func recount(t *testing.T, db *DB, sale string) flashgate.SaleFigures {
	t.Helper()
	rows, err := db.r.QueryContext(context.Background(), db.q(`SELECT status, COUNT(*), CAST(SUM(quantity) AS BIGINT)
		FROM orders WHERE sale_id = ? GROUP BY status`), sale)
	if err != nil {
		t.Fatal(err)
	}
	f, err := scanFigures(rows)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// queued lists a sale's pending releases as "id:user:qty ...".
func queued(t *testing.T, db *DB, sale string) (string, int64) {
	t.Helper()
	q, delivered, err := db.PendingReleases(context.Background(), sale, 0)
	if err != nil {
		t.Fatal(err)
	}
	var s []string
	for _, o := range q {
		s = append(s, fmt.Sprintf("%s:%s:%d", o.ID, o.UserID, o.Quantity))
	}
	return strings.Join(s, " "), delivered
}

// TestCountersFollowRows: after inserts (with conflicts), transitions,
// expiry batches and a hand-made UPDATE and DELETE, the counters equal a
// recount of the rows, and every order that left a live status is queued
// for release exactly once.
func TestCountersFollowRows(t *testing.T) {
	each(t, func(t *testing.T, _ string, db *DB) {
		ctx := context.Background()
		rng := rand.New(rand.NewPCG(1, 2))
		var batch []flashgate.Order
		for i := 0; i < 300; i++ {
			sale := []string{"a", "b"}[i%2]
			batch = append(batch, order(fmt.Sprintf("o%03d", i), sale, fmt.Sprintf("u%d", i), int64(1+rng.IntN(3)), t0.Add(time.Duration(i)*time.Second)))
		}
		if n, err := db.InsertOrders(ctx, batch); err != nil || n != 300 {
			t.Fatalf("InsertOrders: got %d, %v; want 300", n, err)
		}
		// The same batch again, and a second live order of a user: nothing.
		dup := append(batch[:10:10], order("x1", "a", "u0", 1, t0))
		if n, err := db.InsertOrders(ctx, dup); err != nil || n != 0 {
			t.Fatalf("InsertOrders again: got %d, %v; want 0", n, err)
		}
		pp := []flashgate.OrderStatus{flashgate.StatusPendingPayment}
		for i := 0; i < 100; i++ {
			id := fmt.Sprintf("o%03d", rng.IntN(300))
			to := []flashgate.OrderStatus{flashgate.StatusPaid, flashgate.StatusCancelled}[rng.IntN(2)]
			_, _ = db.Transition(ctx, id, pp, to, t0)
		}
		for i := 0; i < 20; i++ {
			_, _ = db.Transition(ctx, fmt.Sprintf("o%03d", i), []flashgate.OrderStatus{flashgate.StatusPendingPayment, flashgate.StatusPaid}, flashgate.StatusRefunded, t0)
		}
		if _, err := db.ExpireDue(ctx, t0.Add(200*time.Second), t0, 50, 1); err != nil {
			t.Fatal(err)
		}
		if _, err := db.w.ExecContext(ctx, db.q(`UPDATE orders SET status = 'refunded' WHERE order_id IN ('o298', 'o299') AND status = 'paid'`)); err != nil {
			t.Fatal(err)
		}
		if _, err := db.w.ExecContext(ctx, `DELETE FROM orders WHERE order_id = 'o297'`); err != nil {
			t.Fatal(err)
		}
		var nReleased int
		for _, sale := range []string{"a", "b"} {
			f, err := db.Figures(ctx, sale)
			if err != nil {
				t.Fatal(err)
			}
			if want := recount(t, db, sale); f != want {
				t.Errorf("Figures(%s): got %+v, want %+v", sale, f, want)
			}
			rel, err := db.ReleasedOrders(ctx, sale)
			if err != nil {
				t.Fatal(err)
			}
			q, delivered := queued(t, db, sale)
			if got, want := strings.Count(q, ":")/2, len(rel); got != want || delivered != 0 {
				t.Errorf("pending releases of %s: %d orders, %d delivered; want %d and 0", sale, got, delivered, want)
			}
			for _, o := range rel {
				if !strings.Contains(q, fmt.Sprintf("%s:%s:%d", o.ID, o.UserID, o.Quantity)) {
					t.Errorf("released order %s not queued", o.ID)
				}
			}
			nReleased += len(rel)
		}
		all, err := db.AllFigures(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := all.Cancelled + all.Expired + all.Refunded; got != int64(nReleased) || all.Persisted != 299 {
			t.Errorf("AllFigures: got %+v, want %d released of 299", all, nReleased)
		}
	})
}

// TestReleaseQueueDelivered: delivered releases leave the queue and are
// counted once, even when two re-syncs deliver the same ones.
func TestReleaseQueueDelivered(t *testing.T) {
	each(t, func(t *testing.T, _ string, db *DB) {
		ctx := context.Background()
		var batch []flashgate.Order
		for i := 0; i < 5; i++ {
			o := order(fmt.Sprintf("r%d", i), "s", fmt.Sprintf("u%d", i), 1, t0)
			o.Status = flashgate.StatusExpired
			batch = append(batch, o)
		}
		if _, err := db.InsertOrders(ctx, batch); err != nil {
			t.Fatal(err)
		}
		q, delivered, err := db.PendingReleases(ctx, "s", 3)
		if err != nil || len(q) != 3 || delivered != 0 || q[0].ID != "r0" || q[2].ID != "r2" {
			t.Fatalf("PendingReleases(3): got %v, %d, %v; want r0..r2, 0", q, delivered, err)
		}
		for i := 0; i < 2; i++ { // a second re-sync delivers the same three
			if n, err := db.ReleasesDelivered(ctx, "s", []string{"r0", "r1", "r2"}, 1); err != nil || n != 3 {
				t.Fatalf("ReleasesDelivered #%d: got %d, %v; want 3", i, n, err)
			}
		}
		if got, delivered := queued(t, db, "s"); got != "r3:u3:1 r4:u4:1" || delivered != 3 {
			t.Errorf("queue after delivery: got %q, %d; want r3, r4 and 3", got, delivered)
		}
		if q, d, err := db.PendingReleases(ctx, "none", 0); err != nil || len(q) != 0 || d != 0 {
			t.Errorf("PendingReleases(none): got %v, %d, %v", q, d, err)
		}
	})
}

// TestMigrationFillsCounters: a database written by version 1 (no
// counters, no triggers) gets counters equal to its rows when it upgrades,
// and its old releases are not queued again.
func TestMigrationFillsCounters(t *testing.T) {
	each(t, func(t *testing.T, dsn string, db *DB) {
		ctx := context.Background()
		// Back to version 1: drop what version 2 made.
		down := []string{`DROP TABLE order_counts`, `DROP TABLE release_queue`, `DROP TABLE release_sync`,
			`DROP INDEX orders_sale_status_id`, `CREATE INDEX orders_sale_status ON orders (sale_id, status)`,
			`DELETE FROM schema_migrations WHERE version IN (2, 4)`}
		if db.dialect == DialectPostgres {
			down = append([]string{`DROP TRIGGER orders_count_insert ON orders`, `DROP TRIGGER orders_count_update ON orders`,
				`DROP TRIGGER orders_count_delete ON orders`, `DROP FUNCTION flashgate_count_orders()`}, down...)
		} else {
			// Version 4 dropped the INSERT trigger already.
			down = append([]string{`DROP TRIGGER orders_count_update`, `DROP TRIGGER orders_count_delete`}, down...)
		}
		for _, s := range down {
			if _, err := db.w.ExecContext(ctx, s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
		var batch []flashgate.Order
		for i := 0; i < 40; i++ {
			o := order(fmt.Sprintf("m%02d", i), "s", fmt.Sprintf("u%d", i), int64(1+i%2), t0)
			o.Status = []flashgate.OrderStatus{flashgate.StatusPendingPayment, flashgate.StatusPaid, flashgate.StatusRefunded, flashgate.StatusExpired}[i%4]
			batch = append(batch, o)
		}
		rawInsert(t, db, batch) // as version 1 did: no counters yet
		up := open(t, dsn)
		f, err := up.Figures(ctx, "s")
		if err != nil {
			t.Fatal(err)
		}
		if want := recount(t, up, "s"); f != want || f.Persisted != 40 {
			t.Errorf("Figures after upgrade: got %+v, want %+v", f, want)
		}
		if q, _ := queued(t, up, "s"); q != "" {
			t.Errorf("pending releases after upgrade: got %q, want empty", q)
		}
		if _, err := up.Transition(ctx, "m00", []flashgate.OrderStatus{flashgate.StatusPendingPayment}, flashgate.StatusCancelled, t0); err != nil {
			t.Fatal(err)
		}
		if q, _ := queued(t, up, "s"); q != "m00:u0:1" {
			t.Errorf("pending releases after a cancel: got %q, want m00:u0:1", q)
		}
		if f, want := mustFigures(t, up, "s"), recount(t, up, "s"); f != want {
			t.Errorf("Figures after a cancel: got %+v, want %+v", f, want)
		}
	})
}

func mustFigures(t *testing.T, db *DB, sale string) flashgate.SaleFigures {
	t.Helper()
	f, err := db.Figures(context.Background(), sale)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestOrdersPage walks one status of a sale page by page.
func TestOrdersPage(t *testing.T) {
	each(t, func(t *testing.T, _ string, db *DB) {
		ctx := context.Background()
		var batch []flashgate.Order
		for i := 0; i < 7; i++ {
			batch = append(batch, order(fmt.Sprintf("p%d", i), "s", fmt.Sprintf("u%d", i), 1, t0))
		}
		batch = append(batch, order("z", "t", "u", 1, t0))
		if _, err := db.InsertOrders(ctx, batch); err != nil {
			t.Fatal(err)
		}
		var got []string
		after := ""
		for pages := 0; ; pages++ {
			page, err := db.OrdersPage(ctx, "s", flashgate.StatusPendingPayment, after, 3)
			if err != nil || pages > 5 {
				t.Fatalf("OrdersPage: %v (page %d)", err, pages)
			}
			for _, o := range page {
				got = append(got, o.ID)
			}
			if len(page) < 3 {
				break
			}
			after = page[len(page)-1].ID
		}
		if s := strings.Join(got, " "); s != "p0 p1 p2 p3 p4 p5 p6" {
			t.Errorf("pages: got %q", s)
		}
	})
}

// rawInsert stores orders with one plain INSERT each, as an older
// flashgate (or an operator) would: nothing but the database's own triggers
// counts them.
func rawInsert(t *testing.T, db *DB, orders []flashgate.Order) {
	t.Helper()
	for _, o := range orders {
		_, err := db.w.ExecContext(context.Background(), db.q(`INSERT INTO orders (`+orderCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`),
			o.ID, o.SaleID, o.UserID, o.Quantity, o.PriceCents, string(insertedStatus(o.Status)), db.ts(o.CreatedAt), db.ts(o.CreatedAt))
		if err != nil {
			t.Fatalf("inserting %s: %v", o.ID, err)
		}
	}
}

// TestBatchCounters: batches mixing sales, statuses and quantities, with
// duplicates inside a batch, rows stored before, a second live order of a
// user and the whole batch delivered again, leave the counters equal to a
// recount of the rows, and queue every released row exactly once.
func TestBatchCounters(t *testing.T) {
	each(t, func(t *testing.T, _ string, db *DB) {
		ctx := context.Background()
		var batch []flashgate.Order
		for i := 0; i < 700; i++ {
			o := order(fmt.Sprintf("b%04d", i), []string{"x", "y", "z"}[i%3], fmt.Sprintf("u%d", i), int64(1+i%4/3), t0.Add(time.Duration(i)*time.Millisecond))
			if i%50 == 7 {
				o.Status = flashgate.StatusCancelled
			}
			batch = append(batch, o)
		}
		// A duplicate id inside the batch, and a second live order of u4 in y.
		batch = append(batch, batch[10], order("b9999", "y", "u4", 1, t0))
		first := batch[:300]
		if n, err := db.InsertOrders(ctx, first); err != nil || n != 300 {
			t.Fatalf("InsertOrders(first 300): got %d, %v; want 300", n, err)
		}
		// The whole batch: the first 300 are stored, b0010 twice, b9999 a
		// second live order of u4.
		if n, err := db.InsertOrders(ctx, batch); err != nil || n != 400 {
			t.Fatalf("InsertOrders(all): got %d, %v; want 400", n, err)
		}
		// Delivered again: nothing.
		if n, err := db.InsertOrders(ctx, batch); err != nil || n != 0 {
			t.Fatalf("InsertOrders(again): got %d, %v; want 0", n, err)
		}
		for _, sale := range []string{"x", "y", "z"} {
			f, want := mustFigures(t, db, sale), recount(t, db, sale)
			if f != want {
				t.Errorf("sale %s: Figures got %+v, want %+v", sale, f, want)
			}
		}
		if f := mustFigures(t, db, "x"); f.Persisted != 234 || f.Cancelled != 5 {
			t.Errorf("sale x: got %d rows, %d cancelled; want 234, 5", f.Persisted, f.Cancelled)
		}
		var got []string
		for _, sale := range []string{"x", "y", "z"} {
			q, _ := queued(t, db, sale)
			if q != "" {
				got = append(got, strings.Fields(q)...)
			}
		}
		if len(got) != 14 {
			t.Errorf("pending releases: got %d entries %q, want the 14 cancelled rows", len(got), got)
		}
	})
}

// TestInsertSizes: batch sizes from 1 to pgInsertRows+1 store each
// row once and counts it once (the power-of-two statements cover any size).
func TestInsertSizes(t *testing.T) {
	if 1<<(insertStmtSizes-1) != insertRows {
		t.Fatalf("insertStmtSizes %d does not cover insertRows %d", insertStmtSizes, insertRows)
	}
	each(t, func(t *testing.T, _ string, db *DB) {
		ctx := context.Background()
		id := 0
		want := 0
		for _, n := range []int{1, 2, 3, 7, 100, 255, 256, 257, 2*insertRows + 1, pgInsertRows + 1} {
			var batch []flashgate.Order
			for i := 0; i < n; i++ {
				id++
				batch = append(batch, order(fmt.Sprintf("s%05d", id), "s", fmt.Sprintf("u%d", id), 1, t0))
			}
			got, err := db.InsertOrders(ctx, batch)
			if err != nil || got != n {
				t.Fatalf("InsertOrders(%d rows): got %d, %v; want %d", n, got, err, n)
			}
			want += n
		}
		if f := mustFigures(t, db, "s"); f.Persisted != int64(want) || f != recount(t, db, "s") {
			t.Errorf("Figures: got %+v, want %d rows and %+v", f, want, recount(t, db, "s"))
		}
	})
}

// TestMigrationDropsInsertTrigger upgrades a SQLite database of version 3,
// whose rows an INSERT trigger counted, to version 4: the counters stay
// right for the rows of before and after, none counted twice.
func TestMigrationDropsInsertTrigger(t *testing.T) {
	dsn := "sqlite://" + filepath.Join(t.TempDir(), "fg.db")
	db := open(t, dsn)
	ctx := context.Background()
	// Back to version 3: the INSERT trigger of version 2.
	for _, s := range []string{bookkeepingSQLite[len(bookkeepingTables)], `DELETE FROM schema_migrations WHERE version = 4`} {
		if _, err := db.w.ExecContext(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	if !hasTrigger(t, db, "orders_count_insert") {
		t.Fatal("version 3 lacks orders_count_insert")
	}
	var old []flashgate.Order
	for i := 0; i < 20; i++ {
		o := order(fmt.Sprintf("v3-%02d", i), "s", fmt.Sprintf("u%d", i), 1+int64(i%2), t0)
		if i%5 == 0 {
			o.Status = flashgate.StatusExpired
		}
		old = append(old, o)
	}
	rawInsert(t, db, old)
	if f := mustFigures(t, db, "s"); f.Persisted != 20 || f.Expired != 4 {
		t.Fatalf("version 3's trigger: got %+v, want 20 rows, 4 expired", f)
	}
	db.Close()
	up := open(t, dsn)
	if hasTrigger(t, up, "orders_count_insert") {
		t.Error("version 4 kept orders_count_insert")
	}
	var fresh []flashgate.Order
	for i := 0; i < 30; i++ {
		o := order(fmt.Sprintf("v4-%02d", i), "s", fmt.Sprintf("w%d", i), 1+int64(i%3), t0)
		if i%10 == 0 {
			o.Status = flashgate.StatusRefunded
		}
		fresh = append(fresh, o)
	}
	// With an order of before, which must not count again.
	if n, err := up.InsertOrders(ctx, append(fresh, old[3])); err != nil || n != 30 {
		t.Fatalf("InsertOrders after the upgrade: got %d, %v; want 30", n, err)
	}
	if f, want := mustFigures(t, up, "s"), recount(t, up, "s"); f != want || f.Persisted != 50 {
		t.Errorf("Figures after the upgrade: got %+v, want %+v (50 rows)", f, want)
	}
	if q, _ := queued(t, up, "s"); len(strings.Fields(q)) != 7 {
		t.Errorf("pending releases after the upgrade: got %q, want the 4 expired and 3 refunded rows", q)
	}
}

func hasTrigger(t *testing.T, db *DB, name string) bool {
	t.Helper()
	var n int
	if err := db.w.QueryRowContext(context.Background(), `SELECT COUNT(*) FROM sqlite_master WHERE type = 'trigger' AND name = ?`, name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// TestInsertAfterClose: an insert that races Close (an order sink whose
// database is being replaced) gets an error, not a panic on the prepared
// statements Close released.
func TestInsertAfterClose(t *testing.T) {
	db := open(t, "sqlite://"+filepath.Join(t.TempDir(), "fg.db"))
	ctx := context.Background()
	if _, err := db.InsertOrders(ctx, []flashgate.Order{order("c1", "s", "u1", 1, t0)}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if n, err := db.InsertOrders(ctx, []flashgate.Order{order("c2", "s", "u2", 1, t0)}); err == nil {
		t.Errorf("InsertOrders after Close: got %d, nil; want an error", n)
	}
}
