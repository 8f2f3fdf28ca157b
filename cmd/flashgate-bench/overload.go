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
	Conc     int      // the crowd's connections
	Timeout  string   // the crowd's per-request timeout
	Capacity crowdRun // closed loop, 64 connections
	Unloaded crowdRun // open model at half the capacity
	Levels   []overloadLevel
}

// overloadLevel is one offered load, flashgate's run and the bare server's.
type overloadLevel struct {
	K, Rate    float64
	Gate, Bare crowdRun
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
// capacity closed-loop (64 connections), the unloaded latency at half of
// it, then each of overloadLevels × the capacity as an open model (a fresh
// 1M-unit sale each, OVERLOAD_SECONDS of arrivals, 512 connections, latency
// from each request's due time), the bare server at the same rate right
// after each.
func (b *bench) overloadPhase(ctx context.Context) error {
	secs, err := envInt("OVERLOAD_SECONDS", 4)
	if err != nil {
		return err
	}
	if secs < 1 {
		return fmt.Errorf("OVERLOAD_SECONDS=%d: want at least 1", secs)
	}
	res := &overloadResult{Seconds: secs, Conc: 512, Timeout: "30s"}
	b.rep.overload = res
	db, err := b.dbURL(ctx, "bench_overload")
	if err != nil {
		return err
	}
	st, err := b.startStack(ctx, "overload", db)
	if err != nil {
		return err
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
		if err := b.createSale(st, id, units, true); err != nil {
			return err
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
	b.logf("  overload: capacity, closed loop of 64")
	if res.Capacity, err = b.overloadCrowd(ctx, st.gw, "ov-capacity", 60_000, 64, 0, res.Timeout); err != nil {
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
		b.logf("  overload: %g× (%.0f/s), flashgate then bare", k, l.Rate)
		if l.Gate, err = open(st.gw, id, l.Rate); err != nil {
			return fmt.Errorf("%g×, flashgate: %w", k, err)
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
	p("Purchases of a large stock (1M units, a fresh sale each level), each by a new buyer, against `flashgate serve` with its defaults (redis-server without persistence, BENCH_DB) and against the bare server answering every request at once with a constant (the cheapest answer any server could give a buyer it turns away). ")
	p("Capacity: `flashgate crowd --concurrency 64` closed loop, **%s `201`/s** (p99 %s). Each level: %d s of arrivals at k × that rate, `--concurrency %d --timeout %s`, latency from each request's due time (waiting for a free connection counts); goodput = `201`s / the time to the last answer. ",
		num(c), ms(o.Capacity.P99), o.Seconds, o.Conc, o.Timeout)
	p("Unloaded (½×, %s/s): `201` p99 **%s**, max %s.\n\n", num(c/2), ms(o.Unloaded.createdP99()), ms(o.Unloaded.Mx))
	p("| offered | flashgate goodput (of capacity) | `201` p99 | slowest answer | answers | bare server: answered/s | bare p99 | bare slowest |\n|---|---|---|---|---|---|---|---|\n")
	for _, l := range o.Levels {
		p("| %g× (%s/s) | %s/s (%.0f%%) | %s | %s | %s | %s | %s | %s |\n", l.K, num(l.Rate),
			num(l.Gate.goodput()), 100*l.Gate.goodput()/c, ms(l.Gate.createdP99()), ms(l.Gate.Mx), l.Gate.answers(),
			num(l.Bare.Rate), ms(l.Bare.P99), ms(l.Bare.Mx))
	}
	p("\nRead the bare columns first: where the bare server, which does no work at all, answers slower than the offered rate or with a p99 far above flashgate's unloaded one, the load generator and the answers themselves have used the machine up (both run on these cores), and no admission control in flashgate can give the buyers it turns away a quicker answer than that. docs/internals.md, \"Adaptive admission\", says what this means for `--reserve-limit`.\n")
	return sb.String()
}
