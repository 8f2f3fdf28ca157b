package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"time"
)

// report is everything the run measured.
type report struct {
	machine  machineInfo
	goBench  []goBenchRow
	http     *httpResult
	crowd    *crowdResult
	storm    *stormResult
	buckets  *bucketsResult  // buckets.go
	drop     *dropResult     // drop.go
	draw     *drawResult     // draw.go
	overload *overloadResult // overload.go
	failures []string
	commands []string
	elapsed  time.Duration
	users    int // CROWD_USERS
	units    int // CROWD_UNITS
}

func (b *bench) markdown() []byte {
	r, cfg := b.rep, b.cfg
	var w bytes.Buffer
	p := func(format string, a ...any) { fmt.Fprintf(&w, format, a...) }
	p("# Benchmarks\n\n")
	p("Written by `make bench` (`cmd/flashgate-bench`) from one run on %s, which took %s; do not edit by hand, run it again.\n", r.machine.Date, r.elapsed.Round(time.Second))
	if !cfg.full() {
		p("\n> **A shortened run** (smaller or fewer than `make bench`'s defaults): the figures show the format, not the system. Settings: `%s`.\n", cfg.summary())
	} else {
		p("Settings: `%s`.\n", cfg.summary())
	}
	if len(r.failures) > 0 {
		p("\n> **Parts of this run failed**; their figures are missing:\n")
		for _, f := range r.failures {
			p("> - %s\n", strings.ReplaceAll(f, "\n", " "))
		}
	}
	m := r.machine
	p("\n## Machine\n\n| | |\n|---|---|\n")
	p("| CPUs (nproc) | %d × %s |\n| memory | %s |\n| kernel | %s |\n| Go | %s |\n| Redis | %s |\n| PostgreSQL | %s |\n| wrk | %s |\n| flashgate | commit %s |\n| load average | %s at the start, %s at the end |\n",
		m.CPUs, m.CPUModel, m.Memory, m.Kernel, m.Go, m.Redis, orDash(m.Postgres), m.Wrk, m.Commit, m.LoadStart, m.LoadEnd)
	p("\nEverything runs on this one machine over loopback: the load generator shares the CPUs with the servers, so the ratios, not the absolute rates, carry over to other machines.\n")

	p("\n## Headline\n")
	if rows := r.httpHeadline(); len(rows) > 0 {
		p("\n%s\n", strings.Join(rows, "\n"))
	}
	if rows := r.headline(); len(rows) > 0 {
		p("\n| what | flashgate | compared with |\n|---|---|---|\n%s\n", strings.Join(rows, "\n"))
	}

	if h := r.http; h != nil {
		p("\n## HTTP paths against a bare server sending the same bytes\n\n")
		p("`flashgate serve --sale-rate %s` (redis-server without persistence, %s) next to `cmd/bare`, a fasthttp server that answers each path with the very response flashgate gave (captured before the runs; only the `Date` header is its own). Both run under the same wrk command, alternating (bare first in odd rounds, flashgate first in even ones), %s of %s each; rates are requests/s as median (min–max) over the rounds, the ratio is flashgate's over the bare server's of the same round. Requests that carry a new buyer's token are all built in wrk's `init` (`scripts/purchase.lua`), so that wrk only hands out prepared strings. The per-sale rate limit is on but far above these rates (the default, 50,000/s, would answer part of the not-admitted purchases `429`; a rejection is judged before it).\n\n",
			num(httpSaleRate), cfg.DB, plural(cfg.Rounds, "round"), fmtSeconds(cfg.Duration))
		if q := h.queue; q != nil {
			p("The (q) requests are a fair queue's entrants', token and `X-Queue-Ticket` (`scripts/queue.lua`, built in `init` likewise): %s buyers entered a one-unit fair sale through the API before its start, each with a proof of work (maxnumber %d); at the start the control plane admitted position %d and held there (`admit_seconds` 3,600), and the %s entrants the gateway then answered `waiting` are the requests (%s before the start).\n\n",
				num(float64(q.all)), q.maxnum, q.admitted, num(float64(q.waiting)), num(float64(q.pre)))
		}
		p("| scenario | wrk | flashgate req/s | bare req/s | ratio | flashgate p50 / p99 | bare p50 / p99 |\n|---|---|---|---|---|---|---|\n")
		for _, pr := range h.pairs {
			if len(pr.Gate) == 0 {
				p("| %s | `-t%d -c%d` | failed: %v | | | | |\n", pr.Label, pr.Threads, pr.Conns, pr.Err)
				continue
			}
			g50 := durStat(pr.Gate, func(w wrkRun) time.Duration { return w.P50 })
			g99 := durStat(pr.Gate, func(w wrkRun) time.Duration { return w.P99 })
			b50 := durStat(pr.Bare, func(w wrkRun) time.Duration { return w.P50 })
			b99 := durStat(pr.Bare, func(w wrkRun) time.Duration { return w.P99 })
			p("| %s | `-t%d -c%d` | %s | %s | %s | %s / %s | %s / %s |\n", pr.Label, pr.Threads, pr.Conns,
				rateCell(statOf(rates(pr.Gate))), rateCell(statOf(rates(pr.Bare))), ratioCell(statOf(pr.ratios())),
				ms(time.Duration(g50.Med)), ms(time.Duration(g99.Med)), ms(time.Duration(b50.Med)), ms(time.Duration(b99.Med)))
		}
		p("\nLatencies are wrk's (closed loop: each connection waits for its answer), medians over the rounds.\n")
		p("\nCPU used during the runs, in cores (median over the rounds; wrk's includes building its requests in `init`):\n\n")
		p("| scenario | wrk | flashgate's server (serve) | wrk | bare server |\n|---|---|---|---|---|\n")
		for _, pr := range h.pairs {
			if len(pr.Gate) == 0 {
				continue
			}
			p("| %s, `-c%d` | %.2f | %.2f | %.2f | %.2f |\n", pr.Label, pr.Conns,
				cpuStat(pr.Gate, func(w wrkRun) float64 { return w.WrkCPU }).Med, cpuStat(pr.Gate, func(w wrkRun) float64 { return w.SrvCPU }).Med,
				cpuStat(pr.Bare, func(w wrkRun) float64 { return w.WrkCPU }).Med, cpuStat(pr.Bare, func(w wrkRun) float64 { return w.SrvCPU }).Med)
		}
		if len(h.wrkCheck) > 0 {
			p("\nIs wrk the bottleneck? The bare server on the (c) requests (a new token each) at `-c64`, one wrk thread against two:\n\n| wrk threads | bare req/s | wrk cores | bare server cores |\n|---|---|---|---|\n")
			for _, c := range h.wrkCheck {
				p("| %d | %s | %.2f | %.2f |\n", c.Threads, num(c.Run.Rate), c.Run.WrkCPU, c.Run.SrvCPU)
			}
			p("\n%s\n", wrkVerdict(h.wrkCheck))
		}
		p("\nResponse sizes (bytes, headers and body): ")
		var sz []string
		for _, s := range h.sizes {
			sz = append(sz, fmt.Sprintf("`%s` flashgate %s, bare %s", s[0], s[1], s[2]))
		}
		p("%s.\n", strings.Join(sz, "; "))
		p("Units sold by the (c) rounds: %s.\n", num(float64(h.purchaseN)))
		for _, pr := range h.pairs {
			if (pr.Key[0] == 'r' || pr.Key[0] == 'f') && len(pr.Gate) > 0 {
				g99 := durStat(pr.Gate, func(w wrkRun) time.Duration { return w.P99 })
				o99 := durStat(pr.Bare, func(w wrkRun) time.Duration { return w.P99 })
				what, of := "with `WAIT`", "`--wait-replicas 0`'s"
				if pr.Key[0] == 'f' {
					what, of = "with `appendfsync always`", "`everysec`'s"
				}
				p("- %s, `-c%d`: throughput %s %s of %s (median ratio of the rounds), p99 %s against %s (%.2f×)\n",
					pr.Label, pr.Conns, what, ratioCell(statOf(pr.ratios())), of, ms(time.Duration(g99.Med)), ms(time.Duration(o99.Med)), g99.Med/o99.Med)
			}
			for _, n := range pr.Notes {
				p("- %s, `-c%d`: %s\n", pr.Label, pr.Conns, n)
			}
		}
	}

	if opens := r.opens(); len(opens) > 0 {
		p("\n## Open model: arrivals at a fixed rate\n\n")
		p("`flashgate crowd --rate R`: request *i* is due at *i*/R seconds after the start, and its latency counts from that moment, so time spent waiting for a free connection counts too (no coordinated omission). R is half the peak the same server reached under the same tool closed-loop in this run (the crowds below for the flash crowd; `--concurrency 64` on the large stock for purchases); %d s of arrivals, each a new buyer.\n\n", cfg.OpenSeconds)
		p("| server | what | peak req/s | rate | requests | answers | p50 | p99 | p999 | max |\n|---|---|---|---|---|---|---|---|---|---|\n")
		for _, o := range opens {
			p("| %s | %s | %s | %s/s | %s | %s | %s | %s | %s | %s |\n", o.Server, o.What, num(o.Of), num(o.Rate), num(float64(o.Run.Requests)),
				o.Run.answers(), ms(o.Run.P50), ms(o.Run.P99), ms(o.Run.P999), ms(o.Run.Mx))
		}
	}

	if c := r.crowd; c != nil {
		p("\n## The flash crowd against the design people build first\n\n")
		p("%s distinct buyers, each pressing buy once, against %d units, with `flashgate crowd --concurrency %d` (tokens minted with the shared secret before the clock starts). "+
			"flashgate: `serve` on PostgreSQL. The reference: `cmd/rowlock`, net/http and one PostgreSQL transaction per purchase "+
			"(`UPDATE items SET \"left\" = \"left\" - 1 WHERE id = $1 AND \"left\" > 0`, then the order `INSERT`; 64 pooled connections), on the same PostgreSQL server. "+
			"%s, each a fresh sale, the order of the two servers alternating; median (min–max).\n\n",
			num(float64(cfg.CrowdUsers)), cfg.CrowdUnits, cfg.CrowdConc, plural(cfg.CrowdRounds, "round"))
		if len(c.gate) > 0 && len(c.row) > 0 {
			g, w := crowdStats(c.gate), crowdStats(c.row)
			p("| | flashgate | rowlock | ratio |\n|---|---|---|---|\n")
			p("| requests/s | %s | %s | %s |\n", rateCell(g.rate), rateCell(w.rate), ratioCell(ratiosOf(c.gate, c.row)))
			p("| time to answer the whole crowd | %s (%s–%s) | %s (%s–%s) | |\n",
				ms(time.Duration(g.took.Med)), ms(time.Duration(g.took.Min)), ms(time.Duration(g.took.Max)),
				ms(time.Duration(w.took.Med)), ms(time.Duration(w.took.Min)), ms(time.Duration(w.took.Max)))
			p("| units sold, round by round | %s | %s | |\n", joinInts(c.gateSold), joinInts(c.rowSold))
			lat := func(rs []crowdRun) string {
				var l []string
				for _, r := range rs {
					l = append(l, fmt.Sprintf("%s / %s", ms(r.P50), ms(r.P99)))
				}
				return strings.Join(l, "; ")
			}
			p("| latency p50 / p99, round by round | %s | %s | |\n", lat(c.gate), lat(c.row))
			p("| answers, first round | %s | %s | |\n", c.gate[0].answers(), c.row[0].answers())
			cpu := func(rs []crowdRun) float64 {
				var v []float64
				for _, r := range rs {
					v = append(v, r.ServerCPU)
				}
				return statOf(v).Med
			}
			p("| CPU cores the server process used meanwhile (rowlock's without PostgreSQL's) | %.2f | %.2f | |\n", cpu(c.gate), cpu(c.row))
			if c.gate[0].Check != "" {
				p("| flashgate's cross-check (admin figures against the 201s), last round | %s | | |\n", c.gate[len(c.gate)-1].Check)
			}
		}
		p("\n## Memory\n\n| `flashgate serve` (PostgreSQL) | RSS |\n|---|---|\n")
		p("| idle, sales created | %.1f MB |\n", c.rss.Idle)
		if c.rss.ConnsOpen > 0 {
			p("| %s keep-alive connections open (each after one `GET /healthz`; the process had %s open files) | %.1f MB |\n", num(float64(c.rss.ConnsOpen)), num(float64(c.rss.FDs)), c.rss.Conns)
		}
		p("| after the first crowd (%s buyers) | %.1f MB |\n", num(float64(cfg.CrowdUsers)), c.rss.AfterCrowd)
		p("| after every crowd of this phase (%d × %s buyers and the open-model runs) | %.1f MB, peak %.1f MB |\n", cfg.CrowdRounds, num(float64(cfg.CrowdUsers)), c.rss.AfterAll, c.rss.Peak)
		p("\nrowlock, for comparison: %.1f MB idle, %.1f MB after its crowds.\n", c.rss.RowIdle, c.rss.RowAfter)
		for _, n := range c.notes {
			p("- %s\n", n)
		}
	}

	if s := r.storm; s != nil {
		p("\n## After a large sale: an expiry storm, then idle\n\n")
		p("`serve` (%s) with `--sale-rate 0` took %s purchases of one sale through the real purchase path (`flashgate crowd --concurrency 64`, %s/s) and wrote them to the database, unpaid. "+
			"Then it was restarted with `--payment-window 1s`, so that every one of them was due at once, while new buyers kept buying another sale at %d/s for %d s (`flashgate crowd --rate %d`).\n\n",
			cfg.DB, num(float64(s.Orders)), num(s.SetupRate), s.BuyingRate, stormBuySeconds, s.BuyingRate)
		p("| | |\n|---|---|\n")
		if s.Done {
			p("| expiry storm: from the restart until every order was expired and `booked` was 0 | **%s** |\n", ms(s.Took))
		} else {
			p("| expiry storm | **not done after %s**: %s expired, booked %s |\n", ms(s.Took), num(float64(s.Expired)), num(float64(s.Booked)))
		}
		p("| lines `serve` logged at info level from the restart to the end of the storm | %d (%d WARN or ERROR) |\n", s.LogLines, s.WarnLines)
		if s.Buying != nil {
			p("| buying during the storm | %s requests, %s; p50 %s, p99 %s, max %s |\n", num(float64(s.Buying.Requests)), s.Buying.answers(), ms(s.Buying.P50), ms(s.Buying.P99), ms(s.Buying.Mx))
		}
		if s.Idle.Seconds > 0 {
			p("| then idle for %d s, with %s released orders: Redis busy time (`INFO commandstats`, usec delta) | **%.2f ms per second** (%.0f calls/s) |\n", s.Idle.Seconds, num(float64(s.Expired)), s.Idle.BusyMsPerS, s.Idle.CallsPerS)
			p("| the slowest Redis command of that window (`SLOWLOG`, threshold 0) | **%s**, %s; %d commands over 5 ms |\n", ms(s.Idle.Slowest), s.Idle.SlowestCmd, s.Idle.SlowOver5ms)
			var top []string
			for _, t := range s.Idle.Top {
				top = append(top, fmt.Sprintf("%s %s calls, %.2f ms", t.Name, num(float64(t.Calls)), float64(t.Usec)/1000))
			}
			p("| where the time went (top commands of the window) | %s |\n", strings.Join(top, "; "))
			p("| `serve` RSS afterwards | %.1f MB |\n", s.RSS)
		}
	}

	p("%s", r.bucketsSection())
	p("%s", r.dropSection())
	p("%s", r.drawSection())
	p("%s", r.overloadSection())

	if len(r.goBench) > 0 {
		p("\n## Go benchmarks\n\n`go test -run '^$' -bench . -benchmem -count %d` over the packages that have benchmarks (real redis-server where the benchmark needs one); ns/op as median (min–max).\n\n| benchmark | ns/op | B/op | allocs/op |\n|---|---|---|---|\n", cfg.GoBench)
		for _, g := range r.goBench {
			s := statOf(g.NsOp)
			p("| %s | %s (%s–%s) | %s | %s |\n", g.Name, num(s.Med), num(s.Min), num(s.Max), orDash(g.BOp), orDash(g.AllocsOp))
		}
	}

	p("\n## Commands\n\nIn the order run; `$DIR` is the run's temp dir, `$SECRET` and `$ADMIN_TOKEN` the run's secrets (also in `FLASHGATE_JWT_SECRET` and `FLASHGATE_ADMIN_TOKEN` of every process), `$GW_*`, `$ADMIN_*`, `$REDIS_*`, `$BARE`, `$ROWLOCK` free loopback addresses, `$PG` the throwaway PostgreSQL server.\n\n```sh\n")
	for _, c := range r.commands {
		p("%s\n", c)
	}
	p("```\n")
	return w.Bytes()
}

