package resync

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/internal/cptest"
	"github.com/flashgate/flashgate/controlplane/internal/fencing"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/lua"
	"github.com/flashgate/flashgate/sqldb"
)

// snapStore is the database, with a step run right after a pass's
// snapshot (its figures).
type snapStore struct {
	*sqldb.DB
	after func()
}

func (p *snapStore) Figures(ctx context.Context, id string) (flashgate.SaleFigures, error) {
	f, err := p.DB.Figures(ctx, id)
	if p.after != nil {
		p.after()
		p.after = nil
	}
	return f, err
}

// TestRefundOfHonouredAfterSnapshot: an admin refund of an honoured late
// payment's order whose last step (the retake owed back: its row leaves
// the persisted units) and unretake ("1": reserved given back too) both
// land between a pass's snapshot and its script. The snapshot's P still
// counts the retake row, the hash's reserved no longer does: the script
// reads reserved below P as a Redis older than the database and raises
// reserved to the snapshot's P. From then on every quiet pass reads the
// excess as a unit reserved and not yet persisted, and books it: one
// unit hidden until the sale's next rebuild.
func TestRefundOfHonouredAfterSnapshot(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) { testRefundOfHonouredAfterSnapshot(t, be.dsn(t), false) })
	}
}

// TestRefundOfHonouredDuringRebuild: as TestRefundOfHonouredAfterSnapshot,
// with Redis having lost the sale before the pass: the refund's unretake
// finds no sale (-1), RetakeGivenBack drops the row all the same, and the
// rebuild writes reserved from its snapshot, which still counted the
// retake's row (and the order live). Every later pass books the unit.
func TestRefundOfHonouredDuringRebuild(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) { testRefundOfHonouredAfterSnapshot(t, be.dsn(t), true) })
	}
}

