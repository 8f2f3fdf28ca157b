package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
)

// tryDo is payServe.do for other goroutines: it reports a transport error
// as status 0 instead of failing the test.
func (p *payServe) tryDo(method, url, token string, body []byte) payAnswer {
	req, _ := http.NewRequestWithContext(p.ctx, method, url, bytes.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return payAnswer{raw: err.Error()}
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	a := payAnswer{status: res.StatusCode, raw: string(raw)}
	_ = json.Unmarshal(raw, &a.body)
	return a
}

// drawSaleVariants creates a draw sale in variants S, M, L taking entries
// from now until closeIn from now.
func (p *payServe) drawSaleVariants(id string, price int64, closeIn time.Duration) time.Time {
	p.t.Helper()
	open := time.Now().Add(-time.Second).Truncate(time.Second)
	closeAt := time.Now().Add(closeIn).Truncate(time.Second)
	ends := closeAt.Add(time.Hour)
	if _, err := p.s.cp.CreateSale(p.ctx, flashgate.Sale{ID: id, Name: id, PriceCents: price, Total: 6, PerUser: 2,
		Variants: []flashgate.Variant{{ID: "S", Name: "S", Total: 2}, {ID: "M", Name: "M", Total: 2}, {ID: "L", Name: "L", Total: 2}},
		EndsAt:   &ends, Queue: flashgate.QueueDraw, EntriesOpenAt: &open, EntriesCloseAt: &closeAt}); err != nil {
		p.t.Fatalf("CreateSale: %v", err)
	}
	tok := p.token("nobody")
	testwait.Eventually(p.t, 20*time.Second, func() bool {
		return p.do("GET", p.public+"/api/sales/"+id+"/entry", tok, nil, nil).status == 404 &&
			p.do("POST", p.public+"/api/sales/"+id+"/entry/pay", tok, nil, nil).status == 404
	}, "draw sale %s served", id)
	return closeAt
}

// TestScalpDrawEntries: one account's concurrent entries in every variant
// make one entry and one hold; withdraw/re-enter races its own confirm and
// its webhook; odd bodies are 400, never 5xx.
func TestScalpDrawEntries(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p := startPayServe(t, ctx, "sqlite://"+filepath.Join(t.TempDir(), "fg.db"), time.Minute, time.Minute, "--user-rate", "0")
	p.stand.SetWebhookURL(p.public + "/webhooks/stripe")
	t.Cleanup(p.stand.Deliveries.Wait)
	p.drawSaleVariants("sd", 1000, time.Hour)
	url := p.public + "/api/sales/sd/entry"
	tok := p.token("scalper")

	// 1. 30 concurrent entries, all variants and quantities.
	var wg sync.WaitGroup
	answers := make([]payAnswer, 30)
	for i := range answers {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			body := fmt.Sprintf(`{"variant":%q,"quantity":%d}`, []string{"S", "M", "L"}[i%3], 1+i%2)
			answers[i] = p.tryDo("POST", url, tok, []byte(body))
		}(i)
	}
	wg.Wait()
	created, ids := 0, map[any]bool{}
	for _, a := range answers {
		switch a.status {
		case 201:
			created++
			ids[a.body["entry_id"]] = true
		case 200:
			ids[a.body["entry_id"]] = true
		default:
			t.Logf("concurrent entry: %d %s", a.status, a.raw)
			if a.status >= 500 {
				t.Errorf("concurrent entry: got %d %s, want no 5xx", a.status, a.raw)
			}
		}
	}
	if created != 1 || len(ids) != 1 {
		t.Errorf("concurrent entries: got %d created, %d entry ids, want 1 and 1", created, len(ids))
	}
	holds, scalperHold := 0, ""
	for _, in := range p.stand.Intents() {
		if in.Metadata["sale_id"] == "sd" {
			holds++
			scalperHold = in.ID
		}
	}
	if holds != 1 {
		t.Errorf("holds at the provider: got %d, want 1", holds)
	}

	// 2. Odd bodies.
	for _, body := range []string{
		`{"quantity":1,"quantity":2}`, `{"Quantity":1,"variant":"S"}`, `{"variant":"S","quantity":1e400}`,
		`{"variant":"S","quantity":99999999999999999999999}`, `{"variant":"S","quantity":1.5}`, `{"variant":"s"}`,
		`{"variant":"S","QUANTİTY":1}`, `{"variant":"S"}{"variant":"M"}`, `[]`, `null`, `{"variant":"S","quantity":-1}`,
		`{"variant":"S\u0000"}`, `{"variant":"` + string(bytes.Repeat([]byte("x"), 70000)) + `"}`, `{"variant":"S","payload":{}}`,
	} {
		a := p.tryDo("POST", url, p.token("odd"), []byte(body))
		if a.status != 400 && a.status != 413 {
			short := body
			if len(short) > 60 {
				short = short[:60]
			}
			t.Errorf("entry body %s: got %d %s, want 400", short, a.status, a.raw)
		}
	}
	if g := p.tryDo("GET", url, p.token("odd"), nil); g.status != 404 {
		t.Errorf("odd's entry after odd bodies: got %d %s, want 404", g.status, g.raw)
	}

	// 3. Withdraw and re-enter racing the confirm of the first hold.
	for round := 0; round < 5; round++ {
		user := fmt.Sprintf("racer%d", round)
		ut := p.token(user)
		a := p.tryDo("POST", url, ut, []byte(`{"variant":"S"}`))
		pi1, _ := a.body["payment_intent"].(string)
		if a.status != 201 || pi1 == "" {
			t.Fatalf("%s enters: got %d %s", user, a.status, a.raw)
		}
		var w, r payAnswer
		wg.Add(3)
		go func() { defer wg.Done(); _, _ = p.stand.Confirm(pi1, okCard) }()
		go func() { defer wg.Done(); w = p.tryDo("DELETE", url, ut, nil) }()
		go func() {
			defer wg.Done()
			r = p.tryDo("POST", url, ut, []byte(`{"variant":"M"}`))
		}()
		wg.Wait()
		t.Logf("round %d: withdraw %d %s; re-enter %d %s", round, w.status, w.raw, r.status, r.raw)
		// Replay the first hold's webhook after everything.
		p.event(fmt.Sprintf("evt_replay_%d", round), flashgate.EventIntentHeld, pi1, "")
		// Settle: withdraw whatever is live, then check every hold of this
		// user is canceled.
		for i := 0; i < 3; i++ {
			p.tryDo("DELETE", url, ut, nil)
		}
		g := p.tryDo("GET", url, ut, nil)
		if g.body["state"] != "withdrawn" {
			t.Errorf("%s after withdrawals: got %d %s, want withdrawn", user, g.status, g.raw)
		}
		testwait.Eventually(t, 20*time.Second, func() bool {
			for _, in := range p.stand.Intents() {
				if in.Metadata["sale_id"] == "sd" && in.ID != scalperHold && in.Status != flashgate.IntentCanceled {
					t.Logf("%s: hold %s %s", user, in.ID, in.Status)
					return false
				}
			}
			return true
		}, "every hold of %s released", user)
	}
}

