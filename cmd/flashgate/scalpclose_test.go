package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
)

// closeCrowd is what a crowd of scalpers did around a draw's close: every
// entry id an answer named and whose it was, and every answer above 499.
type closeCrowd struct {
	mu      sync.Mutex
	owner   map[string]string // entry id → user
	holds   map[string]string // intent → user
	fivexx  []string
	answers map[string]int
}

func (c *closeCrowd) note(user, what string, a payAnswer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.answers[fmt.Sprintf("%s %d %v", what, a.status, a.body["error"])]++
	if id, _ := a.body["entry_id"].(string); id != "" {
		c.owner[id] = user
	}
	if pi, _ := a.body["payment_intent"].(string); pi != "" {
		c.holds[pi] = user
	}
	if a.status >= 500 || a.status == 0 {
		c.fivexx = append(c.fivexx, fmt.Sprintf("%s %s: %d %s", user, what, a.status, a.raw))
	}
}

// hookRecorder forwards the stand-in's webhook deliveries to the gateway
// and keeps every answer other than 200.
type hookRecorder struct {
	mu  sync.Mutex
	bad []string
	n   int
}

// start serves the recorder in front of target's webhook route and returns
// its address.
func (h *hookRecorder) start(t *testing.T, target string) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req, _ := http.NewRequestWithContext(r.Context(), "POST", target+"/webhooks/stripe", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Stripe-Signature", r.Header.Get("Stripe-Signature"))
		res, err := http.DefaultClient.Do(req)
		h.mu.Lock()
		defer h.mu.Unlock()
		h.n++
		if err != nil {
			h.bad = append(h.bad, err.Error())
			w.WriteHeader(502)
			return
		}
		defer res.Body.Close()
		raw, _ := io.ReadAll(res.Body)
		if res.StatusCode != 200 {
			h.bad = append(h.bad, fmt.Sprintf("%d %s for %.200s", res.StatusCode, raw, body))
		}
		w.WriteHeader(res.StatusCode)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestScalpDrawCloseCrowd: a crowd of one-account scalpers works the second
// either side of a draw's close: each enters, confirms its hold, withdraws,
// enters again in another size, confirms the new hold, replays the signed
// webhooks of its old holds, and asks /entry/pay, all at random moments
// from a second before the close to a second after it. After the close:
// no 5xx; no hold left held; each captured hold is a winner's entry, whose
// order is paid; no buyer charged twice or holding two orders; captures =
// units; everybody else's holds canceled.
func TestScalpDrawCloseCrowd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	p := startPayServe(t, ctx, "sqlite://"+filepath.Join(t.TempDir(), "fg.db"), time.Minute, time.Second, "--user-rate", "0")
	hooks := &hookRecorder{}
	p.stand.SetWebhookURL(hooks.start(t, p.public))
	t.Cleanup(p.stand.Deliveries.Wait)
	const sale = "cc"
	closeAt := p.drawSaleVariants(sale, 1000, 10*time.Second)
	url := p.public + "/api/sales/" + sale + "/entry"
	c := &closeCrowd{owner: map[string]string{}, holds: map[string]string{}, answers: map[string]int{}}
	sizes := []string{"S", "M", "L"}
	const crowd = 60
	users := make([]string, crowd)
	for i := range users {
		users[i] = fmt.Sprintf("sc%02d", i)
	}
	// Everybody enters and two thirds confirm, well before the close.
	var wg sync.WaitGroup
	for i, u := range users {
		wg.Add(1)
		go func(i int, u string) {
			defer wg.Done()
			a := p.tryDo("POST", url, p.token(u), []byte(fmt.Sprintf(`{"variant":%q}`, sizes[i%3])))
			c.note(u, "enter", a)
			if pi, _ := a.body["payment_intent"].(string); pi != "" && i%3 != 0 {
				_, _ = p.stand.Confirm(pi, okCard)
			}
		}(i, u)
	}
	wg.Wait()
	if time.Until(closeAt) < 2*time.Second {
		t.Fatalf("the crowd entered too slowly: %v left before the close", time.Until(closeAt))
	}
	testwait.Until(closeAt.Add(-1100 * time.Millisecond))
	for i, u := range users {
		wg.Add(1)
		go func(i int, u string) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(i)))
			tok := p.token(u)
			// Each buyer's six steps at seeded moments from 1.1 s before the
			// close, 0 to 400 ms apart.
			at := closeAt.Add(-1100 * time.Millisecond)
			for step := 0; step < 6; step++ {
				at = at.Add(time.Duration(rng.Intn(400)) * time.Millisecond)
				testwait.Until(at)
				switch rng.Intn(5) {
				case 0: // withdraw and enter again in another size
					c.note(u, "withdraw", p.tryDo("DELETE", url, tok, nil))
					a := p.tryDo("POST", url, tok, []byte(fmt.Sprintf(`{"variant":%q}`, sizes[rng.Intn(3)])))
					c.note(u, "re-enter", a)
					if pi, _ := a.body["payment_intent"].(string); pi != "" {
						_, _ = p.stand.Confirm(pi, okCard)
					}
				case 1: // confirm every hold of mine
					c.mu.Lock()
					var mine []string
					for pi, who := range c.holds {
						if who == u {
							mine = append(mine, pi)
						}
					}
					c.mu.Unlock()
					for _, pi := range mine {
						_, _ = p.stand.Confirm(pi, okCard)
					}
				case 2: // ask for the hold again
					c.note(u, "pay", p.tryDo("POST", url+"/pay", tok, nil))
				case 3: // replay the signed webhooks of every hold of mine
					c.mu.Lock()
					var mine []string
					for pi, who := range c.holds {
						if who == u {
							mine = append(mine, pi)
						}
					}
					c.mu.Unlock()
					for _, pi := range mine {
						h := p.hook(p.stand.Event(fmt.Sprintf("evt_%s_%d_%s", u, step, pi), flashgate.EventIntentHeld, pi, flashgate.IntentRequiresCapture), time.Now(), payHookSecret)
						c.note(u, "replay", h)
					}
				case 4: // look
					c.note(u, "get", p.tryDo("GET", url, tok, nil))
				}
			}
		}(i, u)
	}
	wg.Wait()
	draw := p.waitDrawClosed(sale, 90*time.Second)
	t.Logf("draw: %v", draw)
	keys := make([]string, 0, len(c.answers))
	for k := range c.answers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		t.Logf("answers %s: %d", k, c.answers[k])
	}
	for _, f := range c.fivexx {
		t.Errorf("answer: %s, want no 5xx", f)
	}
	p.waitNoHoldHeld(sale, 60*time.Second)
	entries, err := p.s.db.DrawEntries(ctx, sale)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]flashgate.DrawEntry{}
	for _, e := range entries {
		byID[e.ID] = e
	}
	charged := map[string]int{}
	captured := 0
	for _, in := range p.stand.Intents() {
		if in.Metadata["sale_id"] != sale {
			continue
		}
		if in.Status == flashgate.IntentRequiresCapture {
			e := byID[in.Metadata["entry_id"]]
			t.Errorf("hold %s of entry %s (%s, %s) held after the close", in.ID, e.ID, e.UserID, e.State)
		}
		if in.Status != flashgate.IntentSucceeded {
			continue
		}
		captured++
		e, ok := byID[in.Metadata["entry_id"]]
		if !ok {
			t.Errorf("charge %s of entry %s: no such entry", in.ID, in.Metadata["entry_id"])
			continue
		}
		charged[e.UserID]++
		if e.State != flashgate.DrawCaptured {
			t.Errorf("charge %s of %s's entry %s: got entry %s, want captured", in.ID, e.UserID, e.ID, e.State)
		}
		o, err := p.s.db.Order(ctx, "o"+e.ID)
		if err != nil || o.Status != flashgate.StatusPaid {
			t.Errorf("charged entry %s of %s: got order %v %v, want paid", e.ID, e.UserID, o.Status, err)
		}
	}
	for u, n := range charged {
		if n > 1 {
			t.Errorf("%s: got %d charges, want at most 1", u, n)
		}
	}
	if captured != 6 || fmt.Sprint(draw["captured"]) != "6" {
		t.Errorf("captures: got %d at the provider, draw %v; want 6", captured, draw["captured"])
	}
	for _, e := range entries {
		switch e.State {
		case flashgate.DrawCaptured, flashgate.DrawReleased, flashgate.DrawWithdrawn, flashgate.DrawPending:
			// A pending entry is out of the draw: its hold released
			// (checked above), its result final (below).
		default:
			t.Errorf("entry %s of %s: got %s after the close, want captured, released, withdrawn or pending", e.ID, e.UserID, e.State)
		}
	}
	p.stand.Deliveries.Wait()
	hooks.mu.Lock()
	t.Logf("webhooks delivered: %d", hooks.n)
	for _, b := range hooks.bad {
		t.Errorf("webhook: got %s, want 200", b)
	}
	hooks.mu.Unlock()
	// Every buyer's answer after the close is final.
	for _, u := range users {
		testwait.Eventually(t, 30*time.Second, func() bool {
			g := p.tryDo("GET", url, p.token(u), nil)
			r := g.body["result"]
			return r == "won" || r == "lost" || r == "withdrawn"
		}, "%s's result final", u)
	}
}

