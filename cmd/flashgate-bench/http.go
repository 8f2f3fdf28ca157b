package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"time"
)

// scenario is one wrk scenario of the HTTP phase. Every scenario is here,
// so that what is measured can be read (and changed) in one place.
type scenario struct {
	Key, Label string
	Conns      int
	Method     string
	Path       string
	Headers    []string // besides the token of Tokens scenarios
	Tokens     bool     // a new buyer token on every request (purchase.lua)
	Entrants   bool     // the next waiting entrant of the fair queue on every request: token and ticket (queue.lua)
	Sale       string   // a purchase scenario's sale, whose units sold are counted
	// Replica: with one replica attached, the stack's serve (default flags,
	// --wait-replicas auto) against a second serve with --wait-replicas 0
	// in the bare server's place (replica.go).
	Replica bool
	// Fsync: a stack whose Redis has AOF with appendfsync always against
	// one with appendfsync everysec (the shipped configuration) in the bare
	// server's place, each with no replica (replica.go).
	Fsync bool
	// Body is the request body ("" none), e.g. a purchase's variant.
	Body string
	// OtherPath, when set, puts the same stack in the bare server's place
	// at this path, without Body, and OtherSale is that path's sale (a
	// purchase's): the (v) scenarios measure a 20-variant sale against a
	// sale of one stock, in the same rounds.
	OtherPath, OtherSale string
}

// variantCount is the (v) scenarios' number of variants.
const variantCount = 20

// variantLabel and variantSoldLabel are the (v) scenarios' labels: the
// bare column is the same request on a sale of one stock.
const (
	variantLabel     = "(v) purchase naming the last of a 20-variant sale's variants, large stock, a new buyer every request, against the same purchase of a one-stock sale in the bare column"
	variantSoldLabel = "(v) purchase naming a sold-out variant of a 20-variant sale (`409 sold_out` naming it) while the others sell, one buyer's token, against the sold-out one-stock sale in the bare column"
)

// replicaLabel is the (r) scenarios' label: the bare column is the serve
// with --wait-replicas 0.
const fsyncLabel = "(f) purchase, Redis with AOF `appendfsync always` against `appendfsync everysec` (the shipped configuration) in the bare column, no replica, a new buyer every request"

const replicaLabel = "(r) purchase with one replica attached, default flags (`WAIT` on) against `--wait-replicas 0` in the bare column, a new buyer every request"

// httpSaleRate is the http phase's --sale-rate.
const httpSaleRate = 1_000_000

// maxUnits is the largest sale the control plane accepts: each purchase
// scenario has its own.
const maxUnits = 1_000_000