func testRefundOfHonouredAfterSnapshot(t *testing.T, dsn string, lost bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db := cptest.OpenDB(t, dsn)
	rdb := redistest.Start(t).Client(t)
	sale := flashgate.Sale{ID: "snap", Name: "Snap", Total: 2, PerUser: 1, PriceCents: 100, State: flashgate.StateOpen}
	if err := db.CreateSale(ctx, sale); err != nil {
		t.Fatalf("CreateSale: %v", err)
	}
	tok, err := lua.TakeFence.Run(ctx, rdb, lua.FenceKeys(), time.Now().UnixMilli()).Int64()
	if err != nil {
		t.Fatalf("TakeFence: %v", err)
	}
	ctx = fencing.WithValue(ctx, tok)
	if err := lua.Prepare.Run(ctx, rdb, lua.SaleKeys(sale.ID), sale.Total, flashgate.AdmitCap(sale.Total, 0), 1, sale.PriceCents).Err(); err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	if err := lua.SetState.Run(ctx, rdb, lua.SaleKeys(sale.ID), "open", tok).Err(); err != nil {
		t.Fatalf("SetState: %v", err)
	}
	for _, u := range []string{"u0", "u1"} {
		if code, _ := cptest.Reserve(t, ctx, rdb, sale.ID, u, "o"+u[1:], time.Now()); code != lua.ReserveOK {
			t.Fatalf("reserve of %s: got code %d, want %d", u, code, lua.ReserveOK)
		}
	}
	orders := cptest.Persist(t, ctx, rdb, db, sale.ID)
	o1 := orders[1]
	now := time.Now()
	// o1 expires, its payment succeeds late, is retaken and honoured.
	if _, err := db.InsertPayment(ctx, flashgate.Payment{OrderID: o1.ID, IntentID: "pi_o1", Status: flashgate.IntentSucceeded, AmountCents: 100, Currency: "usd"}, now); err != nil {
		t.Fatalf("InsertPayment: %v", err)
	}
	if _, err := db.Transition(ctx, o1.ID, []flashgate.OrderStatus{flashgate.StatusPendingPayment}, flashgate.StatusExpired, now); err != nil {
		t.Fatalf("Transition: %v", err)
	}
	if _, err := (&cptest.Releaser{RDB: rdb}).Release(ctx, o1); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if won, err := db.StepPayment(ctx, flashgate.PaymentStep{OrderID: o1.ID, FromOutcome: []string{""}, ToOutcome: "late_pending"}, now); !won || err != nil {
		t.Fatalf("late_pending: %v, %v", won, err)
	}
	if ok, err := db.PendRetake(ctx, o1.ID, now); !ok || err != nil {
		t.Fatalf("PendRetake: %v, %v", ok, err)
	}
	if got, err := lua.Retake.Run(ctx, rdb, lua.RetakeKeys(sale.ID), o1.ID, o1.UserID, 1, "").Int64(); err != nil || got != lua.RetakeOK {
		t.Fatalf("retake: got %d, %v; want %d", got, err, lua.RetakeOK)
	}
	honour := flashgate.PaymentStep{OrderID: o1.ID, FromOutcome: []string{"late_pending"}, ToOutcome: "honoured_late",
		FromStatus: []flashgate.OrderStatus{flashgate.StatusExpired}, ToStatus: flashgate.StatusPaid, Retake: true}
	if won, err := db.StepPayment(ctx, honour, now); !won || err != nil {
		t.Fatalf("honour: %v, %v", won, err)
	}
	s := New(rdb, db, nil, cptest.QuietLogger(), prometheus.NewCounter(prometheus.CounterOpts{Name: "resyncs"}))
	if _, after, err := s.Resync(ctx, sale.ID); err != nil || after.Booked != 2 {
		t.Fatalf("pass after the honour: got booked %d, %v; want 2", after.Booked, err)
	}
	// A pass whose snapshot precedes the admin refund's last step and
	// its unretake (finishRefund, controlplane/orders/refund.go).
	store := &snapStore{DB: db, after: func() {
		for _, st := range []flashgate.PaymentStep{
			{OrderID: o1.ID, FromOutcome: []string{"honoured_late"}, ToOutcome: "refunding"},
			{OrderID: o1.ID, FromOutcome: []string{"refunding"}, ToOutcome: "refunded", FromStatus: []flashgate.OrderStatus{flashgate.StatusPaid},
				ToStatus: flashgate.StatusRefunded, Refunded: true, RefundID: "re_1", OweRetake: true},
		} {
			if won, err := db.StepPayment(ctx, st, now); !won || err != nil {
				t.Errorf("refund step %s: %v, %v", st.ToOutcome, won, err)
			}
		}
		if _, err := (&cptest.Releaser{RDB: rdb}).Release(ctx, o1); err != nil {
			t.Errorf("Release: %v", err)
		}
		if n, err := lua.Unretake.Run(ctx, rdb, lua.UnretakeKeys(sale.ID), o1.ID, o1.UserID, 1, "", "").Int(); err != nil || (n != 1 && !lost) {
			t.Errorf("unretake: got %d, %v; want 1 (given back)", n, err)
		}
		if err := db.RetakeGivenBack(ctx, o1.ID); err != nil {
			t.Errorf("RetakeGivenBack: %v", err)
		}
	}}
	if lost {
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			t.Fatalf("FLUSHALL: %v", err)
		}
	}
	raced := New(rdb, store, nil, cptest.QuietLogger(), prometheus.NewCounter(prometheus.CounterOpts{Name: "resyncs"}))
	if _, after, err := raced.Resync(ctx, sale.ID); err != nil {
		t.Fatalf("the raced pass: %v", err)
	} else {
		t.Logf("raced pass: booked %d reserved %d", after.Booked, after.Reserved)
	}
	for i := range 2 {
		_, after, err := s.Resync(ctx, sale.ID)
		if err != nil {
			t.Fatalf("quiet pass %d: %v", i, err)
		}
		t.Logf("quiet pass %d: booked %d reserved %d", i, after.Booked, after.Reserved)
	}
	if got := cptest.Field(t, rdb, sale.ID, lua.FieldBooked); got != 1 {
		code, _ := cptest.Reserve(t, ctx, rdb, sale.ID, "u2", "o2", time.Now())
		t.Fatalf("after quiet passes: got booked %d, want 1 (o0 live); a reserve of o2 answers %d (%d = reserved): o1's unit hidden", got, code, lua.ReserveOK)
	}
}