// TestScalpDrawPendingAtCloseFinal: entries still pending at the close (a
// hold never confirmed, a hold confirmed only after the close, no hold at
// all: the provider failed at the entry) take no part in the draw and
// their holds are released; their buyers' GET must then answer a final
// result ("lost": nothing charged), as the item page polls until it does,
// rather than "pending" for good.
func TestScalpDrawPendingAtCloseFinal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := startPayServe(t, ctx, "sqlite://"+filepath.Join(t.TempDir(), "fg.db"), time.Minute, time.Second, "--user-rate", "0")
	p.stand.SetWebhookURL(p.public + "/webhooks/stripe")
	t.Cleanup(p.stand.Deliveries.Wait)
	const sale = "pf"
	closeAt := p.drawSaleVariants(sale, 1000, 4*time.Second)
	url := p.public + "/api/sales/" + sale + "/entry"
	enter := func(u string) string {
		a := p.tryDo("POST", url, p.token(u), []byte(`{"variant":"S"}`))
		if a.status != 201 {
			t.Fatalf("%s enters: got %d %s, want 201", u, a.status, a.raw)
		}
		pi, _ := a.body["payment_intent"].(string)
		return pi
	}
	if _, err := p.stand.Confirm(enter("held"), okCard); err != nil {
		t.Fatal(err)
	}
	enter("unconfirmed")
	late := enter("late")
	p.stand.FailNext(10)
	if pi := enter("noholds"); pi != "" {
		t.Fatalf("noholds: got hold %s with the provider failing, want none", pi)
	}
	p.stand.FailNext(0)
	p.waitEntry(sale, "held", "entered")
	testwait.Until(closeAt.Add(200 * time.Millisecond))
	if in, err := p.stand.Confirm(late, okCard); err != nil || in.Status != flashgate.IntentRequiresCapture {
		t.Fatalf("late's confirm after the close: %v %v", in.Status, err)
	}
	p.waitDrawClosed(sale, 60*time.Second)
	p.waitNoHoldHeld(sale, 30*time.Second)
	if g := p.tryDo("GET", url, p.token("held"), nil); g.body["result"] != "won" {
		t.Errorf("held: got %d %s, want result won", g.status, g.raw)
	}
	final := time.Now().Add(20 * time.Second) // one deadline for every buyer
	for _, u := range []string{"unconfirmed", "late", "noholds"} {
		var g payAnswer
		_, ok := testwait.For(time.Until(final), func() bool {
			a := p.tryDo("GET", url, p.token(u), nil)
			if a.status != 429 {
				g = a
			}
			return a.body["result"] == "lost"
		})
		if !ok {
			t.Errorf("%s, pending at the close: got %d %s, want result lost", u, g.status, g.raw)
		}
	}
}

