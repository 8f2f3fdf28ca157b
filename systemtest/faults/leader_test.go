//go:build faults

package faults

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver, for backdating orders

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/lua"
)

// pausedLeaderScenario: two control planes; the leader is frozen (SIGSTOP)
// in the middle of rebuilding a sale Redis lost, past its 5s lease, while
// orders fall due; the other control plane takes the lease, rebuilds the
// sale and expires them; then the old leader is resumed. Its late writes
// must be refused (fenced), so that no restore, expiry or release is
// applied twice, and every invariant holds.
var pausedLeaderScenario = scenario{
	name: "controlplane-paused-leader",
	fault: "two control planes; the leader frozen (SIGSTOP) mid-rebuild of the sale for 8s, past its 5s lease, while 25 orders fall due; " +
		"the other takes over, then the old leader is resumed (PostgreSQL)",
	needs:   "18.4 (fencing)",
	opts:    clusterOpts{postgres: true, controlPlanes: 2},
	between: pausedLeader,
}

// pausedLeaderExpiries is how many orders fall due during the pause.
const pausedLeaderExpiries = 25

// leaderProc is the control plane that holds the leader lease now, or nil.
func (x *run) leaderProc(ctx context.Context) *proc {
	v, err := x.c.rdb.Get(ctx, lua.LeaderKey()).Result()
	if err != nil {
		return nil
	}
	for _, p := range []*proc{x.c.cp, x.c.cp2} {
		if p != nil && strings.Contains(v, "-"+strconv.Itoa(p.pid())+"-") {
			return p
		}
	}
	return nil
}