func (b *bench) scenarios(tok string) []scenario {
	auth := []string{"Authorization: Bearer " + tok}
	gz := []string{"Accept-Encoding: gzip"}
	const so, ns, page = "/api/sales/soldout/orders", "/api/sales/page/orders", "/sales/page"
	const qs, na = "/api/sales/" + fairSale + "/queue", "/api/sales/" + fairSale + "/orders" // queue.go
	return []scenario{
		{Key: "a64", Label: "(a) sold-out purchase, one buyer's token", Conns: 64, Method: "POST", Path: so, Headers: auth},
		{Key: "a256", Label: "(a) sold-out purchase, one buyer's token", Conns: 256, Method: "POST", Path: so, Headers: auth},
		{Key: "a64new", Label: "(a) sold-out purchase, a new buyer every request", Conns: 64, Method: "POST", Path: so, Tokens: true},
		{Key: "a256new", Label: "(a) sold-out purchase, a new buyer every request", Conns: 256, Method: "POST", Path: so, Tokens: true},
		{Key: "n64", Label: "(a) not-started purchase, one buyer's token", Conns: 64, Method: "POST", Path: ns, Headers: auth},
		{Key: "n256", Label: "(a) not-started purchase, one buyer's token", Conns: 256, Method: "POST", Path: ns, Headers: auth},
		{Key: "n64new", Label: "(a) not-started purchase, a new buyer every request", Conns: 64, Method: "POST", Path: ns, Tokens: true},
		{Key: "n256new", Label: "(a) not-started purchase, a new buyer every request", Conns: 256, Method: "POST", Path: ns, Tokens: true},
		{Key: "q64", Label: "(q) fair queue status poll, a new entrant every request", Conns: 64, Method: "GET", Path: qs, Entrants: true},
		{Key: "q256", Label: "(q) fair queue status poll, a new entrant every request", Conns: 256, Method: "GET", Path: qs, Entrants: true},
		{Key: "na64", Label: "(q) purchase by an entrant not yet admitted (`409 not_admitted`), a new entrant every request", Conns: 64, Method: "POST", Path: na, Entrants: true},
		{Key: "na256", Label: "(q) purchase by an entrant not yet admitted (`409 not_admitted`), a new entrant every request", Conns: 256, Method: "POST", Path: na, Entrants: true},
		{Key: "b64", Label: "(b) item page, gzip", Conns: 64, Method: "GET", Path: page, Headers: gz},
		{Key: "b256", Label: "(b) item page, gzip", Conns: 256, Method: "GET", Path: page, Headers: gz},
		{Key: "c64", Label: "(c) purchase, large stock, a new buyer every request", Conns: 64, Method: "POST", Path: "/api/sales/c64/orders", Tokens: true, Sale: "c64"},
		{Key: "c256", Label: "(c) purchase, large stock, a new buyer every request", Conns: 256, Method: "POST", Path: "/api/sales/c256/orders", Tokens: true, Sale: "c256"},
		{Key: "r64", Label: replicaLabel, Conns: 64, Method: "POST", Path: "/api/sales/r64/orders", Tokens: true, Sale: "r64", Replica: true},
		{Key: "r256", Label: replicaLabel, Conns: 256, Method: "POST", Path: "/api/sales/r256/orders", Tokens: true, Sale: "r256", Replica: true},
		{Key: "f64", Label: fsyncLabel, Conns: 64, Method: "POST", Path: "/api/sales/f64/orders", Tokens: true, Sale: "f64", Fsync: true},
		{Key: "v64", Label: variantLabel, Conns: 64, Method: "POST", Path: "/api/sales/v64/orders", Tokens: true, Sale: "v64",
			Body: fmt.Sprintf(`{"variant":"v%02d"}`, variantCount), OtherPath: "/api/sales/v64one/orders", OtherSale: "v64one"},
		{Key: "vs64", Label: variantSoldLabel, Conns: 64, Method: "POST", Path: "/api/sales/vsold/orders", Headers: auth,
			Body: fmt.Sprintf(`{"variant":"v%02d"}`, variantCount), OtherPath: so},
	}
}

// httpResult is the HTTP phase's part of the report.
type httpResult struct {
	pairs     []*pairResult
	sizes     [][3]string // path, flashgate bytes, bare bytes
	wrkCheck  []wrkCheck
	open      *openRun
	purchaseN int64     // units the (c) rounds sold
	queue     *queueEnv // the (q) scenarios' entrants, or nil
}

