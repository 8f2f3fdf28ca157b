package resync

import (
	"context"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/internal/cptest"
	"github.com/flashgate/flashgate/controlplane/internal/fencing"
	"github.com/flashgate/flashgate/lua"
	"github.com/flashgate/flashgate/sqldb"
)

// reholdStore is the database, with a step run once right after a pass's
// snapshot (Figures), once before its restore's first page, and once
// right after its read of the honoured retakes (HonouredRetakes, a rebuild's last read before its final
// Resync).
type reholdStore struct {
	*sqldb.DB
	afterFigures, beforeRestore, afterHonoured func()
}

func (h *reholdStore) OrdersPage(ctx context.Context, id string, st flashgate.OrderStatus, after string, n int) ([]flashgate.Order, error) {
	if h.beforeRestore != nil {
		fn := h.beforeRestore
		h.beforeRestore = nil
		fn()
	}
	return h.DB.OrdersPage(ctx, id, st, after, n)
}

func (h *reholdStore) Figures(ctx context.Context, id string) (flashgate.SaleFigures, error) {
	f, err := h.DB.Figures(ctx, id)
	if h.afterFigures != nil {
		fn := h.afterFigures
		h.afterFigures = nil
		fn()
	}
	return f, err
}

func (h *reholdStore) HonouredRetakes(ctx context.Context, id string) ([]flashgate.Order, error) {
	o, err := h.DB.HonouredRetakes(ctx, id)
	if h.afterHonoured != nil {
		fn := h.afterHonoured
		h.afterHonoured = nil
		fn()
	}
	return o, err
}

// TestHoldOfRefundedHonoured: a rebuild X read o1's retake as pending
// before its snapshot and as honoured after its restore, so it holds o1
// in its final Resync (RetakesToHold). X is an admin re-sync on another
// control plane, with a fresh token; Y, the leader's pass with the older
// token, rebuilds the sale between X's first Resync (no sale) and X's
// restore (o1 paid in Y's reads, not held, not in the retaken set).
// After X's last read, an admin refund of o1 lands: its release
// gives o1's unit back, its unretake ("" : owed) finds o1 outside the
// retaken set and answers 0 without recording a refusal, and the row is
// marked given back (3). X's final Resync then holds o1 anyway (no
// refusal recorded: hold_retake takes it), putting the refunded order
// back in the retaken set with refusal 6. The next pass sets booked
// right, but o1 stays in the retaken set for good, so any later
// unretakeOrLog of o1 (the finisher that lost the refund's last step,
// refund.go's trailing unretakeOrLog; or the admin asking again) gives
// its unit back a second time: booked drops below the live units and
// the sale oversells.
func TestHoldOfRefundedHonoured(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) { testHoldOfRefundedHonoured(t, be.dsn(t)) })
	}
}

