package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// overloadLevels are the offered loads of the overload phase, as multiples
// of the purchase path's capacity measured closed-loop just before.
var overloadLevels = []float64{1, 2, 3, 5}

// overloadResult is the overload phase's part of the report: purchases of
// a large stock, a new buyer each request, arriving faster than the path
// can serve them, against flashgate with its defaults and against the bare
// server (which answers every request at once with a constant: the
// cheapest answer any server could give the buyers it turns away).
type overloadResult struct {
	Seconds  int      // OVERLOAD_SECONDS: arrivals per level
	Limit    int      // OVERLOAD_LIMIT: --reserve-limit of a second serve run beside the first (0: none)
	Conc     int      // the crowd's connections
	Timeout  string   // the crowd's per-request timeout
	Capacity crowdRun // closed loop, Conc connections
	Unloaded crowdRun // open model at half the capacity
	Levels   []overloadLevel
}

// overloadLevel is one offered load, flashgate's run and the bare server's.
type overloadLevel struct {
	K, Rate           float64
	Gate, Limit, Bare crowdRun
}

// goodput is a run's 201s a second over the time to its last answer.
func (c crowdRun) goodput() float64 {
	if c.Elapsed <= 0 {
		return 0
	}
	return float64(c.Answers["201"]) / c.Elapsed.Seconds()
}

// createdP99 is the p99 of a run's 201s (all its answers when every one
// was a 201).
func (c crowdRun) createdP99() time.Duration {
	if c.CreatedP99 > 0 {
		return c.CreatedP99
	}
	if c.Answers["201"] == c.Requests {
		return c.P99
	}
	return 0
}

// overloadPhase measures the purchase path past its capacity: the
// capacity closed-loop (on the 512 connections of the open runs: fewer
// fill the reserve's batches less and measure less), the unloaded latency at half of
// it, then each of overloadLevels × the capacity as an open model (a fresh
// 1M-unit sale each, OVERLOAD_SECONDS of arrivals, 512 connections, latency
// from each request's due time), the bare server at the same rate right
// after each, and, with OVERLOAD_LIMIT, a serve with --reserve-limit
// OVERLOAD_LIMIT between them.
func (b *bench) overloadPhase(ctx context.Context) error {
	secs, err := envInt("OVERLOAD_SECONDS", 4)
	if err != nil {
		return err
	}
	limit, err := envInt("OVERLOAD_LIMIT", 1024)
	if err != nil {
		return err
	}
	if secs < 1 || limit < 0 {
		return fmt.Errorf("OVERLOAD_SECONDS=%d, OVERLOAD_LIMIT=%d: want at least 1 and 0", secs, limit)
	}
	res := &overloadResult{Seconds: secs, Limit: limit, Conc: 512, Timeout: "30s"}
	b.rep.overload = res
	db, err := b.dbURL(ctx, "bench_overload")
	if err != nil {
		return err
	}
	st, err := b.startStack(ctx, "overload", db)
	if err != nil {
		return err
	}
	var lst *stack
	if limit > 0 {
		ldb, err := b.dbURL(ctx, "bench_overload_limit")
		if err != nil {
			return err
		}
		if lst, err = b.startStack(ctx, "overload-limit", ldb, "--reserve-limit", strconv.Itoa(limit)); err != nil {
			return err
		}
	}
	bareAddr, err := freeAddr()
	if err != nil {
		return err
	}
	b.r.alias(bareAddr, "$BARE_OVERLOAD")
	bare, err := b.r.start("bare-overload", nil, b.barebin, bareAddr)
	if err != nil {
		return err
	}
	if err := waitTCP(ctx, bareAddr, bare, 10*time.Second); err != nil {
		return err
	}
	const units = 1_000_000
	sale := func(id string) error {
		for _, s := range []*stack{st, lst} {
			if s == nil {
				continue
			}
			if err := b.createSale(s, id, units, true); err != nil {
				return err
			}
		}
		time.Sleep(300 * time.Millisecond) // the gateway's state refresh
		return nil
	}
	open := func(target, id string, rate float64) (crowdRun, error) {
		return b.overloadCrowd(ctx, target, id, max(1, int(rate)*secs), res.Conc, rate, res.Timeout)
	}

	if err := sale("ov-capacity"); err != nil {
		return err
	}
	b.logf("  overload: capacity, closed loop of %d", res.Conc)
	if res.Capacity, err = b.overloadCrowd(ctx, st.gw, "ov-capacity", 80_000, res.Conc, 0, res.Timeout); err != nil {
		return fmt.Errorf("capacity: %w", err)
	}
	c := res.Capacity.goodput()
	if c <= 0 {
		return fmt.Errorf("capacity: no 201s (%s)", res.Capacity.answers())
	}
	if err := sale("ov-unloaded"); err != nil {
		return err
	}
	b.logf("  overload: unloaded, %.0f/s", c/2)
	if res.Unloaded, err = open(st.gw, "ov-unloaded", c/2); err != nil {
		return fmt.Errorf("unloaded: %w", err)
	}
	for i, k := range overloadLevels {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		l := overloadLevel{K: k, Rate: k * c}
		id := "ov-" + strconv.Itoa(i+1)
		if err := sale(id); err != nil {
			return err
		}
		b.logf("  overload: %g× (%.0f/s), flashgate, then with the limit, then bare", k, l.Rate)
		if l.Gate, err = open(st.gw, id, l.Rate); err != nil {
			return fmt.Errorf("%g×, flashgate: %w", k, err)
		}
		if lst != nil {
			if l.Limit, err = open(lst.gw, id, l.Rate); err != nil {
				return fmt.Errorf("%g×, flashgate --reserve-limit %d: %w", k, limit, err)
			}
		}
		if l.Bare, err = open(bareAddr, id, l.Rate); err != nil {
			return fmt.Errorf("%g×, bare: %w", k, err)
		}
		res.Levels = append(res.Levels, l)
	}
	return nil
}