func pausedLeader(ctx context.Context, x *run) {
	var old *proc
	if _, ok := testwait.For(15*time.Second, func() bool { old = x.leaderProc(ctx); return old != nil }); !ok {
		x.problem("no control plane holds the leader lease")
		return
	}
	other := x.c.cp2
	if old == x.c.cp2 {
		other = x.c.cp
	}
	due := x.dueOrders(ctx)
	if len(due) < pausedLeaderExpiries {
		x.problem("paused leader: %d live unpaid orders, want %d", len(due), pausedLeaderExpiries)
		return
	}
	due = due[:pausedLeaderExpiries]
	before, _ := x.c.rdb.HGet(ctx, lua.SaleKey(x.sale), lua.FieldBooked).Int64()

	// Redis loses the sale's stock, buyers and releases: the leader's next
	// re-sync restores them from every row. It is frozen as soon as its
	// restore has written (the released set and buyers come back before
	// the stock).
	keys := []string{lua.SaleKey(x.sale), lua.BuyersKey(x.sale), lua.ReleasedKey(x.sale)}
	if err := x.c.rdb.Del(ctx, keys...).Err(); err != nil {
		x.problem("deleting the sale's keys: %v", err)
		return
	}
	x.event("the sale's hash, buyers and released set deleted from Redis (booked was %d)", before)
	midRestore, began := false, false
	// Polled every 2 ms, faster than testwait, to catch the restore mid-way.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		r, err := x.c.rdb.SCard(ctx, lua.ReleasedKey(x.sale)).Result()
		b, berr := x.c.rdb.HLen(ctx, lua.BuyersKey(x.sale)).Result()
		if err == nil && berr == nil && r+b > 0 {
			total, err := x.c.rdb.HExists(ctx, lua.SaleKey(x.sale), lua.FieldTotal).Result()
			began, midRestore = true, err == nil && !total
			break
		}
	}
	if !began {
		x.problem("the leader never began rebuilding the sale")
		return
	}
	if err := old.signal(syscall.SIGSTOP); err != nil {
		x.problem("SIGSTOP %s: %v", old.name, err)
		return
	}
	frozeAt := time.Now()
	x.event("SIGSTOP %s (the leader; its restore %s)", old.name, map[bool]string{true: "in flight", false: "already done"}[midRestore])

	// While it is frozen, orders fall due (created an hour earlier).
	if err := x.backdate(ctx, due); err != nil {
		x.problem("backdating orders: %v", err)
		_ = old.signal(syscall.SIGCONT)
		return
	}
	took, ok := testwait.For(20*time.Second, func() bool { return x.leaderProc(ctx) == other })
	if !ok {
		x.problem("%s never took the lease of the frozen leader", other.name)
	} else {
		x.event("%s took the lease %v after the freeze", other.name, took.Round(10*time.Millisecond))
	}
	if _, ok := testwait.For(20*time.Second, func() bool { return x.expired(ctx, due) == len(due) }); !ok {
		x.problem("the new leader expired %d of %d due orders", x.expired(ctx, due), len(due))
	}
	if _, ok := testwait.For(20*time.Second, func() bool {
		n, err := x.c.rdb.HExists(ctx, lua.SaleKey(x.sale), lua.FieldTotal).Result()
		return err == nil && n
	}); !ok {
		x.problem("the new leader never rebuilt the sale")
	}
	// The new leader's work settles: booked is the database's live units.
	var live int64
	if _, ok := testwait.For(20*time.Second, func() bool {
		fig, err := x.c.db.Figures(ctx, x.sale)
		b, berr := x.c.rdb.HGet(ctx, lua.SaleKey(x.sale), lua.FieldBooked).Int64()
		live = fig.LiveUnits
		return err == nil && berr == nil && b == live
	}); !ok {
		x.problem("booked never matched the %d live units after the new leader's expiries", live)
	}
	// Not a synchronisation: the freeze lasts 8s in all.
	time.Sleep(time.Until(frozeAt.Add(8 * time.Second)))
	logAt := len(readLog(old.log))
	x.repair("SIGCONT "+old.name, func() error { return old.signal(syscall.SIGCONT) })

	// The old leader's late work: its next renewal fails and it stops
	// leading; whatever it wrote before that was fenced. Meanwhile, and for
	// a re-sync period after, nothing may change the stock the new leader
	// set (a stale restore and re-sync would set booked from the old
	// leader's snapshot, before the expiries).
	var stopped time.Duration
	var changed []int64
	resumed := time.Now()
	// An observation window (nothing may change booked), not a wait.
	for deadline := resumed.Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if b, err := x.c.rdb.HGet(ctx, lua.SaleKey(x.sale), lua.FieldBooked).Int64(); err == nil && b != live && len(changed) < 5 {
			changed = append(changed, b)
		}
		if stopped == 0 && strings.Contains(readLog(old.log)[logAt:], "control plane no longer leads") {
			stopped = time.Since(resumed)
		}
		if stopped > 0 && time.Since(resumed) > stopped+1500*time.Millisecond {
			break
		}
	}
	if stopped == 0 {
		x.problem("%s, resumed, never logged that it stopped leading", old.name)
	}
	if len(changed) > 0 {
		x.problem("FENCE: after %s resumed, booked left the %d live units: %v", old.name, live, changed)
	}
	fenced := strings.Count(readLog(old.log)[logAt:], "a newer writer holds the fence")
	x.notef("%s, resumed, stopped leading within %v; %d of its writes were refused by the fence (the others never left: its term had ended)",
		old.name, stopped.Round(100*time.Millisecond), fenced)

	// No expiry or release twice: each due order expired once, its unit
	// given back once (booked = live units), and no restored buyer entry of
	// an expired order.
	if n := x.expired(ctx, due); n != len(due) {
		x.problem("EXPIRY: %d of %d due orders expired", n, len(due))
	}
	x.settle(ctx, 20*time.Second)
	after, _ := x.c.rdb.HGet(ctx, lua.SaleKey(x.sale), lua.FieldBooked).Int64()
	fig, err := x.c.db.Figures(ctx, x.sale)
	if err != nil {
		x.problem("figures: %v", err)
		return
	}
	x.notef("booked %d → %d after the expiries and a re-sync, %d live units, %d expired rows", before, after, fig.LiveUnits, fig.Expired)
	if after != before-pausedLeaderExpiries || after != fig.LiveUnits || fig.Expired != pausedLeaderExpiries {
		x.problem("FENCE: after %d expiries booked went %d → %d, the database holds %d live units and %d expired rows; want booked %d = live units, %d expired",
			pausedLeaderExpiries, before, after, fig.LiveUnits, fig.Expired, before-pausedLeaderExpiries, pausedLeaderExpiries)
	}
	for _, o := range due {
		if v, err := x.c.rdb.HGet(ctx, lua.BuyersKey(x.sale), o.UserID).Result(); err == nil && v == o.ID {
			x.problem("RESTORE: user %s holds a buyer entry for the expired order %s", o.UserID, o.ID)
		}
		if in, err := x.c.rdb.SIsMember(ctx, lua.ReleasedKey(x.sale), o.ID).Result(); err != nil || !in {
			x.problem("RELEASE: expired order %s is not in the released set (%v)", o.ID, err)
		}
	}
}

// dueOrders lists the sale's unpaid live orders.
func (x *run) dueOrders(ctx context.Context) []flashgate.Order {
	live, err := x.c.db.LiveOrders(ctx, x.sale)
	if err != nil {
		x.problem("reading live orders: %v", err)
		return nil
	}
	var out []flashgate.Order
	for _, o := range live {
		if o.Status == flashgate.StatusPendingPayment {
			out = append(out, o)
		}
	}
	return out
}

// backdate moves orders' creation an hour back, so that they are due.
func (x *run) backdate(ctx context.Context, orders []flashgate.Order) error {
	db, err := sql.Open("pgx", x.c.dbURL)
	if err != nil {
		return err
	}
	defer db.Close()
	for _, o := range orders {
		if _, err := db.ExecContext(ctx, `UPDATE orders SET created_at = created_at - interval '1 hour' WHERE order_id = $1`, o.ID); err != nil {
			return fmt.Errorf("order %s: %w", o.ID, err)
		}
	}
	return nil
}

// expired counts the orders whose row is expired.
func (x *run) expired(ctx context.Context, orders []flashgate.Order) int {
	n := 0
	for _, o := range orders {
		if got, err := x.c.db.Order(ctx, o.ID); err == nil && got.Status == flashgate.StatusExpired {
			n++
		}
	}
	return n
}

// readLog is a process's log, "" when unreadable.
func readLog(path string) string {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return ""
	}
	return string(b)
}