const (
	readmeBegin = "<!-- bench:begin (written by make bench) -->"
	readmeEnd   = "<!-- bench:end -->"
)

// writeReport writes the report and the README's headline table.
func (b *bench) writeReport() error {
	switch strings.TrimSpace(b.cfg.Phases) {
	case "draw":
		return b.spliceDraw()
	case "overload":
		return b.spliceOverload()
	}
	if err := os.WriteFile(b.cfg.Out, b.markdown(), 0o644); err != nil {
		return err
	}
	if b.cfg.Readme == "" {
		return nil
	}
	raw, err := os.ReadFile(b.cfg.Readme)
	if err != nil {
		return err
	}
	i, j := bytes.Index(raw, []byte(readmeBegin)), bytes.Index(raw, []byte(readmeEnd))
	if i < 0 || j < i {
		b.logf("%s has no bench markers; not updated", b.cfg.Readme)
		return nil
	}
	var sec bytes.Buffer
	fmt.Fprintf(&sec, "%s\nFrom `make bench` on %s (%d × %s, %s); every figure, the settings and the commands are in [docs/BENCHMARKS.md](docs/BENCHMARKS.md).\n",
		readmeBegin, b.rep.machine.Date, b.rep.machine.CPUs, b.rep.machine.CPUModel, b.rep.machine.Memory)
	if !b.cfg.full() {
		sec.WriteString("**A shortened run**: these figures show the format, not the system.\n")
	}
	if rows := b.rep.httpHeadline(); len(rows) > 0 {
		fmt.Fprintf(&sec, "\n%s\n", strings.Join(rows, "\n"))
	}
	if rows := b.rep.headline(); len(rows) > 0 {
		fmt.Fprintf(&sec, "\n| what | flashgate | compared with |\n|---|---|---|\n%s\n", strings.Join(rows, "\n"))
	}
	out := append(append(append([]byte(nil), raw[:i]...), sec.Bytes()...), raw[j:]...)
	return os.WriteFile(b.cfg.Readme, out, 0o644)
}