func testHoldOfRefundedHonoured(t *testing.T, dsn string) {
	sale := flashgate.Sale{ID: "rehold", Name: "Rehold", Total: 2, PerUser: 1, PriceCents: 100, State: flashgate.StateOpen}
	f := openSale(t, dsn, sale)
	ctx, db, rdb := f.ctx, f.db, f.rdb
	orders := f.buy("u0", "u1")
	o1 := orders[1]
	now := time.Now()
	// o1 expires (released); its payment succeeds late, a settler pends
	// its retake and makes it in Redis.
	f.lateRetake(o1)
	rel := &cptest.Releaser{RDB: rdb}
	// Redis loses the sale.
	f.flush()
	newSyncer := f.syncer
	hs := &reholdStore{DB: db}
	// Right after X's snapshot (o1 expired in it), the settler's honour
	// step lands (settle.go: RetakeOK).
	hs.afterFigures = func() {
		if won, err := db.StepPayment(ctx, honourStep(o1), now); !won || err != nil {
			t.Errorf("honour: %v, %v", won, err)
		}
	}
	// Between X's first Resync and its restore, the leader's pass Y (the
	// older token) rebuilds the sale.
	yctx := ctx
	xtok, err := lua.TakeFence.Run(ctx, rdb, lua.FenceKeys(), time.Now().UnixMilli()).Int64()
	if err != nil || xtok <= fencing.Of(yctx) {
		t.Fatalf("TakeFence: %d, %v", xtok, err)
	}
	ctx = fencing.WithValue(ctx, xtok)
	hs.beforeRestore = func() {
		if _, _, err := newSyncer(db).Resync(yctx, sale.ID); err != nil {
			t.Errorf("Y's rebuild: %v", err)
		}
	}
	// Right after X's HonouredRetakes read (o1 in it: X holds o1), the
	// admin refund of o1 lands with its release and unretake
	// (refund.go: finishRefund, unretakeOrLog).
	hs.afterHonoured = func() {
		for _, st := range []flashgate.PaymentStep{
			{OrderID: o1.ID, FromOutcome: []string{"honoured_late"}, ToOutcome: "refunding"},
			{OrderID: o1.ID, FromOutcome: []string{"refunding"}, ToOutcome: "refunded", FromStatus: []flashgate.OrderStatus{flashgate.StatusPaid},
				ToStatus: flashgate.StatusRefunded, Refunded: true, RefundID: "re_o1", IntentStatus: flashgate.IntentSucceeded, OweRetake: true},
		} {
			if won, err := db.StepPayment(ctx, st, now); !won || err != nil {
				t.Errorf("refund step %s: %v, %v", st.ToOutcome, won, err)
			}
		}
		if _, err := rel.Release(ctx, o1); err != nil {
			t.Errorf("refund's release: %v", err)
		}
		n, err := lua.Unretake.Run(ctx, rdb, lua.UnretakeKeys(sale.ID), o1.ID, o1.UserID, 1, "", "").Int()
		if err != nil {
			t.Errorf("refund's unretake: %v", err)
		}
		t.Logf("refund's unretake answered %d; booked %d", n, cptest.Field(t, rdb, sale.ID, lua.FieldBooked))
		if err := db.RetakeGivenBack(ctx, o1.ID); err != nil {
			t.Errorf("RetakeGivenBack: %v", err)
		}
	}
	if _, after, err := newSyncer(hs).Resync(ctx, sale.ID); err != nil {
		t.Fatalf("X's rebuild: %v", err)
	} else {
		t.Logf("X: booked %d reserved %d", after.Booked, after.Reserved)
	}
	// Quiet passes: the sale reopens with booked 1 (o0 live).
	for i := range 2 {
		if _, after, err := newSyncer(db).Resync(ctx, sale.ID); err != nil {
			t.Fatalf("pass %d: %v", i, err)
		} else {
			t.Logf("pass %d: booked %d reserved %d start %d", i, after.Booked, after.Reserved, cptest.Field(t, rdb, sale.ID, lua.FieldStart))
		}
	}
	if start, booked := cptest.Field(t, rdb, sale.ID, lua.FieldStart), cptest.Field(t, rdb, sale.ID, lua.FieldBooked); start != 1 || booked != 1 {
		t.Fatalf("after the passes: got start %d, booked %d; want the sale open with booked 1 (o0 live)", start, booked)
	}
	t.Logf("o1 in the retaken set: %v; refusal %q; u1's buyer entry %q",
		rdb.SIsMember(ctx, lua.RetakenKey(sale.ID), o1.ID).Val(), rdb.HGet(ctx, lua.RetakeRefusedKey(sale.ID), o1.ID).Val(),
		rdb.HGet(ctx, lua.BuyersKey(sale.ID), o1.UserID).Val())
	// The refund's other finisher (it lost the last step) or the admin
	// asking again runs unretakeOrLog (refund.go's trailing call): a
	// no-op once the units were given back.
	n, err := lua.Unretake.Run(ctx, rdb, lua.UnretakeKeys(sale.ID), o1.ID, o1.UserID, 1, "", "").Int()
	if err != nil {
		t.Fatalf("second unretake: %v", err)
	}
	if got := cptest.Field(t, rdb, sale.ID, lua.FieldBooked); got != 1 {
		code2, _ := cptest.Reserve(t, ctx, rdb, sale.ID, "u2", "o2", time.Now())
		code3, _ := cptest.Reserve(t, ctx, rdb, sale.ID, "u3", "o3", time.Now())
		t.Fatalf("after a second unretake of refunded o1 (answer %d): got booked %d, want 1 (o0 live); reserves of o2 and o3 then answer %d, %d (%d = reserved: three live units of two)",
			n, got, code2, code3, lua.ReserveOK)
	}
}