// TestScalpDrawCloseRedisLost: the crowd confirms, withdraws and enters
// again across the close while Redis loses everything (FLUSHALL) half a
// second before it. After the close: no hold left held, nobody charged
// twice, every charge a captured entry with a paid order, at most the
// units charged, and every buyer's result final. The loss comes at three
// moments: before the close, at it, and just after it.
func TestScalpDrawCloseRedisLost(t *testing.T) {
	for _, at := range []time.Duration{-500 * time.Millisecond, -50 * time.Millisecond, 150 * time.Millisecond} {
		t.Run(fmt.Sprint(at), func(t *testing.T) { scalpDrawCloseRedisLost(t, at) })
	}
}

// scalpDrawCloseRedisLost is TestScalpDrawCloseRedisLost with Redis lost
// at the close + at.
func scalpDrawCloseRedisLost(t *testing.T, at time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	p := startPayServe(t, ctx, "sqlite://"+filepath.Join(t.TempDir(), "fg.db"), time.Minute, time.Second, "--user-rate", "0")
	hooks := &hookRecorder{}
	p.stand.SetWebhookURL(hooks.start(t, p.public))
	t.Cleanup(p.stand.Deliveries.Wait)
	const sale = "cl"
	closeAt := p.drawSaleVariants(sale, 1000, 8*time.Second)
	url := p.public + "/api/sales/" + sale + "/entry"
	sizes := []string{"S", "M", "L"}
	const crowd = 30
	holds := map[string]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := 0; i < crowd; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			u := fmt.Sprintf("rl%02d", i)
			a := p.tryDo("POST", url, p.token(u), []byte(fmt.Sprintf(`{"variant":%q}`, sizes[i%3])))
			if pi, _ := a.body["payment_intent"].(string); pi != "" {
				mu.Lock()
				holds[u] = pi
				mu.Unlock()
				if i%2 == 0 {
					_, _ = p.stand.Confirm(pi, okCard)
				}
			}
		}(i)
	}
	wg.Wait()
	testwait.Until(closeAt.Add(-900 * time.Millisecond))
	var bad []string
	for i := 0; i < crowd; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			u := fmt.Sprintf("rl%02d", i)
			tok := p.token(u)
			testwait.Until(closeAt.Add(-900*time.Millisecond + time.Duration(i*50)*time.Millisecond))
			mu.Lock()
			pi := holds[u]
			mu.Unlock()
			var got []payAnswer
			switch i % 3 {
			case 0:
				got = append(got, p.tryDo("DELETE", url, tok, nil))
				a := p.tryDo("POST", url, tok, []byte(`{"variant":"S"}`))
				got = append(got, a)
				if pi, _ := a.body["payment_intent"].(string); pi != "" {
					_, _ = p.stand.Confirm(pi, okCard)
				}
			case 1:
				if pi != "" {
					_, _ = p.stand.Confirm(pi, okCard)
				}
				got = append(got, p.tryDo("POST", url+"/pay", tok, nil))
			case 2:
				got = append(got, p.tryDo("POST", url, tok, []byte(`{"variant":"M"}`)))
			}
			mu.Lock()
			for _, a := range got {
				if a.status == 0 || (a.status >= 500 && a.status != 503) {
					bad = append(bad, fmt.Sprintf("%s: %d %s", u, a.status, a.raw))
				}
			}
			mu.Unlock()
		}(i)
	}
	testwait.Until(closeAt.Add(at))
	if err := p.rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for _, b := range bad {
		t.Errorf("answer %s, want no 5xx but 503", b)
	}
	draw := p.waitDrawClosed(sale, 120*time.Second)
	t.Logf("draw: %v", draw)
	p.waitNoHoldHeld(sale, 60*time.Second)
	entries, err := p.s.db.DrawEntries(ctx, sale)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]flashgate.DrawEntry{}
	for _, e := range entries {
		byID[e.ID] = e
	}
	charged := map[string]int{}
	captured := 0
	for _, in := range p.stand.Intents() {
		if in.Metadata["sale_id"] != sale || in.Status != flashgate.IntentSucceeded {
			continue
		}
		captured++
		e, ok := byID[in.Metadata["entry_id"]]
		if !ok {
			t.Errorf("charge %s of entry %s: no such entry", in.ID, in.Metadata["entry_id"])
			continue
		}
		charged[e.UserID]++
		if e.State != flashgate.DrawCaptured {
			t.Errorf("charge %s of %s's entry %s: got entry %s, want captured", in.ID, e.UserID, e.ID, e.State)
		}
		testwait.Eventually(t, 30*time.Second, func() bool {
			o, err := p.s.db.Order(ctx, "o"+e.ID)
			return err == nil && o.Status == flashgate.StatusPaid
		}, "charged entry %s's order paid", e.ID)
	}
	for u, n := range charged {
		if n > 1 {
			t.Errorf("%s: got %d charges, want at most 1", u, n)
		}
	}
	if captured > 6 {
		t.Errorf("captures: got %d, want at most 6 (the units)", captured)
	}
	p.stand.Deliveries.Wait()
	hooks.mu.Lock()
	t.Logf("webhooks delivered: %d", hooks.n)
	for _, b := range hooks.bad {
		t.Errorf("webhook: got %s, want 200", b)
	}
	hooks.mu.Unlock()
	// One deadline for every buyer: a result that never becomes final
	// fails the test in 30 s, not in 30 s for each buyer.
	final := time.Now().Add(30 * time.Second)
	for i := 0; i < crowd; i++ {
		u := fmt.Sprintf("rl%02d", i)
		var g payAnswer
		_, ok := testwait.For(time.Until(final), func() bool {
			a := p.tryDo("GET", url, p.token(u), nil)
			if a.status != 429 {
				g = a
			}
			r := a.body["result"]
			return r == "won" || r == "lost" || r == "withdrawn"
		})
		if !ok {
			t.Errorf("%s after the close: got %d %s, want a final result", u, g.status, g.raw)
		}
	}
}

