package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/testenv/redistest"
)

// stormResult is the storm phase's part of the report.
type stormResult struct {
	Orders     int64         // unpaid orders set up
	SetupRate  float64       // purchases/s while setting them up
	Took       time.Duration // from the restart with a short window until all expired and booked was 0
	Done       bool
	Expired    int64
	Booked     int64
	LogLines   int // lines serve logged from the restart until the storm was over
	WarnLines  int // of which WARN or ERROR
	Buying     *crowdRun
	BuyingRate int
	Idle       idleCost
	RSS        float64
}

// idleCost is what Redis did while nothing happened.
type idleCost struct {
	Seconds     int
	BusyMsPerS  float64
	CallsPerS   float64
	Top         []cmdCost // by time
	Slowest     time.Duration
	SlowestCmd  string
	SlowOver5ms int
}

// stormBuySeconds is how long buyers keep buying from the restart on.
const stormBuySeconds = 20

type cmdCost struct {
	Name  string
	Calls int64
	Usec  int64
}

func (b *bench) stormPhase(ctx context.Context) error {
	res := &stormResult{BuyingRate: b.cfg.StormRate}
	b.rep.storm = res
	db, err := b.dbURL(ctx, "bench_storm")
	if err != nil {
		return err
	}
	// Setting up: no per-sale limit, so that every buyer of the setup
	// crowd gets a unit.
	st, err := b.startStack(ctx, "storm", db, "--sale-rate", "0")
	if err != nil {
		return err
	}
	for _, s := range []string{"storm", "live"} {
		if err := b.createSale(st, s, maxUnits, true); err != nil {
			return err
		}
	}
	time.Sleep(300 * time.Millisecond)
	b.logf("  setting up %d unpaid orders", b.cfg.StormOrders)
	c, err := b.crowd(ctx, st.gw, "storm", b.cfg.StormOrders, 64, 0, nil)
	if err != nil {
		return err
	}
	res.Orders, res.SetupRate = int64(c.Answers["201"]), c.Rate
	if _, err := b.waitFigures(ctx, st, "storm", 5*time.Minute, func(f saleFigures) bool {
		return f.StreamBacklog == 0 && f.Orders.PendingPayment >= res.Orders
	}); err != nil {
		return fmt.Errorf("waiting for the setup orders to reach the database: %w", err)
	}

	// The storm: every one of them is due at once.
	b.logf("  expiry storm of %d orders", res.Orders)
	t0 := time.Now()
	if err := b.startServe(ctx, st, "--payment-window", "1s", "--log-level", "info"); err != nil {
		return err
	}
	buyDone := make(chan struct{})
	if b.cfg.StormRate > 0 {
		go func() {
			defer close(buyDone)
			cr, err := b.crowd(ctx, st.gw, "live", b.cfg.StormRate*stormBuySeconds, 64, float64(b.cfg.StormRate), nil)
			if err == nil {
				res.Buying = &cr
			}
		}()
	} else {
		close(buyDone)
	}
	f, err := b.waitFigures(ctx, st, "storm", b.cfg.StormLimit, func(f saleFigures) bool {
		return f.Orders.Expired >= res.Orders && f.Booked == 0
	})
	res.Took, res.Done, res.Expired, res.Booked = time.Since(t0), err == nil, f.Orders.Expired, f.Booked
	if log, err := os.ReadFile(st.serve.Log()); err == nil {
		for _, l := range strings.Split(string(log), "\n") {
			if l == "" {
				continue
			}
			res.LogLines++
			if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
				res.WarnLines++
			}
		}
	}
	select {
	case <-buyDone:
	case <-ctx.Done():
		return ctx.Err()
	}

	// Idle, with every order of the sale released.
	time.Sleep(3 * time.Second)
	b.logf("  idle for %ds", b.cfg.IdleSeconds)
	res.Idle, err = idle(ctx, st.rdb, b.cfg.IdleSeconds)
	res.RSS = rss(st.serve.Pid())
	return err
}

// commandStats reads INFO commandstats.
func commandStats(ctx context.Context, rdb *redis.Client) (map[string]cmdCost, error) {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	out := map[string]cmdCost{}
	for name, st := range redistest.CommandStats(info) {
		out[name] = cmdCost{Name: name, Calls: st.Calls, Usec: st.Usec}
	}
	return out, nil
}

// idle measures Redis's busy time and its slowest command over a window.
func idle(ctx context.Context, rdb *redis.Client, seconds int) (idleCost, error) {
	ic := idleCost{Seconds: seconds}
	old, _ := rdb.ConfigGet(ctx, "slowlog-*").Result()
	defer func() {
		for k, v := range old {
			rdb.ConfigSet(context.Background(), k, v)
		}
	}()
	if err := rdb.ConfigSet(ctx, "slowlog-log-slower-than", "0").Err(); err != nil {
		return ic, err
	}
	rdb.ConfigSet(ctx, "slowlog-max-len", "100000")
	rdb.SlowLogReset(ctx)
	before, err := commandStats(ctx, rdb)
	if err != nil {
		return ic, err
	}
	t0 := time.Now()
	select {
	case <-ctx.Done():
		return ic, ctx.Err()
	case <-time.After(time.Duration(seconds) * time.Second):
	}
	after, err := commandStats(ctx, rdb)
	if err != nil {
		return ic, err
	}
	el := time.Since(t0).Seconds()
	logs, err := rdb.SlowLogGet(ctx, 100000).Result()
	if err != nil {
		return ic, err
	}
	var total, calls int64
	for name, a := range after {
		// The measuring itself (INFO, SLOWLOG, CONFIG) is not counted.
		if name == "info" || strings.HasPrefix(name, "slowlog") || strings.HasPrefix(name, "config") {
			continue
		}
		d := cmdCost{Name: name, Calls: a.Calls - before[name].Calls, Usec: a.Usec - before[name].Usec}
		if d.Calls == 0 {
			continue
		}
		total += d.Usec
		calls += d.Calls
		ic.Top = append(ic.Top, d)
	}
	sort.Slice(ic.Top, func(i, j int) bool { return ic.Top[i].Usec > ic.Top[j].Usec })
	if len(ic.Top) > 5 {
		ic.Top = ic.Top[:5]
	}
	ic.BusyMsPerS = float64(total) / 1000 / el
	ic.CallsPerS = float64(calls) / el
	for _, l := range logs {
		name := ""
		if len(l.Args) > 0 {
			name = strings.ToLower(l.Args[0])
		}
		if name == "info" || name == "slowlog" || name == "config" {
			continue
		}
		if l.Duration > 5*time.Millisecond {
			ic.SlowOver5ms++
		}
		if l.Duration > ic.Slowest {
			ic.Slowest, ic.SlowestCmd = l.Duration, describeSlow(l.Args)
		}
	}
	return ic, nil
}

// describeSlow names a slow-log entry: the command, and how many arguments
// it had (the arguments themselves are user data). Redis keeps 32 of them
// and makes the last "... (N more arguments)".
func describeSlow(args []string) string {
	if len(args) == 0 {
		return "?"
	}
	s := strings.ToUpper(args[0])
	n := len(args) - 1
	var more int
	if _, err := fmt.Sscanf(args[len(args)-1], "... (%d more arguments)", &more); err == nil {
		n += more - 1
	}
	if n > 0 {
		s += fmt.Sprintf(" with %d arguments", n)
	}
	return s
}
