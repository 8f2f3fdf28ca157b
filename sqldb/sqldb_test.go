package sqldb

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/pgtest"
)

// each runs f against a fresh SQLite file and a fresh PostgreSQL database.
func each(t *testing.T, f func(t *testing.T, dsn string, db *DB)) {
	t.Helper()
	for _, name := range []string{DialectSQLite, DialectPostgres} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var dsn string
			if name == DialectSQLite {
				dsn = "sqlite://" + filepath.Join(t.TempDir(), "fg.db")
			} else {
				dsn = pgtest.New(t)
			}
			db := open(t, dsn)
			if got := db.Dialect(); got != name {
				t.Fatalf("Dialect() = %q, want %q", got, name)
			}
			f(t, dsn, db)
		})
	}
}

func open(t *testing.T, dsn string) *DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := Open(ctx, dsn)
	if err != nil {
		t.Fatalf("Open(%q): %v", dsn, err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 123456000, time.UTC)

func order(id, sale, user string, qty int64, at time.Time) flashgate.Order {
	return flashgate.Order{ID: id, SaleID: sale, UserID: user, Quantity: qty, PriceCents: 999, Status: flashgate.StatusReserved, CreatedAt: at}
}

func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	for _, dsn := range []string{"mysql://x/y", "flashgate.db", "sqlite://", "postgres://nobody@127.0.0.1:1/x?sslmode=disable&connect_timeout=2"} {
		db, err := Open(ctx, dsn)
		if err == nil {
			db.Close()
			t.Errorf("Open(%q): got no error, want one", dsn)
			continue
		}
		if !strings.HasPrefix(err.Error(), "db: ") || strings.Contains(err.Error(), "goroutine") {
			t.Errorf("Open(%q): got %q, want a one-line error starting with \"db: \"", dsn, err)
		}
	}
}

func TestMemory(t *testing.T) {
	db := open(t, "sqlite://:memory:")
	ctx := context.Background()
	if err := db.CreateSale(ctx, flashgate.Sale{ID: "m", Name: "m", Total: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Sale(ctx, "m"); err != nil {
		t.Fatalf("Sale: %v", err)
	}
}

func TestMigrationsTwice(t *testing.T) {
	each(t, func(t *testing.T, dsn string, db *DB) {
		ctx := context.Background()
		if err := db.CreateSale(ctx, flashgate.Sale{ID: "s1", Name: "one", Total: 3}); err != nil {
			t.Fatal(err)
		}
		// Two more processes starting at once.
		var wg sync.WaitGroup
		errs := make(chan error, 2)
		for i := 0; i < 2; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d, err := Open(ctx, dsn)
				if err != nil {
					errs <- err
					return
				}
				errs <- d.Close()
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("reopening: %v", err)
			}
		}
		var n int
		if err := db.r.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != len(migrations) {
			t.Errorf("schema_migrations rows: got %d, want %d", n, len(migrations))
		}
		if _, err := db.Sale(ctx, "s1"); err != nil {
			t.Errorf("sale after re-migration: %v", err)
		}
	})
}