// TestScalpDrawRefundDuringClose: an admin refunds the winners' orders
// ("o" and the entry id, known to the entrant) from the close on, over and
// over and several at once, while their buyers cancel and pay them. Every
// captured hold is refunded once, in full; every such order ends refunded;
// the close finishes; nothing answers 5xx.
func TestScalpDrawRefundDuringClose(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p := startPayServe(t, ctx, "sqlite://"+filepath.Join(t.TempDir(), "fg.db"), time.Minute, time.Second, "--user-rate", "0")
	p.stand.SetWebhookURL(p.public + "/webhooks/stripe")
	t.Cleanup(p.stand.Deliveries.Wait)
	const sale = "rf"
	closeAt := p.drawSaleVariants(sale, 1000, 4*time.Second)
	url := p.public + "/api/sales/" + sale + "/entry"
	users := []string{"r0", "r1", "r2", "r3", "r4", "r5"}
	orders := map[string]string{}
	for i, u := range users {
		a := p.tryDo("POST", url, p.token(u), []byte(fmt.Sprintf(`{"variant":%q}`, []string{"S", "M", "L"}[i%3])))
		pi, _ := a.body["payment_intent"].(string)
		if a.status != 201 || pi == "" {
			t.Fatalf("%s enters: %d %s", u, a.status, a.raw)
		}
		if _, err := p.stand.Confirm(pi, okCard); err != nil {
			t.Fatal(err)
		}
		orders[u] = "o" + a.body["entry_id"].(string)
	}
	for _, u := range users {
		p.waitEntry(sale, u, "entered")
	}
	testwait.Until(closeAt)
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := map[string]int{}
	for _, u := range users {
		for k := 0; k < 3; k++ {
			wg.Add(1)
			go func(u string, k int) {
				defer wg.Done()
				for n := 0; n < 150; n++ {
					var a payAnswer
					switch k {
					case 0, 1:
						a = p.tryDo("POST", p.admin+"/admin/orders/"+orders[u]+"/refund", p.tokAdm, nil)
					case 2:
						a = p.tryDo("POST", p.public+"/api/orders/"+orders[u]+[]string{"/cancel", "/pay"}[n%2], p.token(u), nil)
					}
					mu.Lock()
					seen[fmt.Sprintf("%d %d %v %v", k, a.status, a.body["status"], a.body["error"])]++
					if a.status == 0 || a.status >= 500 && a.status != 503 {
						t.Errorf("%s (%d): got %d %s", u, k, a.status, a.raw)
					}
					if a.body["status"] == "paying" || a.body["client_secret"] != nil {
						t.Errorf("%s pays the draw's order %s: got %d %s, want 409 not_payable (no checkout)", u, orders[u], a.status, a.raw)
					}
					mu.Unlock()
					if k < 2 && a.status == 200 && a.body["status"] == "refunded" {
						return
					}
					if k == 2 && n > 20 {
						return
					}
					testwait.Until(closeAt.Add(time.Duration(n+1) * 20 * time.Millisecond)) // one try each 20 ms from the close
				}
			}(u, k)
		}
	}
	wg.Wait()
	t.Logf("answers: %v", seen)
	p.waitDrawClosed(sale, 60*time.Second)
	for _, u := range users {
		testwait.Eventually(t, 30*time.Second, func() bool {
			o, err := p.s.db.Order(ctx, orders[u])
			return err == nil && o.Status == flashgate.StatusRefunded
		}, "%s's order %s refunded", u, orders[u])
	}
	refunds := p.stand.Refunds()
	for _, in := range p.stand.Intents() {
		if in.Metadata["sale_id"] != sale && in.Metadata["order_id"] == "" {
			continue
		}
		n, sum := 0, int64(0)
		for _, r := range refunds {
			if r.PaymentIntent == in.ID {
				n++
				sum += r.Amount
			}
		}
		if in.Metadata["order_id"] != "" {
			t.Errorf("a checkout of draw order %s: intent %s %s, want none", in.Metadata["order_id"], in.ID, in.Status)
		}
		switch in.Status {
		case flashgate.IntentSucceeded:
			if n != 1 || sum != in.Amount {
				t.Errorf("captured hold %s of entry %s: got %d refunds of %d, want one of %d", in.ID, in.Metadata["entry_id"], n, sum, in.Amount)
			}
		case flashgate.IntentRequiresCapture:
			t.Errorf("hold %s of entry %s held after the close", in.ID, in.Metadata["entry_id"])
		}
	}
}