// overloadCrowd is crowd with the phase's timeout; transport errors (a
// request past the timeout) are figures here, not failures.
func (b *bench) overloadCrowd(ctx context.Context, target, sale string, users, conc int, rate float64, timeout string) (crowdRun, error) {
	args := []string{b.flashbin, "crowd", "--target", "http://" + target, "--sale", sale,
		"--users", strconv.Itoa(users), "--concurrency", strconv.Itoa(conc), "--progress=false", "--timeout", timeout}
	if rate > 0 {
		args = append(args, "--rate", strconv.FormatFloat(rate, 'f', 0, 64))
	}
	out, _, err := b.r.output(ctx, 5*time.Minute, nil, args...)
	c, perr := parseCrowd(out)
	if perr != nil {
		return c, perr
	}
	if err != nil && c.Requests == 0 {
		return c, err
	}
	return c, nil
}

// overloadHeading begins the overload phase's section of the report.
const overloadHeading = "\n## Overload: "

func (r *report) overloadSection() string {
	o := r.overload
	if o == nil || o.Capacity.Requests == 0 {
		return ""
	}
	var sb strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&sb, format, a...) }
	c := o.Capacity.goodput()
	p("%spurchases arriving faster than the path serves them\n\n", overloadHeading)
	p("Purchases of a large stock (1M units, a fresh sale each level), each by a new buyer, against `flashgate serve` with its defaults (redis-server without persistence, BENCH_DB), against a second one with the adaptive limit on (`OVERLOAD_LIMIT`, when above 0) and against the bare server answering every request at once with a constant (the cheapest answer any server could give a buyer it turns away). ")
	p("Capacity: `flashgate crowd --concurrency %d` closed loop, **%s `201`/s** (p99 %s). Each level: %d s of arrivals at k × that rate on as many connections (`--timeout %s`), latency from each request's due time (waiting for a free connection counts); goodput = `201`s / the time to the last answer. ",
		o.Conc, num(c), ms(o.Capacity.P99), o.Seconds, o.Timeout)
	p("Unloaded (½×, %s/s): `201` p99 **%s**, max %s.\n\n", num(c/2), ms(o.Unloaded.createdP99()), ms(o.Unloaded.Mx))
	limitCols, limitSep := "", ""
	if o.Limit > 0 {
		limitCols, limitSep = fmt.Sprintf(" `--reserve-limit %d`: goodput, `201` p99, slowest, answers |", o.Limit), "---|"
	}
	p("| offered | flashgate (defaults): goodput (of capacity), `201` p99, slowest answer, answers |%s bare server: answered/s, p99, slowest |\n|---|---|%s---|\n", limitCols, limitSep)
	run := func(r crowdRun) string {
		return fmt.Sprintf("%s/s (%.0f%%), %s, %s; %s", num(r.goodput()), 100*r.goodput()/c, ms(r.createdP99()), ms(r.Mx), r.answers())
	}
	for _, l := range o.Levels {
		lim := ""
		if o.Limit > 0 {
			lim = " " + run(l.Limit) + " |"
		}
		p("| %g× (%s/s) | %s |%s %s/s, %s, %s |\n", l.K, num(l.Rate), run(l.Gate), lim, num(l.Bare.Rate), ms(l.Bare.P99), ms(l.Bare.Mx))
	}
	p("\nRead the bare columns first: where the bare server, which does no work at all, answers slower than the offered rate or with a p99 far above flashgate's unloaded one, the load generator and the answers themselves have used the machine up (both run on these cores), and no admission control in flashgate can give the buyers it turns away a quicker answer than that. docs/internals.md, \"Adaptive admission\", says what this means for `--reserve-limit`.\n")
	return sb.String()
}
