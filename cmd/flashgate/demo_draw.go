package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/draw"
	"github.com/flashgate/flashgate/internal/stripelocal"
)

// drawDemoSale is the draw demo's sale id.
const drawDemoSale = "draw"

// drawDemoWindow is how long the draw demo's entries stay open for n
// entrants: the crowd enters and its holds are authorised within it (about
// 1,000 a second on a laptop), with room to spare.
func drawDemoWindow(n int) time.Duration { return 10*time.Second + time.Duration(n)*2*time.Millisecond }

// drawEntrant is one entrant of the draw demo. A late one came after the
// close (answered 409 closed, or its hold released by the close before it
// confirmed it), as in a real draw whose crowd outlasts its window: on a
// slow or busy machine the crowd may not fit in drawDemoWindow.
type drawEntrant struct {
	user, variant, entry, intent string
	late                         bool
}

// runDrawDemo runs `flashgate demo --draw` on the demo's tiers (base: the
// gateway, admin: the control plane) with the stand-in provider: a crowd
// enters a draw of three sizes through the gateway, each entry's card hold
// authorised at the stand-in, the leader closes the draw at
// entries_close_at; it prints the winners per size, the seed check anyone
// can redo from the published file, and the invariants. It fails unless
// every one held.
//
// Each entrant confirms its entry's hold at the stand-in, as the Payment
// Element would; the stand-in's webhook makes the entry entered.
func runDrawDemo(ctx context.Context, cfg *Config, stdout io.Writer, s *system, c conns, stand *stripelocal.Server, base, admin string) error {
	entrants, units := 20_000, int64(300)
	if cfg.set["users"] {
		entrants = cfg.Users
	}
	if cfg.set["units"] {
		units = cfg.Units
	}
	began := time.Now()
	sizes := []string{"S", "M", "L"}
	variants := splitUnits(sizes, units)
	open := time.Now()
	window := drawDemoWindow(entrants)
	closeAt := open.Add(window)
	fmt.Fprintf(stdout, "flashgate demo --draw: %d entries over %d sizes, %d units, entries open for %v, gateway %s, embedded store, SQLite and the stand-in provider\n",
		entrants, len(sizes), units, window, base)
	sale, err := s.cp.CreateSale(ctx, flashgate.Sale{ID: drawDemoSale, Name: "Limited sneaker draw", PriceCents: 18000, Total: units,
		PerUser: 1, Queue: flashgate.QueueDraw, EntriesOpenAt: &open, EntriesCloseAt: &closeAt, Variants: variants})
	if err != nil {
		return fmt.Errorf("creating the draw: %w", err)
	}
	stand.SetWebhookURL(base + "/webhooks/stripe")
	es, err := enterDraw(ctx, cfg, stand, base, sale, sizes, entrants, closeAt)
	if err != nil {
		return err
	}
	late := 0
	for _, e := range es {
		if e.late {
			late++
		}
	}
	// Each hold's webhook makes its entry entered before the close.
	entered := int64(-1) // unknown: the crowd ended after the close
	for entered < int64(entrants-late) && time.Now().Before(closeAt) {
		if st, err := s.cp.SaleStatus(ctx, drawDemoSale); err == nil && st.Draw != nil {
			entered = st.Draw.Entered
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	if entered >= 0 {
		fmt.Fprintf(stdout, "entered       %d entries, %d holds authorised (%s)\n", len(es)-late, entered, time.Since(began).Round(time.Millisecond))
	} else {
		fmt.Fprintf(stdout, "entered       %d entries (%s)\n", len(es)-late, time.Since(began).Round(time.Millisecond))
	}
	if late > 0 {
		fmt.Fprintf(stdout, "late          %d entrants came after the close (409 closed, or their hold released by the close): the crowd outlasted the %v window on this machine\n", late, window)
	}
	// The leader closes the draw at entries_close_at.
	var closed bool
	for deadline := closeAt.Add(5 * time.Minute); !closed; {
		st, err := s.cp.SaleStatus(ctx, drawDemoSale)
		closed = err == nil && st.Draw != nil && st.Draw.Closed
		if !closed && time.Now().After(deadline) {
			return fmt.Errorf("the draw did not close within 5 minutes of entries_close_at")
		}
		if !closed {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	fmt.Fprintf(stdout, "closed        %s after entries_close_at\n", time.Since(closeAt).Round(time.Millisecond))
	body, err := s.cp.DrawFile(ctx, drawDemoSale)
	if err != nil {
		return err
	}
	f, err := draw.Read(bytes.NewReader(body))
	if err != nil {
		return err
	}
	won, verr := draw.Verify(f)
	fmt.Fprintf(stdout, "seed          %x\ncommitment    %s (published when entries opened; SHA-256 of the seed)\n", f.Seed, f.SeedSHA256)
	fmt.Fprintf(stdout, "verify        GET /admin/sales/%s/draw.txt > draw.txt && flashgate draw verify draw.txt\n", drawDemoSale)
	winner := map[string]bool{}
	for _, v := range sizes {
		for _, e := range won[v] {
			winner[e.ID] = true
		}
		fmt.Fprintf(stdout, "size %-8s %d units, %d winners\n", v, f.Stock[v], len(won[v]))
	}
	return drawChecks(ctx, stdout, c, stand, f, es, winner, verr, units, began)
}

// enterDraw enters n buyers (sizes in turn) through the gateway, each
// confirming its entry's hold at the stand-in.
func enterDraw(ctx context.Context, cfg *Config, stand *stripelocal.Server, base string,
	sale flashgate.Sale, sizes []string, n int, closeAt time.Time) ([]drawEntrant, error) {
	toks, err := mintTokens([]byte(cfg.JWTSecret), "entrant-", n, time.Now().Add(time.Hour))
	if err != nil {
		return nil, err
	}
	cl := &fasthttp.Client{MaxConnsPerHost: 256, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second}
	out := make([]drawEntrant, n)
	var next atomic.Int64
	var first error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				e := drawEntrant{user: fmt.Sprintf("entrant-%d", i), variant: sizes[i%len(sizes)]}
				err := enterOne(cl, stand, base, sale, toks[i], &e, closeAt)
				mu.Lock()
				if err != nil && first == nil {
					first = err
				}
				out[i] = e
				mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	if first != nil {
		return nil, first
	}
	return out, nil
}

// demoHoldTries is how many times enterOne asks the pay route for an
// entry's hold when the entry was answered without it.
const demoHoldTries = 10

// enterOne enters one buyer and confirms the hold the entry's answer
// names. An entrant turned away by the close (see drawEntrant) is late,
// not an error.
func enterOne(cl *fasthttp.Client, stand *stripelocal.Server, base string, sale flashgate.Sale, tok string, e *drawEntrant, closeAt time.Time) error {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	post := func(path, body string) error {
		req.Reset()
		resp.Reset()
		req.SetRequestURI(base + "/api/sales/" + sale.ID + path)
		req.Header.SetMethod("POST")
		req.Header.Set("Authorization", "Bearer "+tok)
		req.SetBodyString(body)
		return cl.Do(req, resp)
	}
	closed := func() bool {
		return resp.StatusCode() == fasthttp.StatusConflict && bytes.Contains(resp.Body(), []byte(`"closed"`))
	}
	if err := post("/entry", `{"variant":"`+e.variant+`"}`); err != nil {
		return fmt.Errorf("entering %s: %w", e.user, err)
	}
	if closed() {
		e.late = true
		return nil
	}
	var a struct {
		EntryID       string `json:"entry_id"`
		PaymentIntent string `json:"payment_intent"`
	}
	if err := json.Unmarshal(resp.Body(), &a); err != nil || resp.StatusCode() != fasthttp.StatusCreated || a.EntryID == "" {
		return fmt.Errorf("entering %s: %d %s", e.user, resp.StatusCode(), resp.Body())
	}
	// An entry answered without its hold (the provider or the database
	// not reachable in time, docs/api.md) gets it from the pay route, as
	// the item page does: asked again on a 503 or a 429, a few times.
	for try := 0; a.PaymentIntent == "" && try < demoHoldTries; try++ {
		if try > 0 {
			time.Sleep(time.Duration(try) * 100 * time.Millisecond)
		}
		if err := post("/entry/pay", ""); err != nil {
			continue
		}
		switch code := resp.StatusCode(); {
		case code == fasthttp.StatusOK || code == fasthttp.StatusCreated:
			if err := json.Unmarshal(resp.Body(), &a); err != nil {
				return fmt.Errorf("holding for %s: %d %s", e.user, code, resp.Body())
			}
		case code == fasthttp.StatusServiceUnavailable || code == fasthttp.StatusTooManyRequests:
		case closed():
			e.late = true
			return nil
		default:
			return fmt.Errorf("holding for %s: %d %s", e.user, code, resp.Body())
		}
	}
	if a.PaymentIntent == "" {
		return fmt.Errorf("holding for %s: no hold after %d tries: %d %s", e.user, demoHoldTries, resp.StatusCode(), resp.Body())
	}
	e.entry, e.intent = a.EntryID, a.PaymentIntent
	// The entrant confirms the hold as the Payment Element would; the
	// stand-in's webhook makes the entry entered.
	if in, err := stand.Confirm(e.intent, "4242424242424242"); err != nil {
		if in.Status == flashgate.IntentCanceled && !time.Now().Before(closeAt) {
			e.late = true // the close released the hold first
			return nil
		}
		return fmt.Errorf("entering %s: confirming the hold: %w", e.user, err)
	}
	return nil
}

// drawChecks prints the draw demo's invariants: the file verifies; each
// size's units are captured, each by one of its winners (0 losers
// charged); every other hold is released; one paid order per unit.
func drawChecks(ctx context.Context, stdout io.Writer, c conns, stand *stripelocal.Server, f *draw.File, es []drawEntrant,
	winner map[string]bool, verr error, units int64, began time.Time) error {
	byIntent := make(map[string]drawEntrant, len(es))
	for _, e := range es {
		byIntent[e.intent] = e
	}
	var captured, losersCharged, held int
	var perSize map[string]int
	count := func() {
		captured, losersCharged, held, perSize = 0, 0, 0, map[string]int{}
		for _, in := range stand.Intents() {
			e, ok := byIntent[in.ID]
			if !ok {
				continue
			}
			switch in.Status {
			case flashgate.IntentSucceeded:
				captured++
				perSize[e.variant]++
				if !winner[e.entry] {
					losersCharged++
				}
			case flashgate.IntentCanceled:
			default:
				held++
			}
		}
	}
	// A hold authorised after the close (a late entrant's) is released by
	// the leader's read of the holds, on a later tick than the close's
	// releases: the checks wait for it, up to drawSettle.
	count()
	for settle := time.Now().Add(drawSettle); held > 0 && time.Now().Before(settle); count() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	paid, err := c.db.OrdersPage(ctx, drawDemoSale, flashgate.StatusPaid, "", int(units)+1)
	if err != nil {
		return err
	}
	sizesOK := true
	for v, n := range f.Stock {
		sizesOK = sizesOK && perSize[v] == n
	}
	checks := []check{
		{verified(verr), verr == nil},
		{fmt.Sprintf("units = winners captured: %d captured of %d units, each size's units", captured, units), int64(captured) == units && sizesOK},
		{fmt.Sprintf("losers charged: %d", losersCharged), losersCharged == 0},
		{fmt.Sprintf("holds neither captured nor released: %d", held), held == 0},
		{fmt.Sprintf("paid orders: %d, one per unit", len(paid)), int64(len(paid)) == units},
	}
	if failed := printChecks(stdout, checks); failed > 0 {
		return fmt.Errorf("demo --draw: %d of %d invariant checks failed", failed, len(checks))
	}
	fmt.Fprintf(stdout, "demo --draw: every invariant held (%s)\n", time.Since(began).Round(time.Millisecond))
	return nil
}

// drawSettle is how long the draw demo's checks wait for the holds the
// close did not settle (authorised after it) to be released.
const drawSettle = 30 * time.Second

// drawDemoNext is the draw `demo --draw --serve` opens after its report,
// for a visitor to enter from the item page; drawDemoNextWindow is how
// long its entries stay open (the leader then closes it).
const (
	drawDemoNext       = "draw-next"
	drawDemoNextWindow = 10 * time.Minute
)

// serveDrawDemo is `demo --draw --serve` after the report: a second draw
// of the three sizes, entries open for drawDemoNextWindow, so a visitor can
// enter from its item page (the card form is the stand-in provider's), and
// the URLs of both draws' pages, the dashboard and a token.
func serveDrawDemo(ctx context.Context, cfg *Config, stdout io.Writer, s *system, base, admin string) error {
	open := time.Now()
	closeAt := open.Add(drawDemoNextWindow)
	sizes := []string{"S", "M", "L"}
	if _, err := s.cp.CreateSale(ctx, flashgate.Sale{ID: drawDemoNext, Name: "Next sneaker draw", PriceCents: 18000, Total: 30,
		PerUser: 1, Queue: flashgate.QueueDraw, EntriesOpenAt: &open, EntriesCloseAt: &closeAt, Variants: splitUnits(sizes, 30)}); err != nil {
		return fmt.Errorf("creating draw %s: %w", drawDemoNext, err)
	}
	visitor, err := mintToken([]byte(cfg.JWTSecret), "visitor", time.Now().Add(24*time.Hour))
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nserving until interrupted (Ctrl-C); draw %s takes entries until %s, then the leader draws it\n",
		drawDemoNext, closeAt.Format(time.TimeOnly))
	for _, id := range []string{drawDemoSale, drawDemoNext} {
		fmt.Fprintf(stdout, "  item page  %s/sales/%s#token=%s\n", base, id, visitor)
	}
	fmt.Fprintf(stdout, "  dashboard  %s/admin/  (admin token %s)\n", admin, cfg.AdminToken)
	fmt.Fprintf(stdout, "  token      flashgate token --jwt-secret %s --user alice\n", cfg.JWTSecret)
	return nil
}

// verified words the file's check.
func verified(err error) string {
	if err != nil {
		return "the published file does not verify: " + err.Error()
	}
	return "the published file verifies: the seed hashes to the commitment, every result is the draw's"
}