// TestScalpDrawClose: entries, withdrawals and confirms fired across the
// close; then every drawn hold is captured or released, no loser charged,
// no hold left held, units = captures; a won order paid twice at once
// makes no second charge.
func TestScalpDrawClose(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p := startPayServe(t, ctx, "sqlite://"+filepath.Join(t.TempDir(), "fg.db"), time.Minute, 2*time.Second)
	p.stand.SetWebhookURL(p.public + "/webhooks/stripe")
	t.Cleanup(p.stand.Deliveries.Wait)
	closeAt := p.drawSaleVariants("sc", 1000, 6*time.Second)
	url := p.public + "/api/sales/sc/entry"
	// 12 entered early.
	for i := 0; i < 12; i++ {
		u := fmt.Sprintf("early%d", i)
		a := p.tryDo("POST", url, p.token(u), []byte(fmt.Sprintf(`{"variant":%q}`, []string{"S", "M", "L"}[i%3])))
		pi, _ := a.body["payment_intent"].(string)
		if a.status != 201 || pi == "" {
			t.Fatalf("%s enters: %d %s", u, a.status, a.raw)
		}
		if _, err := p.stand.Confirm(pi, okCard); err != nil {
			t.Fatal(err)
		}
	}
	// 12 who enter just before the close and confirm around it, some who
	// withdraw around it, some who enter after.
	pis := make([]string, 12)
	for i := range pis {
		u := fmt.Sprintf("late%d", i)
		a := p.tryDo("POST", url, p.token(u), []byte(fmt.Sprintf(`{"variant":%q}`, []string{"S", "M", "L"}[i%3])))
		pis[i], _ = a.body["payment_intent"].(string)
	}
	time.Sleep(time.Until(closeAt.Add(-300 * time.Millisecond)))
	var wg sync.WaitGroup
	var mu sync.Mutex
	var bad []string
	for i := 0; i < 12; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			time.Sleep(time.Duration(i) * 50 * time.Millisecond)
			if pis[i] != "" {
				_, _ = p.stand.Confirm(pis[i], okCard)
			}
			if i%4 == 0 {
				a := p.tryDo("DELETE", url, p.token(fmt.Sprintf("early%d", i)), nil)
				b := p.tryDo("POST", url, p.token(fmt.Sprintf("early%d", i)), []byte(`{"variant":"L"}`))
				mu.Lock()
				t.Logf("early%d withdraw %d %s / re-enter %d %s", i, a.status, a.raw, b.status, b.raw)
				mu.Unlock()
			}
			a := p.tryDo("POST", url, p.token(fmt.Sprintf("edge%d", i)), []byte(`{"variant":"S"}`))
			if pi, _ := a.body["payment_intent"].(string); pi != "" {
				_, _ = p.stand.Confirm(pi, okCard)
			}
			if a.status >= 500 {
				mu.Lock()
				bad = append(bad, a.raw)
				mu.Unlock()
			}
		}(i)
	}
	wg.Wait()
	if len(bad) > 0 {
		t.Errorf("5xx at the edge: %v", bad)
	}
	adm := map[string]string{"Authorization": "Bearer " + p.tokAdm}
	var draw map[string]any
	testwait.Eventually(t, 60*time.Second, func() bool {
		a := p.do("GET", p.admin+"/admin/sales/sc", "", nil, adm)
		draw, _ = a.body["draw"].(map[string]any)
		return draw != nil && draw["closed"] == true
	}, "draw closed")
	t.Logf("draw: %v", draw)
	// Invariants at the provider.
	testwait.Eventually(t, 30*time.Second, func() bool {
		for _, in := range p.stand.Intents() {
			if in.Metadata["sale_id"] == "sc" && in.Status == flashgate.IntentRequiresCapture {
				return false
			}
		}
		return true
	}, "no hold left held")
	captured := 0
	for _, in := range p.stand.Intents() {
		if in.Metadata["sale_id"] == "sc" && in.Status == flashgate.IntentSucceeded {
			captured++
		}
	}
	if captured != 6 || fmt.Sprint(draw["captured"]) != "6" {
		t.Errorf("captures: got %d at the provider, draw %v; want 6", captured, draw["captured"])
	}
	// Entries after the close.
	if a := p.tryDo("POST", url, p.token("after"), []byte(`{"variant":"S"}`)); a.status != 409 {
		t.Errorf("entry after the close: got %d %s, want 409 closed", a.status, a.raw)
	}
	// Winners pay their orders again, twice at once.
	for i := 0; i < 12; i++ {
		for _, prefix := range []string{"early", "late"} {
			u := fmt.Sprintf("%s%d", prefix, i)
			g := p.tryDo("GET", url, p.token(u), nil)
			oid, _ := g.body["order_id"].(string)
			if oid == "" {
				continue
			}
			var a, b payAnswer
			wg.Add(2)
			go func() { defer wg.Done(); a = p.tryDo("POST", p.public+"/api/orders/"+oid+"/pay", p.token(u), nil) }()
			go func() { defer wg.Done(); b = p.tryDo("POST", p.public+"/api/orders/"+oid+"/pay", p.token(u), nil) }()
			wg.Wait()
			t.Logf("%s pays %s twice: %d %s / %d %s", u, oid, a.status, a.raw, b.status, b.raw)
			if a.status >= 500 || b.status >= 500 {
				t.Errorf("pay of a won order: got %d, %d", a.status, b.status)
			}
			if pi, _ := a.body["client_secret"].(string); pi != "" {
				t.Errorf("pay of a won (captured) order offers a new payment: %s", a.raw)
			}
		}
	}
	n := 0
	for _, in := range p.stand.Intents() {
		if in.Metadata["sale_id"] == "sc" && in.Status == flashgate.IntentSucceeded {
			n++
		}
	}
	if n != 6 {
		t.Errorf("charges after paying again: got %d, want 6", n)
	}
}