// TestScalpDrawOrderPayAfterRefundAdopted: a draw winner's order that an
// admin refund took over before the close marked it paid (the refund
// stores the entry's hold as the order's payment, and the order is still
// pending_payment) is asked to pay by its buyer: the answer is 409
// not_payable, as for any draw order the close has not marked paid, never
// 200 paying with the hold's client_secret.
func TestScalpDrawOrderPayAfterRefundAdopted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := startPayServe(t, ctx, "sqlite://"+filepath.Join(t.TempDir(), "fg.db"), time.Minute, time.Minute, "--user-rate", "0")
	const sale = "ra"
	p.drawSaleVariants(sale, 1000, time.Hour)
	hold := p.stand.PutHold(1000, "usd", okCard)
	order := "od0123456789abcdef0123456789abcdef"
	now := time.Now()
	if _, err := p.s.db.InsertOrders(ctx, []flashgate.Order{{ID: order, SaleID: sale, UserID: "winner", Quantity: 1, PriceCents: 1000,
		Status: flashgate.StatusPendingPayment, Variant: "S", CreatedAt: now, UpdatedAt: now}}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.s.db.InsertPayment(ctx, flashgate.Payment{OrderID: order, IntentID: hold, Status: flashgate.IntentRequiresCapture,
		AmountCents: 1000, Currency: "usd"}, now); err != nil {
		t.Fatal(err)
	}
	a := p.tryDo("POST", p.public+"/api/orders/"+order+"/pay", p.token("winner"), nil)
	if a.status != 409 || a.body["error"] != "not_payable" || a.body["client_secret"] != nil {
		t.Errorf("pay of a draw order whose hold a refund adopted: got %d %s, want 409 not_payable", a.status, a.raw)
	}
}

