package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/inventory"
	"github.com/flashgate/flashgate/lua"
	"github.com/flashgate/flashgate/sqldb"
)

// The buckets phase: reserve scripts per second of one sale split in 3
// buckets against one unbucketed sale, on one local Redis Cluster of 3
// primaries (and 3 replicas), in one run. The load is the real reserve
// script (lua.Reserve, EVALSHA) with a new buyer each call, written as raw
// RESP, bucketsPipeline commands per round trip, on bucketsConnsPerPrimary
// connections to each primary a sale's keys live on (the same number of
// connections in all for both sales): generating a command costs a few
// hundred nanoseconds, against several microseconds for Redis to run it, so
// the figure is the primaries', as far as the machine's cores allow — the
// primaries and the generator share them, and the report gives each one's
// CPU.

const (
	bucketsN               = 3
	bucketsConns           = 6  // connections in all, per sale
	bucketsPipeline        = 64 // reserves per round trip
	bucketsBatch           = 32 // reserves per ReserveMany call in the batched runs
	bucketsDefaultSeconds  = 3
	bucketsDefaultRounds   = 3
	bucketsCoolDown        = 500 * time.Millisecond
	bucketsGeneratorPrefix = "bench"
)

// bucketsRun is one timed run against one sale.
type bucketsRun struct {
	Sale      string
	Buckets   int
	Batch     int     // reserves per script call (1: lua.Reserve)
	Scripts   int64   // reserves answered "reserved"
	Rate      float64 // of them per second
	Elapsed   time.Duration
	PerNode   map[string]int64   // EVALSHA calls per primary (INFO commandstats)
	NodeCPU   map[string]float64 // cores each primary used (INFO cpu)
	ReplCPU   float64            // cores the replicas used, all together
	GenCPU    float64            // cores this process (the generator) used
	Primaries int                // primaries the sale's keys are on
}

// bucketsResult is the phase's part of the report.
type bucketsResult struct {
	Seconds int
	Rounds  int
	One     []bucketsRun // unbucketed
	Split   []bucketsRun // 3 buckets
	OneB    []bucketsRun // unbucketed, bucketsBatch reserves a call
	SplitB  []bucketsRun // 3 buckets, bucketsBatch reserves a call
	Notes   []string
}

func (b *bench) bucketsPhase(ctx context.Context) error {
	seconds, err := envInt("BUCKETS_SECONDS", bucketsDefaultSeconds)
	if err != nil {
		return err
	}
	rounds, err := envInt("BUCKETS_ROUNDS", bucketsDefaultRounds)
	if err != nil {
		return err
	}
	seconds, rounds = max(seconds, 1), max(rounds, 1)
	res := &bucketsResult{Seconds: seconds, Rounds: rounds}
	b.rep.buckets = res

	dir := b.path("cluster")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	bin, err := lookPath("redis-server")
	if err != nil {
		return err
	}
	cl, err := redistest.StartClusterServers(bin, dir)
	if err != nil {
		return fmt.Errorf("starting the cluster: %w", err)
	}
	defer cl.Stop()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs})
	defer cc.Close()

	// Sales are created as the control plane creates them (bucket salts
	// placed on distinct primaries), over a throwaway SQLite database.
	db, err := sqldb.Open(ctx, "sqlite://"+filepath.Join(dir, "bench.db"))
	if err != nil {
		return err
	}
	defer db.Close()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cp, err := controlplane.New(controlplane.Config{Redis: cc, Store: db, Releaser: inventory.New(cc, inventory.Config{}),
		AdminToken: b.adminTok, Logger: quiet, PersistWait: -1, NodeID: "bench"})
	if err != nil {
		return err
	}
	sha, err := loadScript(ctx, cc, lua.Reserve)
	if err != nil {
		return err
	}
	shaMany, err := loadScript(ctx, cc, lua.ReserveMany)
	if err != nil {
		return err
	}
	type variant struct {
		n, batch int
		runs     *[]bucketsRun
	}
	variants := []variant{{1, 1, &res.One}, {bucketsN, 1, &res.Split}, {1, bucketsBatch, &res.OneB}, {bucketsN, bucketsBatch, &res.SplitB}}
	for round := range rounds {
		for _, v := range variants {
			n := v.n
			if ctx.Err() != nil {
				return ctx.Err()
			}
			id := fmt.Sprintf("bk%d-%d-%d", n, v.batch, round)
			sale := flashgate.Sale{ID: id, Name: id, PriceCents: 100, Total: maxUnits}
			if n > 1 {
				sale.Buckets = n
			}
			created, err := cp.CreateSale(ctx, sale)
			if err != nil {
				return fmt.Errorf("creating sale %s: %w", id, err)
			}
			if err := cp.Start(ctx, id); err != nil {
				return fmt.Errorf("opening sale %s: %w", id, err)
			}
			l := lua.Layout{Sale: id, Salts: created.BucketSalts}
			h := sha
			if v.batch > 1 {
				h = shaMany
			}
			run, err := reserveLoad(ctx, cc, h, v.batch, l, time.Duration(seconds)*time.Second)
			if err != nil {
				return fmt.Errorf("sale %s: %w", id, err)
			}
			b.logf("  %d bucket(s), %d a call: %s reserves/s on %d primaries (cores: primaries %s, replicas %.2f, generator %.2f)",
				n, v.batch, num(run.Rate), run.Primaries, fmtCores(run.NodeCPU), run.ReplCPU, run.GenCPU)
			*v.runs = append(*v.runs, run)
			// Each sale's keys go (a million-unit sale's buyers and stream
			// fill memory), then a pause for the lazy free.
			for _, t := range l.Tags() {
				_ = cc.Unlink(ctx, lua.BuyersKey(t)).Err()
				_ = cc.Unlink(ctx, lua.OrdersKey(t)).Err()
			}
			time.Sleep(bucketsCoolDown)
		}
	}
	return nil
}