// TestScalpPurchases: one account's purchases at once across variants and
// quantities, on many connections, make one live order within per_user;
// odd bodies are 400; a flood by one account does not starve another.
func TestScalpPurchases(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := startPayServe(t, ctx, "sqlite://"+filepath.Join(t.TempDir(), "fg.db"), time.Minute, time.Minute, "--user-rate", "0")
	if _, err := p.s.cp.CreateSale(p.ctx, flashgate.Sale{ID: "sp", Name: "sp", PriceCents: 500, Total: 30, PerUser: 2, AdmitRatio: 3,
		Variants: []flashgate.Variant{{ID: "S", Name: "S", Total: 10}, {ID: "M", Name: "M", Total: 10}, {ID: "L", Name: "L", Total: 10}}}); err != nil {
		t.Fatal(err)
	}
	if err := p.s.cp.Start(p.ctx, "sp"); err != nil {
		t.Fatal(err)
	}
	url := p.public + "/api/sales/sp/orders"
	testwait.Eventually(t, 20*time.Second, func() bool {
		a := p.tryDo("POST", url, p.token("probe"), []byte(`{"variant":"S"}`))
		return a.status == 201
	}, "sale open")
	for _, body := range []string{
		`{"variant":"S","quantity":1,"quantity":2}`, `{"variant":"S","Quantity":2}`, `{"variant":"S","quantity":1e400}`,
		`{"variant":"S","quantity":18446744073709551617}`, `{"variant":"S","quantity":1.0000000000000001}`,
		`{"variant":"S","quantity":3}`, `{"variant":"S","quantity":0}`, `{"VARIANT":"S"}`, `{"variant":"S","variant":"M"}`,
		`{"variant":"S"} {"variant":"M"}`, `{"variant":"S","quantıty":2}`, `{"variant":["S"]}`, `{"variant":"S","quantity":"2"}`,
	} {
		a := p.tryDo("POST", url, p.token("odd"+body), []byte(body))
		if a.status != 400 {
			t.Errorf("purchase body %s: got %d %s, want 400", body, a.status, a.raw)
		}
	}
	// 40 at once by one account (the limiter lets its burst through).
	var wg sync.WaitGroup
	answers := make([]payAnswer, 40)
	tok := p.token("scalper")
	for i := range answers {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			tr := &http.Transport{}
			defer tr.CloseIdleConnections()
			req, _ := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader([]byte(fmt.Sprintf(`{"variant":%q,"quantity":%d}`, []string{"S", "M", "L"}[i%3], 1+i%2))))
			req.Header.Set("Authorization", "Bearer "+tok)
			res, err := tr.RoundTrip(req)
			if err != nil {
				answers[i] = payAnswer{raw: err.Error()}
				return
			}
			defer res.Body.Close()
			raw, _ := io.ReadAll(res.Body)
			answers[i] = payAnswer{status: res.StatusCode, raw: string(raw)}
		}(i)
	}
	// Meanwhile another buyer.
	other := p.tryDo("POST", url, p.token("bystander"), []byte(`{"variant":"M"}`))
	wg.Wait()
	if other.status != 201 {
		t.Errorf("a bystander during the flood: got %d %s, want 201", other.status, other.raw)
	}
	byStatus := map[int]int{}
	for _, a := range answers {
		byStatus[a.status]++
		if a.status >= 500 {
			t.Errorf("flood: got %d %s", a.status, a.raw)
		}
	}
	if byStatus[201] != 1 {
		t.Errorf("flood by one account: got %v by status, want one 201", byStatus)
	}
}

