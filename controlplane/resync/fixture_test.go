package resync

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/internal/cptest"
	"github.com/flashgate/flashgate/controlplane/internal/fencing"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/lua"
	"github.com/flashgate/flashgate/sqldb"
)

// fixture is the world of a test that scripts a re-sync against other
// actors: the database of its backend, a real redis-server, and ctx, which
// carries the fencing token the sale was opened under (60 s at most).
type fixture struct {
	t    *testing.T
	ctx  context.Context
	db   *sqldb.DB
	rdb  *redis.Client
	sale flashgate.Sale
}

// openSale creates sale in a fresh database of dsn and opens it in a
// fresh Redis under a fencing token of its own.
func openSale(t *testing.T, dsn string, sale flashgate.Sale) *fixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	f := &fixture{t: t, db: cptest.OpenDB(t, dsn), rdb: redistest.Start(t).Client(t), sale: sale}
	if err := f.db.CreateSale(ctx, sale); err != nil {
		t.Fatalf("CreateSale: %v", err)
	}
	tok, err := lua.TakeFence.Run(ctx, f.rdb, lua.FenceKeys(), time.Now().UnixMilli()).Int64()
	if err != nil {
		t.Fatalf("TakeFence: %v", err)
	}
	f.ctx = fencing.WithValue(ctx, tok)
	if err := lua.Prepare.Run(f.ctx, f.rdb, lua.SaleKeys(sale.ID), sale.Total, flashgate.AdmitCap(sale.Total, 0), 1, sale.PriceCents).Err(); err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	if err := lua.SetState.Run(f.ctx, f.rdb, lua.SaleKeys(sale.ID), "open", tok).Err(); err != nil {
		t.Fatalf("SetState: %v", err)
	}
	return f
}

// syncer is a Syncer over st: the database, or a test's wrapper of it.
func (f *fixture) syncer(st Store) *Syncer { return f.syncerOn(f.rdb, st) }

// syncerOn is syncer on another client of the test's Redis (one with a
// hook, say).
func (f *fixture) syncerOn(rdb redis.UniversalClient, st Store) *Syncer {
	return New(rdb, st, nil, cptest.QuietLogger(), prometheus.NewCounter(prometheus.CounterOpts{Name: "resyncs"}))
}

// buy reserves a unit for each user ("u<n>", its order "o<n>") and stores
// the orders, which it returns in order.
func (f *fixture) buy(users ...string) []flashgate.Order {
	f.t.Helper()
	for _, u := range users {
		if code, _ := cptest.Reserve(f.t, f.ctx, f.rdb, f.sale.ID, u, "o"+u[1:], time.Now()); code != lua.ReserveOK {
			f.t.Fatalf("reserve of %s: got code %d, want %d", u, code, lua.ReserveOK)
		}
	}
	return cptest.Persist(f.t, f.ctx, f.rdb, f.db, f.sale.ID)
}

// lateRetake makes o a late payment retaken in Redis: o expires (its
// release made), its payment (stored as succeeded) is decided late
// (late_pending), its retake is pended in the database and made in Redis,
// as a settler's decideLate does.
func (f *fixture) lateRetake(o flashgate.Order) {
	f.t.Helper()
	now := time.Now()
	if _, err := f.db.InsertPayment(f.ctx, flashgate.Payment{OrderID: o.ID, IntentID: "pi_" + o.ID, Status: flashgate.IntentSucceeded, AmountCents: 100, Currency: "usd"}, now); err != nil {
		f.t.Fatalf("InsertPayment: %v", err)
	}
	if _, err := f.db.Transition(f.ctx, o.ID, []flashgate.OrderStatus{flashgate.StatusPendingPayment}, flashgate.StatusExpired, now); err != nil {
		f.t.Fatalf("Transition: %v", err)
	}
	if _, err := (&cptest.Releaser{RDB: f.rdb}).Release(f.ctx, o); err != nil {
		f.t.Fatalf("Release: %v", err)
	}
	if won, err := f.db.StepPayment(f.ctx, flashgate.PaymentStep{OrderID: o.ID, FromOutcome: []string{""}, ToOutcome: "late_pending"}, now); !won || err != nil {
		f.t.Fatalf("late_pending: %v, %v", won, err)
	}
	if ok, err := f.db.PendRetake(f.ctx, o.ID, now); !ok || err != nil {
		f.t.Fatalf("PendRetake: %v, %v", ok, err)
	}
	if got, err := lua.Retake.Run(f.ctx, f.rdb, lua.RetakeKeys(f.sale.ID), o.ID, o.UserID, 1, "").Int64(); err != nil || got != lua.RetakeOK {
		f.t.Fatalf("retake: got %d, %v; want %d", got, err, lua.RetakeOK)
	}
}

// honourStep is the honour step of o's late payment (the order paid, its
// retake's row honoured).
func honourStep(o flashgate.Order) flashgate.PaymentStep {
	return flashgate.PaymentStep{OrderID: o.ID, FromOutcome: []string{"late_pending"}, ToOutcome: "honoured_late",
		FromStatus: []flashgate.OrderStatus{flashgate.StatusExpired}, ToStatus: flashgate.StatusPaid, Retake: true}
}

// flush loses everything Redis holds.
func (f *fixture) flush() {
	f.t.Helper()
	if err := f.rdb.FlushAll(f.ctx).Err(); err != nil {
		f.t.Fatalf("FLUSHALL: %v", err)
	}
}