// loadScript loads script on every primary and returns its SHA.
func loadScript(ctx context.Context, cc *redis.ClusterClient, script *redis.Script) (string, error) {
	var mu sync.Mutex
	sha := ""
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		h, err := script.Load(ctx, c).Result()
		mu.Lock()
		sha = h
		mu.Unlock()
		return err
	})
	return sha, err
}

type nodeStat struct {
	evalsha int64
	cpu     float64 // used_cpu_user + used_cpu_sys, seconds
}

// nodeStats reads every primary's (or replica's) EVALSHA calls and CPU
// seconds.
func nodeStats(ctx context.Context, cc *redis.ClusterClient, replicas bool) (map[string]nodeStat, error) {
	out := map[string]nodeStat{}
	var mu sync.Mutex
	each := cc.ForEachMaster
	if replicas {
		each = cc.ForEachSlave
	}
	err := each(ctx, func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "commandstats", "cpu").Result()
		if err != nil {
			return err
		}
		st := nodeStat{evalsha: redistest.CommandStats(info)["evalsha"].Calls, cpu: redistest.CPUSeconds(info)}
		mu.Lock()
		out[c.Options().Addr] = st
		mu.Unlock()
		return nil
	})
	return out, err
}

// fmtCores lists the cores each primary used, busiest first.
func fmtCores(m map[string]float64) string {
	var v []float64
	for _, c := range m {
		v = append(v, c)
	}
	for i := range v {
		for j := i + 1; j < len(v); j++ {
			if v[j] > v[i] {
				v[i], v[j] = v[j], v[i]
			}
		}
	}
	var s []string
	for _, c := range v {
		s = append(s, fmt.Sprintf("%.2f", c))
	}
	return strings.Join(s, " / ")
}