// TestScalpDrawWithdrawDuringHold: a withdrawal while the entry's hold is
// being made at the provider (the entry's own call, or its pay); the buyer
// then confirms whatever client_secret came back. No hold stays held.
func TestScalpDrawWithdrawDuringHold(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := startPayServe(t, ctx, "sqlite://"+filepath.Join(t.TempDir(), "fg.db"), time.Minute, time.Second, "--user-rate", "0")
	p.stand.SetWebhookURL(p.public + "/webhooks/stripe")
	t.Cleanup(p.stand.Deliveries.Wait)
	p.drawSaleVariants("sw", 1000, time.Hour)
	url := p.public + "/api/sales/sw/entry"
	for round, viaPay := range []bool{false, true, false, true} {
		u := fmt.Sprintf("w%d", round)
		ut := p.token(u)
		if viaPay {
			p.stand.FailNext(10)
			a := p.tryDo("POST", url, ut, []byte(`{"variant":"S"}`))
			p.stand.FailNext(0)
			if a.status != 201 || a.body["payment_intent"] != nil {
				t.Logf("%s enters with the provider failing: %d %s", u, a.status, a.raw)
			}
		}
		p.stand.Stall(2 * time.Second)
		var first payAnswer
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			if viaPay {
				first = p.tryDo("POST", url+"/pay", ut, nil)
			} else {
				first = p.tryDo("POST", url, ut, []byte(`{"variant":"S"}`))
			}
		}()
		time.Sleep(300 * time.Millisecond)
		var w payAnswer
		wg.Add(1)
		go func() { defer wg.Done(); w = p.tryDo("DELETE", url, ut, nil) }()
		time.Sleep(300 * time.Millisecond)
		p.stand.Stall(0)
		wg.Wait()
		t.Logf("%s: first %d %s; withdraw %d %s", u, first.status, first.raw, w.status, w.raw)
		if pi, _ := first.body["payment_intent"].(string); pi != "" {
			in, err := p.stand.Confirm(pi, okCard)
			t.Logf("%s confirms %s: %s %v", u, pi, in.Status, err)
		}
		g := p.tryDo("GET", url, ut, nil)
		t.Logf("%s now: %d %s", u, g.status, g.raw)
	}
	testwait.Eventually(t, 30*time.Second, func() bool {
		for _, in := range p.stand.Intents() {
			if in.Metadata["sale_id"] == "sw" && in.Status == flashgate.IntentRequiresCapture {
				return false
			}
		}
		return true
	}, "no hold left held")
}