func TestSales(t *testing.T) {
	each(t, func(t *testing.T, _ string, db *DB) {
		ctx := context.Background()
		start := t0
		b := flashgate.Sale{ID: "b", Name: "Bee", PriceCents: 1500, Total: 10, StartsAt: &start, AdmitRatio: 2, PerUser: 3}
		a := flashgate.Sale{ID: "a", Name: "Ay", PriceCents: 100, Total: 5}
		for _, s := range []flashgate.Sale{b, a} {
			if err := db.CreateSale(ctx, s); err != nil {
				t.Fatalf("CreateSale(%s): %v", s.ID, err)
			}
		}
		if err := db.CreateSale(ctx, a); !errors.Is(err, flashgate.ErrExists) {
			t.Errorf("CreateSale twice: got %v, want ErrExists", err)
		}
		if err := db.CreateSale(ctx, flashgate.Sale{ID: "bad id"}); !errors.Is(err, flashgate.ErrBadRequest) {
			t.Errorf("CreateSale(bad id): got %v, want ErrBadRequest", err)
		}
		got, err := db.Sale(ctx, "b")
		if err != nil {
			t.Fatal(err)
		}
		if got.Name != "Bee" || got.PriceCents != 1500 || got.Total != 10 || got.AdmitRatio != 2 || got.PerUser != 3 ||
			got.State != flashgate.StateUpcoming || got.EndsAt != nil || got.StartsAt == nil || !got.StartsAt.Equal(start) {
			t.Errorf("Sale(b): got %+v, want %+v (state upcoming)", got, b)
		}
		if got.StartsAt != nil && got.StartsAt.Location() != time.UTC {
			t.Errorf("StartsAt location: got %v, want UTC", got.StartsAt.Location())
		}
		ga, _ := db.Sale(ctx, "a")
		if ga.AdmitRatio != flashgate.DefaultAdmitRatio || ga.PerUser != 1 || ga.StartsAt != nil {
			t.Errorf("Sale(a) defaults: got %+v, want admit ratio %v, per user 1, no start", ga, flashgate.DefaultAdmitRatio)
		}
		if _, err := db.Sale(ctx, "zz"); !errors.Is(err, flashgate.ErrNotFound) {
			t.Errorf("Sale(zz): got %v, want ErrNotFound", err)
		}
		all, err := db.Sales(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(all) != 2 || all[0].ID != "a" || all[1].ID != "b" {
			t.Errorf("Sales: got %+v, want a then b", all)
		}
		if err := db.SetSaleState(ctx, "a", flashgate.StateOpen, 1); err != nil {
			t.Fatal(err)
		}
		if ga, _ := db.Sale(ctx, "a"); ga.State != flashgate.StateOpen {
			t.Errorf("state after SetSaleState: got %q, want open", ga.State)
		}
		if err := db.SetSaleState(ctx, "zz", flashgate.StateOpen, 1); !errors.Is(err, flashgate.ErrNotFound) {
			t.Errorf("SetSaleState(zz): got %v, want ErrNotFound", err)
		}
		if err := db.SetSaleState(ctx, "a", flashgate.StateSoldOut, 1); !errors.Is(err, flashgate.ErrBadRequest) {
			t.Errorf("SetSaleState(sold_out): got %v, want ErrBadRequest", err)
		}
	})
}

func TestInsertOrders(t *testing.T) {
	each(t, func(t *testing.T, _ string, db *DB) {
		ctx := context.Background()
		batch := []flashgate.Order{
			order("o1", "s", "u1", 1, t0),
			order("o2", "s", "u2", 2, t0.Add(time.Second)),
			order("o3", "s", "u3", 1, t0.Add(2*time.Second)),
			order("o1", "s", "u1", 1, t0), // duplicate inside the batch
		}
		n, err := db.InsertOrders(ctx, batch)
		if err != nil || n != 3 {
			t.Fatalf("InsertOrders: got %d, %v, want 3, nil", n, err)
		}
		n, err = db.InsertOrders(ctx, batch)
		if err != nil || n != 0 {
			t.Fatalf("InsertOrders again: got %d, %v, want 0, nil", n, err)
		}
		o, err := db.Order(ctx, "o2")
		if err != nil {
			t.Fatal(err)
		}
		want := flashgate.Order{ID: "o2", SaleID: "s", UserID: "u2", Quantity: 2, PriceCents: 999,
			Status: flashgate.StatusPendingPayment, CreatedAt: t0.Add(time.Second), UpdatedAt: t0.Add(time.Second)}
		if o != want {
			t.Errorf("Order(o2): got %+v, want %+v", o, want)
		}
		if _, err := db.Order(ctx, "nope"); !errors.Is(err, flashgate.ErrNotFound) {
			t.Errorf("Order(nope): got %v, want ErrNotFound", err)
		}
		// A second live order of u1 is refused...
		if n, err := db.InsertOrders(ctx, []flashgate.Order{order("o4", "s", "u1", 1, t0)}); err != nil || n != 0 {
			t.Errorf("second live order: got %d, %v, want 0, nil", n, err)
		}
		// ...but u1 may buy in another sale...
		if n, err := db.InsertOrders(ctx, []flashgate.Order{order("o5", "t", "u1", 1, t0)}); err != nil || n != 1 {
			t.Errorf("other sale: got %d, %v, want 1, nil", n, err)
		}
		// ...and again once the first order is cancelled.
		if _, err := db.Transition(ctx, "o1", []flashgate.OrderStatus{flashgate.StatusPendingPayment}, flashgate.StatusCancelled, t0); err != nil {
			t.Fatal(err)
		}
		if n, err := db.InsertOrders(ctx, []flashgate.Order{order("o4", "s", "u1", 1, t0)}); err != nil || n != 1 {
			t.Errorf("after cancel: got %d, %v, want 1, nil", n, err)
		}
		if _, err := db.InsertOrders(ctx, []flashgate.Order{{ID: "x", SaleID: "s", UserID: "u", Quantity: 0}}); !errors.Is(err, flashgate.ErrBadRequest) {
			t.Errorf("quantity 0: got %v, want ErrBadRequest", err)
		}
		// A large batch crosses the statement chunk size.
		big := make([]flashgate.Order, 1200)
		for i := range big {
			big[i] = order(fmt.Sprintf("b%04d", i), "big", fmt.Sprintf("u%d", i), 1, t0)
		}
		if n, err := db.InsertOrders(ctx, big); err != nil || n != len(big) {
			t.Errorf("big batch: got %d, %v, want %d, nil", n, err, len(big))
		}
	})
}

func TestTransition(t *testing.T) {
	each(t, func(t *testing.T, _ string, db *DB) {
		ctx := context.Background()
		if _, err := db.InsertOrders(ctx, []flashgate.Order{order("o1", "s", "u1", 1, t0)}); err != nil {
			t.Fatal(err)
		}
		live := []flashgate.OrderStatus{flashgate.StatusPendingPayment}
		later := t0.Add(time.Minute)
		o, err := db.Transition(ctx, "o1", live, flashgate.StatusPaid, later)
		if err != nil || o.Status != flashgate.StatusPaid || !o.UpdatedAt.Equal(later) || !o.CreatedAt.Equal(t0) {
			t.Fatalf("pay: got %+v, %v, want paid at %v", o, err, later)
		}
		o, err = db.Transition(ctx, "o1", live, flashgate.StatusExpired, later)
		if !errors.Is(err, flashgate.ErrNotPayable) || o.Status != flashgate.StatusPaid {
			t.Errorf("expire a paid order: got %+v, %v, want the paid row and ErrNotPayable", o, err)
		}
		if _, err := db.Transition(ctx, "nope", live, flashgate.StatusPaid, later); !errors.Is(err, flashgate.ErrNotFound) {
			t.Errorf("unknown order: got %v, want ErrNotFound", err)
		}
		o, err = db.Transition(ctx, "o1", []flashgate.OrderStatus{flashgate.StatusPaid}, flashgate.StatusRefunded, later)
		if err != nil || o.Status != flashgate.StatusRefunded {
			t.Errorf("refund: got %+v, %v, want refunded", o, err)
		}
	})
}

func TestPayExpireRace(t *testing.T) {
	each(t, func(t *testing.T, _ string, db *DB) {
		ctx := context.Background()
		const n = 200
		orders := make([]flashgate.Order, n)
		for i := range orders {
			orders[i] = order(fmt.Sprintf("r%03d", i), "s", fmt.Sprintf("u%d", i), 1, t0)
		}
		if _, err := db.InsertOrders(ctx, orders); err != nil {
			t.Fatal(err)
		}
		live := []flashgate.OrderStatus{flashgate.StatusPendingPayment}
		var wg sync.WaitGroup
		wins := make([]int, n)
		var mu sync.Mutex
		sem := make(chan struct{}, 16)
		for i := 0; i < n; i++ {
			for _, to := range []flashgate.OrderStatus{flashgate.StatusPaid, flashgate.StatusExpired} {
				wg.Add(1)
				sem <- struct{}{}
				go func() {
					defer wg.Done()
					defer func() { <-sem }()
					_, err := db.Transition(ctx, orders[i].ID, live, to, t0)
					switch {
					case err == nil:
						mu.Lock()
						wins[i]++
						mu.Unlock()
					case !errors.Is(err, flashgate.ErrNotPayable):
						t.Errorf("Transition(%s, %s): %v", orders[i].ID, to, err)
					}
				}()
			}
		}
		wg.Wait()
		for i, w := range wins {
			if w != 1 {
				t.Errorf("order %s: got %d winners, want 1", orders[i].ID, w)
			}
		}
		f, err := db.Figures(ctx, "s")
		if err != nil {
			t.Fatal(err)
		}
		if f.Paid+f.Expired != n || f.PendingPayment != 0 {
			t.Errorf("figures: got %+v, want paid+expired = %d", f, n)
		}
	})
}

func TestExpireDue(t *testing.T) {
	each(t, func(t *testing.T, _ string, db *DB) {
		ctx := context.Background()
		var batch []flashgate.Order
		for i := 0; i < 10; i++ {
			batch = append(batch, order(fmt.Sprintf("e%d", i), "s", fmt.Sprintf("u%d", i), 1, t0.Add(time.Duration(i)*time.Minute)))
		}
		if _, err := db.InsertOrders(ctx, batch); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Transition(ctx, "e1", []flashgate.OrderStatus{flashgate.StatusPendingPayment}, flashgate.StatusPaid, t0); err != nil {
			t.Fatal(err)
		}
		now := t0.Add(time.Hour)
		cut := t0.Add(6 * time.Minute) // e0..e5 are due; e1 is paid.
		var got []string
		for i := 0; i < 4; i++ {
			os, err := db.ExpireDue(ctx, cut, now, 2, 1)
			if err != nil {
				t.Fatal(err)
			}
			if len(os) > 2 {
				t.Fatalf("ExpireDue limit 2: got %d orders", len(os))
			}
			for _, o := range os {
				if o.Status != flashgate.StatusExpired || !o.UpdatedAt.Equal(now) {
					t.Errorf("expired order: got %+v, want expired at %v", o, now)
				}
				got = append(got, o.ID)
			}
		}
		if want := "e0 e2 e3 e4 e5"; strings.Join(got, " ") != want {
			t.Errorf("expired: got %v, want %v", got, want)
		}
		// Concurrent expirers never return one row twice.
		more := make([]flashgate.Order, 100)
		for i := range more {
			more[i] = order(fmt.Sprintf("m%03d", i), "s2", fmt.Sprintf("u%d", i), 1, t0)
		}
		if _, err := db.InsertOrders(ctx, more); err != nil {
			t.Fatal(err)
		}
		seen := map[string]int{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 50; i++ {
					os, err := db.ExpireDue(ctx, cut, now, 7, 1)
					if err != nil {
						t.Errorf("ExpireDue: %v", err)
						return
					}
					if len(os) == 0 {
						return
					}
					mu.Lock()
					for _, o := range os {
						seen[o.ID]++
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if len(seen) != len(more) {
			t.Errorf("concurrent expiry: got %d orders, want %d", len(seen), len(more))
		}
		for id, n := range seen {
			if n != 1 {
				t.Errorf("order %s expired %d times, want 1", id, n)
			}
		}
	})
}

func TestFiguresAndLists(t *testing.T) {
	each(t, func(t *testing.T, _ string, db *DB) {
		ctx := context.Background()
		batch := []flashgate.Order{
			order("p1", "s", "u1", 2, t0),
			order("p2", "s", "u2", 1, t0.Add(time.Second)),
			order("p3", "s", "u3", 3, t0.Add(2*time.Second)),
			order("p4", "s", "u4", 1, t0.Add(3*time.Second)),
			order("p5", "s", "u5", 1, t0.Add(4*time.Second)),
			order("q1", "other", "u1", 5, t0),
		}
		if _, err := db.InsertOrders(ctx, batch); err != nil {
			t.Fatal(err)
		}
		pp := []flashgate.OrderStatus{flashgate.StatusPendingPayment}
		steps := []struct {
			id string
			to flashgate.OrderStatus
		}{{"p2", flashgate.StatusPaid}, {"p3", flashgate.StatusCancelled}, {"p4", flashgate.StatusExpired}, {"p5", flashgate.StatusPaid}}
		for _, s := range steps {
			if _, err := db.Transition(ctx, s.id, pp, s.to, t0); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := db.Transition(ctx, "p5", []flashgate.OrderStatus{flashgate.StatusPaid}, flashgate.StatusRefunded, t0); err != nil {
			t.Fatal(err)
		}
		f, err := db.Figures(ctx, "s")
		if err != nil {
			t.Fatal(err)
		}
		want := flashgate.SaleFigures{Persisted: 5, PendingPayment: 1, Paid: 1, Cancelled: 1, Expired: 1, Refunded: 1, LiveUnits: 3, PersistedUnits: 8}
		if f != want {
			t.Errorf("Figures: got %+v, want %+v", f, want)
		}
		if f, _ := db.Figures(ctx, "none"); f != (flashgate.SaleFigures{}) {
			t.Errorf("Figures(none): got %+v, want zero", f)
		}
		ids := func(os []flashgate.Order, err error) string {
			if err != nil {
				t.Fatal(err)
			}
			var s []string
			for _, o := range os {
				s = append(s, o.ID)
			}
			return strings.Join(s, " ")
		}
		if got, want := ids(db.LiveOrders(ctx, "s")), "p1 p2"; got != want {
			t.Errorf("LiveOrders: got %q, want %q", got, want)
		}
		if got, want := ids(db.ReleasedOrders(ctx, "s")), "p3 p4 p5"; got != want {
			t.Errorf("ReleasedOrders: got %q, want %q", got, want)
		}
	})
}

func TestSQLiteWAL(t *testing.T) {
	dsn := "sqlite://" + filepath.Join(t.TempDir(), "wal.db")
	db := open(t, dsn)
	ctx := context.Background()
	var mode string
	if err := db.r.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if mode != "wal" {
		t.Errorf("journal_mode: got %q, want wal", mode)
	}
	if _, err := db.InsertOrders(ctx, []flashgate.Order{order("w1", "s", "u1", 1, t0)}); err != nil {
		t.Fatal(err)
	}
	tx, err := db.w.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (`+orderCols+`) VALUES ('w2', 's', 'u2', 1, 1, 'paid', 0, 0)`); err != nil {
		t.Fatal(err)
	}
	// Another connection, and another process's handle, read meanwhile.
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := db.Order(rctx, "w1"); err != nil {
		t.Errorf("read during a write transaction: %v", err)
	}
	if _, err := db.Order(rctx, "w2"); !errors.Is(err, flashgate.ErrNotFound) {
		t.Errorf("uncommitted row: got %v, want ErrNotFound", err)
	}
	other := open(t, dsn)
	if f, err := other.Figures(rctx, "s"); err != nil || f.Persisted != 1 {
		t.Errorf("second handle: got %+v, %v, want 1 row", f, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Order(ctx, "w2"); err != nil {
		t.Errorf("committed row: %v", err)
	}
}

func TestRelativeSQLitePath(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	db := open(t, "sqlite://rel.db")
	if err := db.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "rel.db")); len(m) != 1 {
		t.Errorf("relative path: got %v, want rel.db in the working directory", m)
	}
}

func TestConcurrentFirstOpen(t *testing.T) {
	for _, name := range []string{DialectSQLite, DialectPostgres} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dsn := "sqlite://" + filepath.Join(t.TempDir(), "first.db")
			if name == DialectPostgres {
				dsn = pgtest.New(t)
			}
			ctx := context.Background()
			var wg sync.WaitGroup
			errs := make(chan error, 3)
			for i := 0; i < 3; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					d, err := Open(ctx, dsn)
					if err == nil {
						err = d.Close()
					}
					errs <- err
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Errorf("concurrent first Open: %v", err)
				}
			}
			db := open(t, dsn)
			var n int
			if err := db.r.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations`).Scan(&n); err != nil || n != len(migrations) {
				t.Errorf("schema_migrations: got %d rows, %v, want %d", n, err, len(migrations))
			}
		})
	}
}

// TestExpireDuePlanSQLite: on SQLite, ExpireDue's UPDATE finds the rows the
// subquery picked by primary key, not by walking every pending_payment row
// of orders_status_created (a pass that grew with the table).
// TestExpireDueLeavesDrawOrders: a draw winner's order is paid by its
// entry's hold, captured before the close made the order, and the close
// marks it paid; the expiry leaves it pending however old, where it
// expired an order whose close was cut short past the payment window (the
// unit given back while the card stayed charged: the explorer's seed
// 20261746).
func TestExpireDueLeavesDrawOrders(t *testing.T) {
	each(t, func(t *testing.T, _ string, db *DB) {
		ctx := context.Background()
		open, closeAt := t0, t0.Add(time.Minute)
		if err := db.CreateSale(ctx, flashgate.Sale{ID: "d", Name: "Draw", PriceCents: 100, Total: 5, Queue: flashgate.QueueDraw, EntriesOpenAt: &open, EntriesCloseAt: &closeAt}); err != nil {
			t.Fatal(err)
		}
		if err := db.CreateSale(ctx, flashgate.Sale{ID: "f", Name: "First", PriceCents: 100, Total: 5}); err != nil {
			t.Fatal(err)
		}
		batch := []flashgate.Order{order("od1", "d", "u1", 1, t0), order("of1", "f", "u1", 1, t0), order("ox1", "x", "u1", 1, t0)}
		if _, err := db.InsertOrders(ctx, batch); err != nil {
			t.Fatal(err)
		}
		os, err := db.ExpireDue(ctx, t0.Add(time.Hour), t0.Add(time.Hour), 10, 1)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, o := range os {
			got = append(got, o.ID)
		}
		if want := "of1 ox1"; strings.Join(got, " ") != want {
			t.Errorf("expired: got %v, want %v (the draw's order left pending)", got, want)
		}
		if o, err := db.Order(ctx, "od1"); err != nil || o.Status != flashgate.StatusPendingPayment {
			t.Errorf("the draw winner's order: got %+v, %v; want pending_payment", o, err)
		}
	})
}

func TestExpireDuePlanSQLite(t *testing.T) {
	db := open(t, "sqlite://"+filepath.Join(t.TempDir(), "fg.db"))
	rows, err := db.w.Query(`EXPLAIN QUERY PLAN `+db.expireDueSQL(), "expired", 1, "pending_payment", 2, "draw", 100, "pending_payment")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, notUsed int
		var detail string
		if err := rows.Scan(&id, &parent, &notUsed, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(plan) == 0 || !strings.Contains(plan[0], "(order_id=?)") {
		t.Errorf("outer step of the plan: got %q, want a search by order_id", plan)
	}
}