// bucketsSection is the phase's part of docs/BENCHMARKS.md.
func (r *report) bucketsSection() string {
	res := r.buckets
	if res == nil || len(res.One) == 0 || len(res.Split) == 0 {
		return ""
	}
	var w strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&w, format, a...) }
	one, split := bucketRates(res.One), bucketRates(res.Split)
	var ratios []float64
	for i := range res.One {
		if i < len(res.Split) && res.One[i].Rate > 0 {
			ratios = append(ratios, res.Split[i].Rate/res.One[i].Rate)
		}
	}
	p("\n## One hot sale over several primaries: bucketed vs unbucketed\n\n")
	p("A local Redis Cluster of 3 primaries and 3 replicas (no persistence). One sale of %s units in one slot, and one in %d buckets placed on the %d primaries by the control plane, each driven for %d s, alternating, %s; a fresh sale each run. "+
		"The load is the real reserve script (`EVALSHA` of `lua/reserve.lua`), a new buyer every call (the whole script runs: checks, `HINCRBY`s, buyer entry, `XADD`), "+
		"written as raw RESP by `cmd/flashgate-bench` itself, %d commands per round trip on %d connections in all (spread over the buckets' primaries; all on the one primary of the unbucketed sale). Reserve scripts per second, median (min–max):\n\n",
		num(maxUnits), bucketsN, bucketsN, res.Seconds, plural(res.Rounds, "round"), bucketsPipeline, bucketsConns)
	p("| sale | reserve scripts/s | CPU per script on the primaries | primaries (cores, each) | replicas (cores, all) | generator (cores) |\n|---|---|---|---|---|---|\n")
	var perScript []float64 // µs of primary CPU per script, every run
	row := func(name string, rs []bucketsRun, st stat) {
		var gen, repl, per []float64
		for _, r := range rs {
			gen, repl = append(gen, r.GenCPU), append(repl, r.ReplCPU)
			var c float64
			for _, v := range r.NodeCPU {
				c += v
			}
			if r.Rate > 0 {
				per = append(per, c/r.Rate*1e6)
				perScript = append(perScript, c/r.Rate*1e6)
			}
		}
		p("| %s | %s | %.1f µs | %s | %.2f | %.2f |\n", name, rateCell(st), statOf(per).Med,
			fmtCores(rs[len(rs)-1].NodeCPU), statOf(repl).Med, statOf(gen).Med)
	}
	row("unbucketed (1 slot, 1 primary)", res.One, one)
	row(fmt.Sprintf("%d buckets (%d primaries)", bucketsN, res.Split[0].Primaries), res.Split, split)
	p("| ratio | %s | | | | |\n", ratioCell(statOf(ratios)))
	us := statOf(perScript).Med
	if us > 0 {
		p("\nThe capacity model with these figures: one primary on a core of its own runs about 1 / %.1f µs = %s reserve scripts/s; one sale in %d buckets on %d such primaries about %s/s.\n",
			us, num(1e6/us), bucketsN, bucketsN, num(bucketsN*1e6/us))
	}
	if len(res.OneB) > 0 && len(res.SplitB) > 0 {
		p("\nThe same sales with reserves in batches, as the inventory sends a crowd's (`lua/reservemany.lua`, %d reserves a call, %d calls per round trip), in the same rounds. Reserves per second:\n\n", bucketsBatch, max(bucketsPipeline/bucketsBatch, 1))
		p("| sale | reserves/s | CPU per reserve on the primaries | primaries (cores, each) | replicas (cores, all) | generator (cores) |\n|---|---|---|---|---|---|\n")
		perScript = nil
		row(fmt.Sprintf("unbucketed, %d a call", bucketsBatch), res.OneB, bucketRates(res.OneB))
		row(fmt.Sprintf("%d buckets, %d a call", bucketsN, bucketsBatch), res.SplitB, bucketRates(res.SplitB))
		var batched []float64
		for i := range res.OneB {
			if i < len(res.One) && res.One[i].Rate > 0 {
				batched = append(batched, res.OneB[i].Rate/res.One[i].Rate)
			}
		}
		p("| unbucketed: batched / one a call | %s | | | | |\n", ratioCell(statOf(batched)))
		if ub := statOf(perScript).Med; ub > 0 {
			p("\nWith batches one primary on a core of its own takes about 1 / %.1f µs = %s reserves/s.\n", ub, num(1e6/ub))
		}
	}
	last := res.Split[len(res.Split)-1]
	var per []string
	for _, n := range last.PerNode {
		if n > 0 {
			per = append(per, fmt.Sprintf("%.0f%%", 100*float64(n)/float64(last.Scripts)))
		}
	}
	p("\nThe %d-bucket run's scripts per primary (`INFO commandstats`, last round): %s. CPU is each redis-server's `used_cpu_user + used_cpu_sys` over the run (primaries: last round, each; replicas and CPU per script: median over the rounds); the generator's is this process's. "+
		"The capacity model is scripts/s per primary × primaries: with a core for each primary (and its replica elsewhere) the ratio approaches %d. "+
		"Here %d primaries, their replicas and the generator share %s with whatever else the machine runs, so the bucketed sale is bounded by the cores, not by a primary: compare the CPU per script and the cores the primaries got, not only the rates.\n",
		bucketsN, strings.Join(per, ", "), bucketsN, bucketsN, plural(r.machine.CPUs, "core"))
	for _, n := range res.Notes {
		p("- %s\n", n)
	}
	return w.String()
}

func bucketRates(rs []bucketsRun) stat {
	var v []float64
	for _, r := range rs {
		v = append(v, r.Rate)
	}
	return statOf(v)
}