// TestScalpDrawCancelWonOrder: a winner knows the order id the close will
// make ("o" and the entry id) and asks to cancel it (and to pay it) from
// the close on, before the close marks it paid; every captured entry's
// order still ends paid, its unit held.
func TestScalpDrawCancelWonOrder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := startPayServe(t, ctx, "sqlite://"+filepath.Join(t.TempDir(), "fg.db"), time.Minute, 2*time.Second, "--user-rate", "0")
	p.stand.SetWebhookURL(p.public + "/webhooks/stripe")
	t.Cleanup(p.stand.Deliveries.Wait)
	closeAt := p.drawSaleVariants("sx", 1000, 4*time.Second)
	url := p.public + "/api/sales/sx/entry"
	users := []string{"x0", "x1", "x2", "x3", "x4", "x5"}
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
		p.waitEntry("sx", u, "entered")
	}
	time.Sleep(time.Until(closeAt))
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := map[string]map[string]int{}
	for i, u := range users {
		wg.Add(1)
		go func(i int, u string) {
			defer wg.Done()
			tok := p.token(u)
			what := []string{"/cancel", "/pay"}[i%2]
			for n := 0; n < 100; n++ {
				a := p.tryDo("POST", p.public+"/api/orders/"+orders[u]+what, tok, nil)
				mu.Lock()
				if seen[u] == nil {
					seen[u] = map[string]int{}
				}
				seen[u][fmt.Sprintf("%s %d %v", what, a.status, a.body["status"])+fmt.Sprint(a.body["error"])]++
				mu.Unlock()
				if g := p.tryDo("GET", url, tok, nil); g.body["result"] == "won" || g.body["result"] == "lost" {
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		}(i, u)
	}
	wg.Wait()
	for _, u := range users {
		t.Logf("%s: %v", u, seen[u])
	}
	adm := map[string]string{"Authorization": "Bearer " + p.tokAdm}
	testwait.Eventually(t, 60*time.Second, func() bool {
		a := p.do("GET", p.admin+"/admin/sales/sx", "", nil, adm)
		d, _ := a.body["draw"].(map[string]any)
		return d != nil && d["closed"] == true
	}, "draw closed")
	for _, u := range users {
		testwait.Eventually(t, 20*time.Second, func() bool {
			return p.tryDo("GET", url, p.token(u), nil).body["result"] == "won"
		}, "%s won (every entrant fits)", u)
		testwait.Eventually(t, 20*time.Second, func() bool {
			o, err := p.s.db.Order(ctx, orders[u])
			return err == nil && o.Status == flashgate.StatusPaid
		}, "%s's order %s paid", u, orders[u])
	}
	charges := 0
	for _, in := range p.stand.Intents() {
		if in.Status == flashgate.IntentSucceeded {
			charges++
		}
		if in.Metadata["order_id"] != "" {
			t.Errorf("a checkout of draw order %s: intent %s %s, want none (the entry's capture pays it)", in.Metadata["order_id"], in.ID, in.Status)
		}
	}
	if charges != len(users) {
		t.Errorf("charges: got %d, want %d", charges, len(users))
	}
	for _, u := range users {
		for what, n := range seen[u] {
			if strings.Contains(what, "200 cancelled") || strings.Contains(what, "paying") {
				t.Errorf("%s: got %q %d times, want 409 not_payable before paid, 200 paid after", u, what, n)
			}
		}
	}
}

// TestScalpForgedHooksAndPipelining: forged, stale and tampered webhooks
// about a pending entry's hold change nothing; one account's purchases
// pipelined on one connection make one order.
func TestScalpForgedHooksAndPipelining(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := startPayServe(t, ctx, "sqlite://"+filepath.Join(t.TempDir(), "fg.db"), time.Minute, time.Minute, "--user-rate", "0")
	p.drawSaleVariants("sf", 1000, time.Hour)
	url := p.public + "/api/sales/sf/entry"
	a := p.tryDo("POST", url, p.token("f"), []byte(`{"variant":"S"}`))
	pi, _ := a.body["payment_intent"].(string)
	if a.status != 201 || pi == "" {
		t.Fatalf("enter: %d %s", a.status, a.raw)
	}
	held := p.stand.Event("evt_forged", flashgate.EventIntentHeld, pi, flashgate.IntentRequiresCapture)
	for _, c := range []struct {
		name    string
		payload []byte
		at      time.Time
		secret  string
	}{
		{"wrong secret", held, time.Now(), "whsec_guess"},
		{"stale", held, time.Now().Add(-10 * time.Minute), payHookSecret},
		{"empty secret", held, time.Now(), ""},
	} {
		if h := p.hook(c.payload, c.at, c.secret); h.status != 400 {
			t.Errorf("%s: got %d %s, want 400", c.name, h.status, h.raw)
		}
	}
	sig := p.stand.Sign(held, time.Now())
	tampered := bytes.Replace(held, []byte(`"evt_forged"`), []byte(`"evt_forgeX"`), 1)
	for _, c := range []struct{ name, sig string }{
		{"tampered body", sig}, {"garbage header", "t=1,v1=zz"}, {"huge header", "t=1,v1=" + strings.Repeat("a", 6000)},
	} {
		h := p.do("POST", p.public+"/webhooks/stripe", "", tampered, map[string]string{"Stripe-Signature": c.sig})
		if h.status != 400 {
			t.Errorf("%s: got %d %s, want 400", c.name, h.status, h.raw)
		}
	}
	if g := p.tryDo("GET", url, p.token("f"), nil); g.body["state"] != "pending" {
		t.Errorf("after forged hooks: got %s, want pending", g.raw)
	}

	if _, err := p.s.cp.CreateSale(p.ctx, flashgate.Sale{ID: "pl", Name: "pl", PriceCents: 500, Total: 30, PerUser: 2, AdmitRatio: 3}); err != nil {
		t.Fatal(err)
	}
	if err := p.s.cp.Start(p.ctx, "pl"); err != nil {
		t.Fatal(err)
	}
	if err := waitOpen(ctx, p.public, "pl", 20*time.Second); err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", strings.TrimPrefix(p.public, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	tok := p.token("piper")
	var reqs bytes.Buffer
	for i := 0; i < 20; i++ {
		body := fmt.Sprintf(`{"quantity":%d}`, 1+i%2)
		fmt.Fprintf(&reqs, "POST /api/sales/pl/orders HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", tok, len(body), body)
	}
	if _, err := conn.Write(reqs.Bytes()); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(conn)
	byStatus := map[int]int{}
	for i := 0; i < 20; i++ {
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		byStatus[res.StatusCode]++
	}
	if byStatus[201] != 1 || byStatus[409] != 19 {
		t.Errorf("pipelined purchases: got %v, want one 201 and 19 409", byStatus)
	}
}

// TestScalpDrawPayAcrossClose: entries without a hold (the provider failed)
// ask for it with /pay while the provider stalls across the close; the
// buyers confirm whatever comes back. No such entry is drawn and no hold
// stays held.
func TestScalpDrawPayAcrossClose(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := startPayServe(t, ctx, "sqlite://"+filepath.Join(t.TempDir(), "fg.db"), time.Minute, time.Second, "--user-rate", "0")
	p.stand.SetWebhookURL(p.public + "/webhooks/stripe")
	t.Cleanup(p.stand.Deliveries.Wait)
	closeAt := p.drawSaleVariants("sy", 1000, 4*time.Second)
	url := p.public + "/api/sales/sy/entry"
	users := []string{"y0", "y1", "y2", "y3"}
	p.stand.FailNext(100)
	for _, u := range users {
		a := p.tryDo("POST", url, p.token(u), []byte(`{"variant":"S"}`))
		t.Logf("%s enters with the provider down: %d %s", u, a.status, a.raw)
	}
	p.stand.FailNext(0)
	time.Sleep(time.Until(closeAt.Add(-400 * time.Millisecond)))
	p.stand.Stall(time.Second)
	var wg sync.WaitGroup
	for i, u := range users {
		wg.Add(1)
		go func(i int, u string) {
			defer wg.Done()
			time.Sleep(time.Duration(i) * 200 * time.Millisecond)
			a := p.tryDo("POST", url+"/pay", p.token(u), nil)
			t.Logf("%s pays across the close: %d %s", u, a.status, a.raw)
			if pi, _ := a.body["payment_intent"].(string); pi != "" {
				in, err := p.stand.Confirm(pi, okCard)
				t.Logf("%s confirms: %s %v", u, in.Status, err)
			}
		}(i, u)
	}
	time.Sleep(1500 * time.Millisecond)
	p.stand.Stall(0)
	wg.Wait()
	adm := map[string]string{"Authorization": "Bearer " + p.tokAdm}
	testwait.Eventually(t, 60*time.Second, func() bool {
		a := p.do("GET", p.admin+"/admin/sales/sy", "", nil, adm)
		d, _ := a.body["draw"].(map[string]any)
		return d != nil && d["closed"] == true
	}, "draw closed")
	testwait.Eventually(t, 30*time.Second, func() bool {
		for _, in := range p.stand.Intents() {
			if in.Metadata["sale_id"] == "sy" && in.Status == flashgate.IntentRequiresCapture {
				return false
			}
		}
		return true
	}, "no hold left held")
	for _, in := range p.stand.Intents() {
		if in.Status == flashgate.IntentSucceeded {
			t.Errorf("a charge: %s of entry %s", in.ID, in.Metadata["entry_id"])
		}
	}
}
