package resync

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/internal/cptest"
	"github.com/flashgate/flashgate/lua"
)

// TestHoldOfStoppedRebuild: a rebuild that read a pending retake and
// stops before its final Resync (its process killed, or its lease lost)
// leaves nothing held: the hold is that Resync's, with the count of its
// units. A second rebuild, which no longer reads the retake as pending
// (the late payment's refund dropped its row in between), writes the
// hash without it, and the refund's unretake, resumed after the sale
// reopened, gives nothing back. Before (a reviewer's window), the first
// rebuild held the order in a call of its own (retaken, refusal 6), and
// the unretake gave back a unit the hash never counted: booked dropped
// below the live units, and two new buyers took three units of two.
func TestHoldOfStoppedRebuild(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) { testHoldOfStoppedRebuild(t, be.dsn(t)) })
	}
}

func testHoldOfStoppedRebuild(t *testing.T, dsn string) {
	sale := flashgate.Sale{ID: "stopped", Name: "Stopped", Total: 2, PerUser: 1, PriceCents: 100, State: flashgate.StateOpen}
	f := openSale(t, dsn, sale)
	ctx, db, rdb := f.ctx, f.db, f.rdb
	orders := f.buy("u0", "u1")
	o1 := orders[1]
	now := time.Now()
	// o1 expires (released); its payment succeeds late, a settler pends
	// its retake and makes it in Redis (decideLate).
	f.lateRetake(o1)
	// Redis loses the sale.
	f.flush()
	newSyncer := func() *Syncer {
		return f.syncer(db)
	}
	// Rebuild A runs Resync's restore path (controlplane/resync/resync.go:
	// Restore, MarkRestored, the second reads) and stops at its final
	// Resync: its process is killed there (the call never reaches Redis).
	killed := errors.New("killed before the final Resync")
	ardb := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr})
	t.Cleanup(func() { _ = ardb.Close() })
	ardb.AddHook(failHook{fail: finalResync, err: killed})
	if _, _, err := f.syncerOn(ardb, db).Resync(ctx, sale.ID); !errors.Is(err, killed) {
		t.Fatalf("rebuild A: got %v, want it stopped at its final Resync", err)
	}
	if rdb.SIsMember(ctx, lua.RetakenKey(sale.ID), o1.ID).Val() {
		t.Fatalf("after A stopped: o1 held (in the retaken set) by a rebuild that counted nothing")
	}
	// A's hold is its final Resync's, which never runs: nothing is held.
	// The settler asks again and takes nothing (the sale is not rebuilt
	// yet); the late payment is refunded (the sale closed in the
	// database, say). Its first step drops the retakes row; it stops
	// before its unretake (finishRefundLate), which the reconciliation
	// resumes later.
	if got, err := lua.Retake.Run(ctx, rdb, lua.RetakeKeys(sale.ID), o1.ID, o1.UserID, 1, "").Int64(); err != nil || got == lua.RetakeOK {
		t.Fatalf("retake while the sale is rebuilt: got %d, %v; want it to take nothing", got, err)
	}
	if won, err := db.StepPayment(ctx, flashgate.PaymentStep{OrderID: o1.ID, FromOutcome: []string{"late_pending"}, ToOutcome: "refunding_late", DropRetake: true}, now); !won || err != nil {
		t.Fatalf("refunding_late: %v, %v", won, err)
	}
	// Rebuild B (the next pass, on any control plane) rebuilds the sale,
	// and the pass after it reopens it.
	b := newSyncer()
	for i := range 2 {
		if _, after, err := b.Resync(ctx, sale.ID); err != nil {
			t.Fatalf("pass %d after A stopped: %v", i, err)
		} else {
			t.Logf("pass %d: booked %d reserved %d start %d", i, after.Booked, after.Reserved, cptest.Field(t, rdb, sale.ID, lua.FieldStart))
		}
	}
	if start, booked := cptest.Field(t, rdb, sale.ID, lua.FieldStart), cptest.Field(t, rdb, sale.ID, lua.FieldBooked); start != 1 || booked != 1 {
		t.Fatalf("after two passes: got start %d, booked %d; want the sale open with booked 1 (o0 live)", start, booked)
	}
	// The reconciliation resumes the late refund: its unretake.
	n, err := lua.Unretake.Run(ctx, rdb, lua.UnretakeKeys(sale.ID), o1.ID, o1.UserID, 1, "", "1").Int()
	if err != nil {
		t.Fatalf("unretake: %v", err)
	}
	if got := cptest.Field(t, rdb, sale.ID, lua.FieldBooked); got != 1 {
		code2, _ := cptest.Reserve(t, ctx, rdb, sale.ID, "u2", "o2", time.Now())
		code3, _ := cptest.Reserve(t, ctx, rdb, sale.ID, "u3", "o3", time.Now())
		t.Fatalf("after the resumed unretake (answer %d): got booked %d, want 1 (o0 live; the hash never counted o1); reserves of o2 and o3 then answer %d, %d (%d = reserved: three live units of two)",
			n, got, code2, code3, lua.ReserveOK)
	}
}

// failHook fails, with err and without sending it, every command fail
// picks.
type failHook struct {
	fail func(redis.Cmder) bool
	err  error
}

func (h failHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h failHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h failHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.fail(cmd) {
			cmd.SetErr(h.err)
			return h.err
		}
		return next(ctx, cmd)
	}
}

// finalResync reports whether cmd is a rebuild's final lua.Resync call:
// its ARGV[9] says the restore is done ("1:<id>").
func finalResync(cmd redis.Cmder) bool {
	args := cmd.Args()
	if len(args) < 3 || (cmd.Name() != "evalsha" && cmd.Name() != "eval") {
		return false
	}
	if fmt.Sprint(args[1]) != lua.Resync.Hash() && !strings.Contains(fmt.Sprint(args[1]), "-- Resync gives") {
		return false
	}
	n, err := strconv.Atoi(fmt.Sprint(args[2]))
	if i := 3 + n + 8; err != nil || i >= len(args) {
		return false
	}
	return strings.HasPrefix(fmt.Sprint(args[3+n+8]), "1:")
}