// wrkVerdict says whether wrk limited the bare server: a wrk thread busy
// near a whole core says it did.
func wrkVerdict(cs []wrkCheck) string {
	if len(cs) < 2 || cs[0].Run.Rate == 0 {
		return ""
	}
	one, two := cs[0], cs[len(cs)-1]
	per1, per2 := one.Run.WrkCPU/float64(one.Threads), two.Run.WrkCPU/float64(two.Threads)
	gain := two.Run.Rate/one.Run.Rate - 1
	verdict := "wrk is not the bottleneck"
	if per1 >= 0.9 || per2 >= 0.9 {
		verdict = "**wrk may be the bottleneck here**"
	}
	return fmt.Sprintf("%s: a wrk thread used %.2f of a core alone and %.2f each of %d (one it could not keep up would use all of one); %d threads changed the bare rate by %+.0f%%.",
		verdict, per1, per2, two.Threads, two.Threads, gain*100)
}

// drawHeading begins the draw phase's section of the report.
const drawHeading = "\n## Draw: "

// spliceDraw writes a run of the draw phase alone (PHASES=draw) into the
// report already there (splice).
func (b *bench) spliceDraw() error {
	if b.rep.draw == nil {
		return os.WriteFile(b.cfg.Out, b.markdown(), 0o644)
	}
	return b.splice(drawHeading, b.rep.drawSection()+fmt.Sprintf("\nFrom a run of this phase alone on %s (%d × %s), spliced into this report: `PHASES=draw DRAW_ENTRIES=%d DRAW_UNITS=%d DRAW_RELEASE_SECONDS=%d`.\n",
		b.rep.machine.Date, b.rep.machine.CPUs, b.rep.machine.CPUModel, b.rep.draw.Entries, b.rep.draw.Units, int(b.rep.draw.ReleaseWindow/time.Second)))
}

