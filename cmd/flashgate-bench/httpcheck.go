package main

import (
	"context"
	"os"
	"strconv"
)

// wrkCheck is the bare server driven by one wrk thread or two, on the (c)
// request bytes: if two threads do not beat one, wrk is not what limits.
type wrkCheck struct {
	Threads int
	Run     wrkRun
}

// openRun is an open-model run: arrivals at a fixed rate.
type openRun struct {
	What   string
	Rate   float64
	Of     float64 // the peak it is half of
	Run    crowdRun
	Server string
}

// httpChecks ends the HTTP phase, its scenarios run: whether wrk limits
// the bare server (one thread against two), and the open model on st.
func (b *bench) httpChecks(ctx context.Context, res *httpResult, st *stack, barePid int, bareAddr, purchaseLua string) error {
	// Is wrk the bottleneck? The bare server on the (c) bytes, one wrk
	// thread against two.
	tokFile, err := b.tokens(ctx, "check-", b.cfg.Tokens)
	if err != nil {
		return err
	}
	for _, t := range []int{1, 2} {
		w, err := b.runWrk(ctx, barePid, wrkSpec{Threads: t, Conns: 64, URL: "http://" + bareAddr + "/api/sales/c64/orders",
			Script: purchaseLua, ScriptArgs: []string{tokFile, strconv.Itoa(t)}})
		if err != nil {
			return err
		}
		res.wrkCheck = append(res.wrkCheck, wrkCheck{t, w})
	}
	os.Remove(tokFile)

	// The open model: new buyers of the large stock arriving at half the
	// peak of the same tool, closed loop at 64 connections (wrk's peak in
	// (c) would not do: the crowd's client costs more CPU than wrk's).
	var wrkPeak float64
	for _, p := range res.pairs {
		if p.Key == "c64" {
			wrkPeak = statOf(rates(p.Gate)).Med
		}
	}
	if wrkPeak > 0 {
		closed, err := b.crowd(ctx, st.gw, "open", max(1000, int(wrkPeak)*b.cfg.OpenSeconds/2), 64, 0, nil)
		if err != nil {
			return err
		}
		rate := closed.Rate / 2
		c, err := b.crowd(ctx, st.gw, "open", max(1, int(rate)*b.cfg.OpenSeconds), 512, rate, nil)
		res.open = &openRun{What: "purchase, large stock, a new buyer every request", Rate: rate, Of: closed.Rate, Run: c, Server: "flashgate"}
		if err != nil {
			return err
		}
	}
	return nil
}