// TestScalpDrawWithdrawProviderDownAtClose: entrants whose holds are
// authorised withdraw (and enter again) in the second before the close
// while the provider fails every call, and it comes back only after the
// close: the withdrawals stand (200, or 503 with the release left to the
// read path), and once the provider is back every hold not captured is
// released, nobody charged twice, every result final.
func TestScalpDrawWithdrawProviderDownAtClose(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p := startPayServe(t, ctx, "sqlite://"+filepath.Join(t.TempDir(), "fg.db"), time.Minute, time.Second, "--user-rate", "0")
	hooks := &hookRecorder{}
	p.stand.SetWebhookURL(hooks.start(t, p.public))
	t.Cleanup(p.stand.Deliveries.Wait)
	const sale = "pd"
	closeAt := p.drawSaleVariants(sale, 1000, 5*time.Second)
	url := p.public + "/api/sales/" + sale + "/entry"
	users := make([]string, 12)
	for i := range users {
		users[i] = fmt.Sprintf("pd%02d", i)
		a := p.tryDo("POST", url, p.token(users[i]), []byte(fmt.Sprintf(`{"variant":%q}`, []string{"S", "M", "L"}[i%3])))
		pi, _ := a.body["payment_intent"].(string)
		if a.status != 201 || pi == "" {
			t.Fatalf("%s enters: %d %s", users[i], a.status, a.raw)
		}
		if _, err := p.stand.Confirm(pi, okCard); err != nil {
			t.Fatal(err)
		}
	}
	for _, u := range users {
		p.waitEntry(sale, u, "entered")
	}
	testwait.Until(closeAt.Add(-700 * time.Millisecond))
	p.stand.FailNext(1 << 30)
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i, u := range users {
		if i%2 == 1 {
			continue
		}
		wg.Add(1)
		go func(i int, u string) {
			defer wg.Done()
			testwait.Until(closeAt.Add(-700*time.Millisecond + time.Duration(i*40)*time.Millisecond))
			w := p.tryDo("DELETE", url, p.token(u), nil)
			r := p.tryDo("POST", url, p.token(u), []byte(`{"variant":"S"}`))
			mu.Lock()
			defer mu.Unlock()
			t.Logf("%s withdraws %d %s; enters again %d %s", u, w.status, w.raw, r.status, r.raw)
			for _, a := range []payAnswer{w, r} {
				if a.status == 0 || a.status >= 500 && a.status != 503 {
					t.Errorf("%s: got %d %s, want no 5xx but 503", u, a.status, a.raw)
				}
			}
		}(i, u)
	}
	wg.Wait()
	testwait.Until(closeAt.Add(1500 * time.Millisecond))
	p.stand.FailNext(0)
	draw := p.waitDrawClosed(sale, 90*time.Second)
	t.Logf("draw: %v", draw)
	p.waitNoHoldHeld(sale, 60*time.Second)
	entries, err := p.s.db.DrawEntries(ctx, sale)
	if err != nil {
		t.Fatal(err)
	}
	owner := map[string]string{}
	for _, e := range entries {
		owner[e.ID] = e.UserID
	}
	charged := map[string]int{}
	for _, in := range p.stand.Intents() {
		if in.Metadata["sale_id"] == sale && in.Status == flashgate.IntentSucceeded {
			charged[owner[in.Metadata["entry_id"]]]++
		}
	}
	n := 0
	for u, c := range charged {
		n += c
		if c > 1 || u == "" {
			t.Errorf("buyer %q: got %d charges, want at most 1", u, c)
		}
	}
	if n > 6 {
		t.Errorf("charges: got %d, want at most 6", n)
	}
	final := time.Now().Add(30 * time.Second) // one deadline for every buyer
	for _, u := range users {
		var g payAnswer
		_, ok := testwait.For(time.Until(final), func() bool {
			a := p.tryDo("GET", url, p.token(u), nil)
			if a.status != 429 {
				g = a
			}
			r := a.body["result"]
			return r == "won" || r == "lost" || r == "withdrawn"
		})
		if !ok {
			t.Errorf("%s after the close: got %d %s, want a final result", u, g.status, g.raw)
		}
	}
	p.stand.Deliveries.Wait()
	hooks.mu.Lock()
	for _, b := range hooks.bad {
		t.Errorf("webhook: got %s, want 200", b)
	}
	hooks.mu.Unlock()
}

// waitDrawClosed waits up to timeout for sale's close to finish, as the
// admin API reports it, and returns the draw's figures.
func (p *payServe) waitDrawClosed(sale string, timeout time.Duration) map[string]any {
	p.t.Helper()
	adm := map[string]string{"Authorization": "Bearer " + p.tokAdm}
	var draw map[string]any
	testwait.Eventually(p.t, timeout, func() bool {
		draw, _ = p.do("GET", p.admin+"/admin/sales/"+sale, "", nil, adm).body["draw"].(map[string]any)
		return draw != nil && draw["closed"] == true
	}, "draw %s closed", sale)
	return draw
}

// waitNoHoldHeld waits up to timeout until no card hold of sale is left
// authorised at the stand-in: each captured or released.
func (p *payServe) waitNoHoldHeld(sale string, timeout time.Duration) {
	p.t.Helper()
	testwait.Eventually(p.t, timeout, func() bool {
		for _, in := range p.stand.Intents() {
			if in.Metadata["sale_id"] == sale && in.Status == flashgate.IntentRequiresCapture {
				return false
			}
		}
		return true
	}, "no hold of %s left held", sale)
}
