//go:build faults

package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/lua"
)

// fairLagFailover is a lagging-replica failover during a fair sale's
// admission: every tier with its default flags behind a front proxy (as in
// lagging-replica-failover), the replica's link held back from the middle
// of the pre-queue, so entries, the start and the first admissions reach
// the primary only; 1.5s into admission the primary is killed (kill -9),
// the replica promoted and the tiers pointed at it, and the buyers go on
// with the same tickets; half the buyers arrive in the second before the
// kill. No loss window is declared: an entry answered 201
// must be in the queue at the end.
var fairLagFailover = scenario{name: "fair-lagging-replica-failover",
	fault: "a fair sale with default flags: the replica's link held back from the middle of the pre-queue, kill -9 of the primary 1.5s into admission, the replica promoted (SQLite)",
	needs: "27 (the queue holds)", own: fairLagRun}

// fairLagRun is fair-lagging-replica-failover's run.
func fairLagRun(t *testing.T, s *suite, sc scenario) result {
	var front *frontProxy
	var pair *lagPair
	start := func(t *testing.T, s *suite, sc scenario) *cluster {
		dir := filepath.Join(s.work, sc.name)
		if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o700); err != nil {
			t.Fatal(err)
		}
		front = startFrontProxy(t)
		pair = startLagPair(t)
		front.point(pair.primary.Addr)
		c := &cluster{t: t, dir: dir, jwt: []byte(randomHex(32)), admin: randomHex(32), dbKind: "sqlite",
			dbURL: "sqlite://" + filepath.Join(dir, "orders.db"), hist: newHistory()}
		c.rdb = redis.NewClient(&redis.Options{Addr: front.addr(), MaxRetries: 2, DialTimeout: time.Second, ReadTimeout: 2 * time.Second})
		c.rep = redis.NewClient(&redis.Options{Addr: front.addr()})
		t.Cleanup(c.down)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		startDefaultTiers(ctx, t, s, c, "redis://"+front.addr()+"/0")
		return c
	}
	inject := func(ctx context.Context, f *fairRun) {
		f.at(ctx, fairPrequeue/2)
		pair.link.Pause()
		f.event("the replica's link held back in the middle of the pre-queue")
		select {
		case <-time.After(time.Until(f.startsAt.Add(1500 * time.Millisecond))):
		case <-ctx.Done():
			return
		}
		pair.primary.Stop()
		f.event("kill -9 the primary 1.5s into admission")
		// The promotion ends the fault (repair records when).
		f.repair("the lagging replica promoted", func() error {
			rc := pair.replica.Client(t)
			if err := rc.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
				return fmt.Errorf("REPLICAOF NO ONE: %w", err)
			}
			front.point(pair.replica.Addr)
			return nil
		})
	}
	// Half the buyers arrive during the pre-queue, half in the second
	// before the kill: the last entries before it reach the primary only.
	arrive := func(rng *rand.Rand, f *fairRun) time.Duration {
		if rng.IntN(2) == 0 {
			return time.Duration(rng.Int64N(int64(fairPrequeue - 2*time.Second)))
		}
		return f.startsAt.Sub(f.start) + 500*time.Millisecond + time.Duration(rng.Int64N(int64(1100*time.Millisecond)))
	}
	return fairScenarioOn(start, arrive, inject)(t, s, sc)
}

// fairStock checks the rows of a fair sale once its stream is drained: no
// more live orders than units, none of one buyer twice.
func (f *fairRun) fairStock(ctx context.Context) {
	if _, ok := testwait.For(20*time.Second, func() bool {
		n, err := f.c.rdb.XLen(ctx, lua.OrdersKey(f.sale)).Result()
		return err == nil && n == 0
	}); !ok {
		f.problem("the sale's order stream never drained")
	}
	live, err := f.c.db.LiveOrders(ctx, f.sale)
	if err != nil {
		f.problem("live orders: %v", err)
		return
	}
	per := map[string]int{}
	n := 0
	for _, o := range live {
		n += int(o.Quantity)
		per[o.UserID]++
	}
	if n > fairUnits {
		f.problem("OVERSELL: %d live orders for %d units", n, fairUnits)
	}
	var twice []string
	for u, k := range per {
		if k > 1 {
			twice = append(twice, fmt.Sprintf("%s holds %d", u, k))
		}
	}
	if len(twice) > 0 {
		f.problem("TWICE: %s", strings.Join(twice, ", "))
	}
	f.event("%d live orders of %d units in the database", n, fairUnits)
}
