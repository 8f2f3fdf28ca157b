//go:build faults

package faults

import (
	"fmt"
	"strings"
	"time"
)

// report renders docs/RELIABILITY.md.
func report(results []result, rev string, at time.Time) string {
	var b strings.Builder
	b.WriteString("# Reliability: the fault suite\n\n")
	fmt.Fprintf(&b, "This run: commit `%s`, %s, %d scenarios, %d failed.\n\n", rev, at.UTC().Format("2006-01-02 15:04 MST"), len(results), failedCount(results))
	b.WriteString("Written by `make faults` (`systemtest/faults`) from one run on loopback: for each scenario a fresh split\n")
	b.WriteString("deployment of real processes (Redis primary + replica with AOF, PostgreSQL or SQLite, control plane, 2 order sinks,\n")
	b.WriteString("2 inventories, 2 gateways), a crowd of 2,000 distinct buyers for 2,500 units arriving over 5 s while the fault is\n")
	b.WriteString("injected 1.5 s in, buyers retrying as a client behind a load balancer would (no answer or 5xx: back off and try the\n")
	b.WriteString("other gateway; 429: wait Retry-After; `409 already_purchased` with an order id is the buyer's order). Then the orders\n")
	b.WriteString("are drained and the sale re-synced, and what the crowd was told is checked against Redis and the database: no\n")
	b.WriteString("oversell, no user twice, every confirmed order exactly one row (but those a FLUSHALL wiped, and those sent in the\n")
	b.WriteString("2 s before a kill -9 of the Redis primary under appendfsync everysec, whose AOF may hold writes back: README's\n")
	b.WriteString("\"Redis restart with AOF\"; both counted as losses), no row without a reservation, booked = live units;\n")
	b.WriteString("then a second crowd of free + 20 buyers must buy exactly the free units. In the first crowd every tenth buyer pays\n")
	b.WriteString("and every 25th cancels their order right after buying (retrying as for a purchase).\n\n")
	b.WriteString("**history**: every purchase attempt, pay, cancel and admin refund with its invocation and answer times, and the\n")
	b.WriteString("expiries, FLUSHALL (and AOF) losses and final rows read from the database, checked for linearizability (porcupine) against\n")
	b.WriteString("a model of a sale: per user, at most one live order and the states an order may pass through; per sale, no more\n")
	b.WriteString("units live than on sale (the model: systemtest/faults/history.go). Unknown: operations without an answer (no answer after\n")
	b.WriteString("the request was sent, or a 5xx), which may or may not have taken effect.\n\n")
	b.WriteString("**requests**: HTTP purchase attempts of both crowds; **201s**: answers 201; **rows**: order rows at the end;\n")
	b.WriteString("**losses**: first-crowd buyers who ended without an order although units remained; **outage**: the longest window in\n")
	b.WriteString("which buyers' attempts only failed (no answer or 5xx), with the count and span of failed attempts; **recovery**: from\n")
	b.WriteString("the repair (restart, SIGCONT) until the repaired part was ready and no buyer's attempt failed any more;\n")
	fmt.Fprintf(&b, "**sells again**: from the fault's end (the repair done, or the FLUSHALL's return; for sentinel-failover and\n")
	fmt.Fprintf(&b, "cluster-primary-kill9 the replica's promotion (its `ROLE` says master: the detection before it, Sentinel's down-after or\n")
	fmt.Fprintf(&b, "the Cluster's node timeout, is left out and shown in **what happened**), for lagging-replica-failover each round's\n")
	fmt.Fprintf(&b, "promotion, for a fair sale the start if the fault ended before it) to the first `201` answered after\n")
	fmt.Fprintf(&b, "it (target %v; over it in bold); **201 → row**: the longest time, over the first crowd's `201`s, from the later of\n", sellAgainTarget)
	fmt.Fprintf(&b, "the `201` and the fault's end to its order row, the rows polled every 200 ms (target %v; over it in bold). Every\n", rowTarget)
	b.WriteString("scenario run by the suite's own crowds also fails if its sale\n")
	fmt.Fprintf(&b, "is still paused (start = 0 with resume set) %v after the fault: a pause nobody ends.\n\n", pausedBound)
	fmt.Fprintf(&b, "The **draw-** scenarios (systemtest/faults/draw_test.go) run a draw instead of crowds: %d entrants over three sizes\n", drawEntrants)
	b.WriteString("for 40 units enter through the gateways, each card held at the stand-in provider (one in 25 with a card whose capture\n")
	b.WriteString("is declined, one in 10 withdrawing before the close), every webhook delivered to both gateways after random delays and\n")
	fmt.Fprintf(&b, "the entry window's replayed at the close; the close paced at %d calls/s (%d captures/s) under the fault. There\n", drawRate, drawCaptureRate)
	b.WriteString("**requests** are entry, pay and withdrawal attempts, **201s** entries made, **rows** paid orders, **recovery** (leader\n")
	b.WriteString("killed) from the kill to the next leader's first capture, and **history** the draw's model (systemtest/faults/history_draw.go) on the\n")
	b.WriteString("final state: per entry at most one captured intent at the provider, no entry charged but those the file's order gives\n")
	b.WriteString("(winners, and the next entrants in place of declined captures), none of those left uncaptured, every hold captured or\n")
	b.WriteString("released, paid rows = units captured ≤ stock per size, the entries file verifies (`flashgate draw verify`);\n")
	b.WriteString("**what happened** gives close → all captured and → all released (the provider's ledger polled every 20 ms).\n\n")
	b.WriteString("| scenario | fault | what happened | requests | 201s | rows | losses | outage | recovery | sells again | 201 → row | history | result | reproduce |\n")
	b.WriteString("|---|---|---|---:|---:|---:|---:|---|---|---|---|---|---|---|\n")
	cell := func(s string) string { return strings.ReplaceAll(strings.ReplaceAll(s, "|", "\\|"), "\n", " ") }
	for _, r := range results {
		res := "pass"
		if len(r.problems) > 0 {
			res = "**FAIL**: " + strings.Join(r.problems, "; ")
			if len(res) > 600 {
				res = res[:600] + "…"
			}
			if r.needs != "" {
				res += " (needs the fix for issue " + r.needs + ")"
			}
		}
		hist := r.history
		if hist == "" {
			hist = "–"
		}
		sellAgain, rowLag := r.sellAgain, r.rowLag
		if sellAgain == "" {
			sellAgain, rowLag = "–", "–" // a scenario that runs its own crowds
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %d | %d | %d | %s | %s | %s | %s | %s | %s | `make faults FAULTS=%s` |\n",
			r.name, cell(r.fault), cell(r.happened), r.requests, r.created, r.rows, r.losses, cell(r.outage), cell(r.recovery),
			cell(sellAgain), cell(rowLag), cell(hist), cell(res), reproduceName(r.name))
	}
	return b.String()
}

// reproduceName is the scenario name a report row's name starts with (a
// repeated run's carries "(run i of n)").
func reproduceName(name string) string {
	if i := strings.Index(name, " ("); i > 0 {
		return name[:i]
	}
	return name
}