// spliceOverload writes a run of the overload phase alone (PHASES=overload)
// into the report already there (splice).
func (b *bench) spliceOverload() error {
	sec := b.rep.overloadSection()
	if sec == "" {
		return os.WriteFile(b.cfg.Out, b.markdown(), 0o644)
	}
	return b.splice(overloadHeading, sec+fmt.Sprintf("\nFrom a run of this phase alone on %s (%d × %s, flashgate commit %s, load average %s at its start), spliced into this report: `PHASES=overload OVERLOAD_SECONDS=%d OVERLOAD_LIMIT=%d BENCH_DB=%s`.\n",
		b.rep.machine.Date, b.rep.machine.CPUs, b.rep.machine.CPUModel, b.rep.machine.Commit, b.rep.machine.LoadStart, b.rep.overload.Seconds, b.rep.overload.Limit, b.cfg.DB))
}

// splice puts sec, a phase's section beginning with heading, into the
// report already there: it replaces the section of that heading (or goes
// before the Go benchmarks); the rest of the report, and the README, keep
// the full run's figures. Without a report there it writes a whole one.
func (b *bench) splice(heading, sec string) error {
	raw, err := os.ReadFile(b.cfg.Out)
	if err != nil {
		return os.WriteFile(b.cfg.Out, b.markdown(), 0o644)
	}
	doc := string(raw)
	i := strings.Index(doc, heading)
	if i < 0 {
		i = strings.Index(doc, "\n## Go benchmarks")
		if i < 0 {
			i = strings.Index(doc, "\n## Commands")
		}
		if i < 0 {
			i = len(doc)
		}
		return os.WriteFile(b.cfg.Out, []byte(doc[:i]+sec+doc[i:]), 0o644)
	}
	j := strings.Index(doc[i+1:], "\n## ")
	if j < 0 {
		j = len(doc)
	} else {
		j += i + 1
	}
	return os.WriteFile(b.cfg.Out, []byte(doc[:i]+sec+doc[j:]), 0o644)
}