func (b *bench) httpPhase(ctx context.Context) error {
	res := &httpResult{}
	b.rep.http = res
	db, err := b.dbURL(ctx, "bench_http")
	if err != nil {
		return err
	}
	// The per-sale rate limit (50,000/s by default) judges a purchase
	// before admission: at a million a second it runs as always but turns
	// nobody away, so that (na) measures the not-admitted answer and not
	// 429s. No other scenario comes near the default: a rejection is
	// answered before the limit, a purchase of (c) is slower than it.
	st, err := b.startStack(ctx, "http", db, "--sale-rate", strconv.Itoa(httpSaleRate))
	if err != nil {
		return err
	}
	// The fair queue's entrants first (queue.go): its start waits for them.
	var qenv *queueEnv
	if b.wantQueue() {
		n, maxnum, err := b.queueSettings()
		if err != nil {
			return err
		}
		starts, err := b.createFairSale(st, n, maxnum)
		if err != nil {
			return err
		}
		if qenv, err = b.enterQueue(ctx, st, n, starts); err != nil {
			return err
		}
		res.queue = qenv
	}
	for _, s := range []struct {
		id    string
		total int64
		open  bool
	}{{"soldout", 1, true}, {"page", 100, false}, {"c64", maxUnits, true}, {"c256", maxUnits, true}, {"open", maxUnits, true},
		{"r64", maxUnits, true}, {"r256", maxUnits, true}} {
		if err := b.createSale(st, s.id, s.total, s.open); err != nil {
			return err
		}
	}
	if b.cfg.wantScenario("v64") || b.cfg.wantScenario("vs64") {
		// (v): a large 20-variant sale and its one-stock twin, and a
		// 20-variant sale whose last variant sells out below.
		// The named (last) variant holds most of the stock, so that no
		// round sells it out and turns purchases into rejections.
		if err := b.createVariantSale(st, "v64", variantCount, 1000, maxUnits-1000*(variantCount-1)); err != nil {
			return err
		}
		if err := b.createSale(st, "v64one", maxUnits, true); err != nil {
			return err
		}
		if err := b.createVariantSale(st, "vsold", variantCount, 1000, 1); err != nil {
			return err
		}
	}
	first, err := b.token(ctx, "first")
	if err != nil {
		return err
	}
	tok, err := b.token(ctx, "crowd")
	if err != nil {
		return err
	}
	capTok, err := b.token(ctx, "capture")
	if err != nil {
		return err
	}
	time.Sleep(300 * time.Millisecond) // the gateway's state refresh
	if _, code, err := exchange(st.gw, rawRequest("POST", st.gw, "/api/sales/soldout/orders", []string{"Authorization: Bearer " + first})); err != nil || code != 201 {
		return fmt.Errorf("buying the sold-out sale's unit: status %d, %v", code, err)
	}
	if _, err := b.waitFigures(ctx, st, "soldout", 10*time.Second, func(f saleFigures) bool { return f.Booked == 1 }); err != nil {
		return err
	}
	if b.cfg.wantScenario("vs64") {
		req := rawRequestBody("POST", st.gw, "/api/sales/vsold/orders", []string{"Authorization: Bearer " + first}, fmt.Sprintf(`{"variant":"v%02d"}`, variantCount))
		if _, code, err := exchange(st.gw, req); err != nil || code != 201 {
			return fmt.Errorf("buying the sold-out variant's unit: status %d, %v", code, err)
		}
	}
	time.Sleep(300 * time.Millisecond)

	// The bare server answers each path with flashgate's own answer.
	type capt struct {
		path, name, method string
		hdr                []string
		want               int
		body               string // what the answer must hold, or ""
	}
	capts := []capt{
		{"/api/sales/soldout/orders", "soldout", "POST", []string{"Authorization: Bearer " + tok}, 409, ""},
		{"/api/sales/page/orders", "notstarted", "POST", []string{"Authorization: Bearer " + tok}, 409, ""},
		{"/sales/page", "page", "GET", []string{"Accept-Encoding: gzip"}, 200, ""},
		{"/api/sales/c64/orders", "purchase", "POST", []string{"Authorization: Bearer " + capTok}, 201, ""},
	}
	if qenv != nil {
		// A waiting entrant's answers (each entrant's differ from another's
		// only in their figures).
		qhdr := []string{"Authorization: Bearer " + qenv.token, "X-Queue-Ticket: " + qenv.ticket}
		capts = append(capts,
			capt{"/api/sales/" + fairSale + "/queue", "queuestatus", "GET", qhdr, 200, `"state":"waiting"`},
			capt{"/api/sales/" + fairSale + "/orders", "notadmitted", "POST", qhdr, 409, `"error":"not_admitted","state":"waiting"`})
	}
	var bareArgs []string
	sizes := map[string]int{}
	for _, c := range capts {
		file, n, err := b.capture(c.name, st.gw, c.method, c.path, c.hdr, c.want)
		if err != nil {
			return err
		}
		if raw, err := os.ReadFile(file); err != nil || !bytes.Contains(raw, []byte(c.body)) {
			return fmt.Errorf("capturing %s: the answer lacks %s: %.300s", c.name, c.body, raw)
		}
		sizes[c.path] = n
		bareArgs = append(bareArgs, c.path+"="+file)
	}
	bareArgs = append(bareArgs, "/api/sales/c256/orders="+b.path("purchase.http"))
	bareAddr, err := freeAddr()
	if err != nil {
		return err
	}
	b.r.alias(bareAddr, "$BARE")
	bare, err := b.r.start("bare", nil, append([]string{b.barebin, bareAddr}, bareArgs...)...)
	if err != nil {
		return err
	}
	if err := waitTCP(ctx, bareAddr, bare, 10*time.Second); err != nil {
		return err
	}
	for _, c := range capts {
		raw, _, err := exchange(bareAddr, rawRequest(c.method, bareAddr, c.path, c.hdr))
		if err != nil {
			return fmt.Errorf("bare server: %w", err)
		}
		res.sizes = append(res.sizes, [3]string{c.method + " " + c.path, strconv.Itoa(sizes[c.path]), strconv.Itoa(len(raw))})
	}

	postLua := b.root + "/scripts/post.lua"
	purchaseLua := b.root + "/scripts/purchase.lua"
	queueLua := b.root + "/scripts/queue.lua"
	b.r.alias(b.root+"/", "")
	var renv *replicaEnv // the (r) scenarios', started by the first
	var fenv *fsyncEnv   // the (f) scenario's
	for _, sc := range b.scenarios(tok) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !b.cfg.wantScenario(sc.Key) {
			continue
		}
		p := &pairResult{Key: sc.Key, Label: sc.Label, Threads: b.cfg.Threads, Conns: sc.Conns}
		res.pairs = append(res.pairs, p)
		b.logf("  %s: %s, -c%d", sc.Key, sc.Label, sc.Conns)
		if sc.Replica && renv == nil {
			if renv, err = b.startReplicaEnv(ctx, st, "--sale-rate", strconv.Itoa(httpSaleRate)); err != nil {
				p.Err = err
				b.logf("  %s failed: %v", sc.Key, p.Err)
				continue
			}
		}
		if sc.Fsync && fenv == nil {
			if fenv, err = b.startFsyncEnv(ctx, sc.Sale, "--sale-rate", strconv.Itoa(httpSaleRate)); err != nil {
				p.Err = err
				b.logf("  %s failed: %v", sc.Key, p.Err)
				continue
			}
		}
		var batches waitHist
		// gst is the stack measured as flashgate, ost the one in the bare
		// server's place (nil: the bare server), figs the one whose admin
		// API tells the other's sale figures.
		gst, ost, ofigs := st, (*stack)(nil), st
		other, otherPid := bareAddr, bare.Pid()
		otherPath, otherSale := sc.Path, sc.Sale
		switch {
		case sc.Replica:
			ost = renv.off
		case sc.Fsync:
			gst, ost, ofigs = fenv.always, fenv.everysec, fenv.everysec
		case sc.OtherPath != "":
			ost, otherPath, otherSale = st, sc.OtherPath, sc.OtherSale
		}
		if ost != nil {
			other, otherPid = ost.gw, ost.serve.Pid()
		}
		for r := 1; r <= b.cfg.Rounds && ctx.Err() == nil; r++ {
			spec := wrkSpec{Threads: b.cfg.Threads, Conns: sc.Conns, Headers: sc.Headers}
			var tokFile, otherTok string
			if sc.Tokens {
				if tokFile, err = b.tokens(ctx, fmt.Sprintf("%sr%d-", sc.Key, r), b.cfg.Tokens); err != nil {
					p.Err = err
					break
				}
				spec.Script, spec.ScriptArgs = purchaseLua, []string{tokFile, strconv.Itoa(b.cfg.Threads), sc.Body}
				if ost != nil {
					// The other serve sells the same sale (r) or one of the
					// same name (f): buyers of its own, or the second run
					// would answer the first's buyers already_purchased.
					if otherTok, err = b.tokens(ctx, fmt.Sprintf("%sr%do-", sc.Key, r), b.cfg.Tokens); err != nil {
						p.Err = err
						break
					}
				}
			} else if sc.Entrants {
				spec.Script, spec.ScriptArgs = queueLua, []string{qenv.file, strconv.Itoa(b.cfg.Threads), sc.Method}
			} else if sc.Method == "POST" {
				spec.Script, spec.ScriptArgs = postLua, []string{sc.Body}
			}
			// The bare server goes first in odd rounds and flashgate in even
			// ones, so that a drift of the machine's speed over a scenario
			// favours neither.
			var bw, gw wrkRun
			runBare := func() (err error) {
				bs := spec
				bs.URL = "http://" + other + otherPath
				if sc.OtherPath != "" && len(bs.ScriptArgs) > 0 {
					bs.ScriptArgs = append([]string(nil), bs.ScriptArgs...)
					bs.ScriptArgs[len(bs.ScriptArgs)-1] = "" // no body: one stock
				}
				if otherTok != "" {
					bs.ScriptArgs = []string{otherTok, strconv.Itoa(b.cfg.Threads)}
				}
				if bw, err = b.runWrk(ctx, otherPid, bs); err != nil || ost == nil || otherSale == "" {
					return err
				}
				// The other serve's backlog drains before the next run too.
				_, err = b.waitFigures(ctx, ofigs, otherSale, 60*time.Second, func(f saleFigures) bool { return f.StreamBacklog == 0 })
				return err
			}
			runGate := func() (err error) {
				var before saleFigures
				if sc.Sale != "" {
					before, _ = b.figures(gst, sc.Sale)
				}
				var decBefore map[string]float64
				if sc.Entrants && sc.Method == "POST" {
					decBefore, _ = b.admissionCounts(st)
				}
				var hBefore waitHist
				if sc.Replica {
					hBefore, _ = b.waitBatches(st)
				}
				gs := spec
				gs.URL = "http://" + gst.gw + sc.Path
				if gw, err = b.runWrk(ctx, gst.serve.Pid(), gs); err != nil {
					return err
				}
				if sc.Replica {
					if h, err := b.waitBatches(st); err == nil {
						batches = batches.plus(h.minus(hBefore))
					}
				}
				if sc.Entrants && sc.Method == "GET" && gw.Non2xx > 0 {
					p.Notes = append(p.Notes, fmt.Sprintf("round %d: %d requests, %d answers not 200", r, gw.Requests, gw.Non2xx))
				}
				if sc.Sale != "" {
					// The sink's backlog drains before the next run, which
					// may be the bare server's.
					after, _ := b.waitFigures(ctx, gst, sc.Sale, 60*time.Second, func(f saleFigures) bool { return f.StreamBacklog == 0 })
					sold := after.Booked - before.Booked
					res.purchaseN += sold
					if gw.Non2xx > 0 {
						p.Notes = append(p.Notes, fmt.Sprintf("round %d: %d requests, %d units sold, %d answers not 201", r, gw.Requests, sold, gw.Non2xx))
					}
				}
				if decBefore != nil {
					// Every purchase should have been judged not_admitted: the
					// entrants are many enough for the user rate limit.
					after, err := b.admissionCounts(st)
					if err != nil {
						p.Notes = append(p.Notes, fmt.Sprintf("round %d: reading the admission counts: %v", r, err))
					}
					for d, n := range after {
						if n -= decBefore[d]; d != "not_admitted" && n > 0 {
							p.Notes = append(p.Notes, fmt.Sprintf("round %d: %s of %s purchases judged %s", r, num(n), num(float64(gw.Requests)), d))
						}
					}
				}
				return nil
			}
			first, second := runBare, runGate
			if r%2 == 0 {
				first, second = runGate, runBare
			}
			if err := first(); err != nil {
				p.Err = err
				break
			}
			if err := second(); err != nil {
				p.Err = err
				break
			}
			p.Bare, p.Gate = append(p.Bare, bw), append(p.Gate, gw)
			if gw.SockErrs != "" {
				p.Notes = append(p.Notes, fmt.Sprintf("round %d: flashgate socket errors: %s", r, gw.SockErrs))
			}
			for _, f := range []string{tokFile, otherTok} {
				if f != "" {
					os.Remove(f)
				}
			}
		}
		if sc.Replica {
			p.Notes = append(p.Notes, "default flags (`WAIT` on): "+batches.String())
			if h, err := b.waitBatches(renv.off); err == nil && h.count > 0 {
				p.Notes = append(p.Notes, "`--wait-replicas 0` sent WAITs: "+h.String())
			}
			b.logf("  %s: %s", sc.Key, batches)
		}
		if p.Err != nil {
			b.logf("  %s failed: %v", sc.Key, p.Err)
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}

	return b.httpChecks(ctx, res, st, bare.Pid(), bareAddr, purchaseLua)
}
