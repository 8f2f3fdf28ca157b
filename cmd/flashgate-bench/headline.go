package main

import (
	"fmt"
	"slices"
	"time"
)

// httpHeadline is the ratios to the bare server, a row per scenario and a
// column per connection count.
func (r *report) httpHeadline() []string {
	if r.http == nil {
		return nil
	}
	var labels []string
	cells := map[string]map[int]string{}
	var conns []int
	for _, p := range r.http.pairs {
		if len(p.Gate) == 0 || p.Key[0] == 'r' || p.Key[0] == 'f' {
			continue // (r) and (f) are no ratio to the bare server
		}
		if cells[p.Label] == nil {
			cells[p.Label] = map[int]string{}
			labels = append(labels, p.Label)
		}
		if !slices.Contains(conns, p.Conns) {
			conns = append(conns, p.Conns)
		}
		c := fmt.Sprintf("**%.2f×** (%s/s", statOf(p.ratios()).Med, num(statOf(rates(p.Gate)).Med))
		if p.Key[0] == 'c' {
			c += ", p99 " + ms(time.Duration(durStat(p.Gate, func(w wrkRun) time.Duration { return w.P99 }).Med))
		}
		cells[p.Label][p.Conns] = c + ")"
	}
	if len(labels) == 0 {
		return nil
	}
	head := "| ratio to a bare server sending the same bytes (flashgate's rate) |"
	sep := "|---|"
	for _, c := range conns {
		head += fmt.Sprintf(" `wrk -c%d` |", c)
		sep += "---|"
	}
	rows := []string{head, sep}
	for _, l := range labels {
		row := "| " + l + " |"
		for _, c := range conns {
			row += " " + cells[l][c] + " |"
		}
		rows = append(rows, row)
	}
	return rows
}

// headline is the README's other figures: the crowd, the open model,
// memory and the cost after a large sale.
func (r *report) headline() []string {
	var rows []string
	if c := r.crowd; c != nil && len(c.gate) > 0 && len(c.row) > 0 {
		g, w := crowdStats(c.gate), crowdStats(c.row)
		rows = append(rows, fmt.Sprintf("| flash crowd: %s buyers, %d units | %s/s, all answered in %s | **%.1f×** a row-lock PostgreSQL server (%s/s, %s) |",
			num(float64(r.users)), r.units, num(g.rate.Med), ms(time.Duration(g.took.Med)),
			ratiosOf(c.gate, c.row).Med, num(w.rate.Med), ms(time.Duration(w.took.Med))))
	}
	opens := r.opens()
	for _, o := range opens {
		if o.Server != "flashgate" {
			continue
		}
		other := ""
		for _, x := range opens {
			if x.Server != "flashgate" && x.What == o.What {
				other = fmt.Sprintf("%s at half its peak (%s/s): p50 %s, p99 %s, p999 %s", x.Server, num(x.Rate), ms(x.Run.P50), ms(x.Run.P99), ms(x.Run.P999))
			}
		}
		rows = append(rows, fmt.Sprintf("| open model: %s, at %s/s (half the peak) | p50 %s, p99 %s, p999 %s | %s |",
			o.What, num(o.Rate), ms(o.Run.P50), ms(o.Run.P99), ms(o.Run.P999), other))
	}
	if c := r.crowd; c != nil {
		rows = append(rows, fmt.Sprintf("| `serve` RSS | idle %.0f MB, %s keep-alive connections %.0f MB, after a crowd %.0f MB | |",
			c.rss.Idle, num(float64(c.rss.ConnsOpen)), c.rss.Conns, c.rss.AfterCrowd))
	}
	if s := r.storm; s != nil && s.Orders > 0 {
		done := ms(s.Took)
		if !s.Done {
			done = "not done in " + ms(s.Took)
		}
		rows = append(rows, fmt.Sprintf("| %s-order expiry storm | %s | |", num(float64(s.Orders)), done))
		if s.Idle.Seconds > 0 {
			rows = append(rows, fmt.Sprintf("| idle after it (%s released orders) | Redis busy %.2f ms/s, slowest command %s | |",
				num(float64(s.Expired)), s.Idle.BusyMsPerS, ms(s.Idle.Slowest)))
		}
	}
	return rows
}

func (r *report) opens() []*openRun {
	var l []*openRun
	if r.http != nil && r.http.open != nil {
		l = append(l, r.http.open)
	}
	if r.crowd != nil {
		l = append(l, r.crowd.open...)
	}
	return l
}

type crowdStat struct{ rate, took stat }

func crowdStats(rs []crowdRun) crowdStat {
	var rate, took []float64
	for _, c := range rs {
		rate = append(rate, c.Rate)
		took = append(took, float64(c.Elapsed))
	}
	return crowdStat{statOf(rate), statOf(took)}
}

func ratiosOf(a, b []crowdRun) stat {
	var v []float64
	for i := range a {
		if i < len(b) && b[i].Rate > 0 {
			v = append(v, a[i].Rate/b[i].Rate)
		}
	}
	return statOf(v)
}
