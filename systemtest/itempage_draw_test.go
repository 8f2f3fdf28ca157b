package systemtest

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/gateway"
	"github.com/flashgate/flashgate/internal/stripelocal"
	"github.com/flashgate/flashgate/internal/testenv/browsertest"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/lua"
)

// shiftClock is the wall clock moved on by a shift the test sets: the
// gateway's, so that a draw's window can close without waiting for it.
type shiftClock struct{ shift atomic.Int64 }

// Now returns the wall clock's time plus the shift.
func (c *shiftClock) Now() time.Time { return time.Now().Add(time.Duration(c.shift.Load())) }

// browserShift moves the page's Date.now by the shift kept in the tab's
// sessionStorage (kept across navigations), as shiftClock moves the
// gateway's, and records every Content-Security-Policy violation in
// sessionStorage ("fg-violations").
const browserShift = `(function () {
  var real = Date.now;
  Date.now = function () {
    var d = 0;
    try { d = Number(sessionStorage.getItem("fg-test-shift")) || 0; } catch (e) { d = 0; }
    return real.call(Date) + d;
  };
  document.addEventListener("securitypolicyviolation", function (e) {
    sessionStorage.setItem("fg-violations", (sessionStorage.getItem("fg-violations") || "") + e.effectiveDirective + " " + e.blockedURI + "; ");
  });
})();`

// drawAnswer is an entry route's answer to the test.
type drawAnswer struct {
	status int
	body   map[string]any
}

// entryOf calls GET /api/sales/{sale}/entry for the buyer of tok.
func (s *pageSystem) entryOf(t *testing.T, sale, tok string) drawAnswer {
	t.Helper()
	return s.call(t, "GET", "/api/sales/"+sale+"/entry", tok, "")
}

// call makes a request of the gateway with a buyer token.
func (s *pageSystem) call(t *testing.T, method, path, tok, body string) drawAnswer {
	t.Helper()
	req, err := http.NewRequestWithContext(s.ctx, method, s.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	a := drawAnswer{status: res.StatusCode}
	_ = json.Unmarshal(b, &a.body)
	return a
}

// TestItemPageDraw drives a draw sale's item page in headless Chromium
// against every tier in-process (real redis-server, SQLite) and the
// stand-in of Stripe (its API and its Stripe.js): the entry window and its
// countdown; a size and a quantity chosen and entered, the proof of work
// solved in the page's worker; the card hold authorised in the Payment
// Element (a declined card's message first, the hold still pending and
// offered again after a reload), the stand-in's webhook entering the
// entry, which the page shows; a
// withdrawal releasing the hold; entering again; and after the close the
// page following the entry until it shows the result: won (charged) for
// one buyer, lost (hold released) for another. The page is the sale's
// (no buyer's data in it) and breaks none of its Content-Security-Policy.
func TestItemPageDraw(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test")
	}
	pay := newPagePay(t)
	clock := &shiftClock{}
	s := startPageSystemWith(t, nil, pay, func(c *gateway.Config) { c.Clock = clock })
	pay.stand.SetWebhookURL(s.url + "/webhooks/stripe")
	const id, price = "draw-drop", 5000
	opens := time.Now().Add(-time.Second).Truncate(time.Second)
	closeAt := opens.Add(10 * time.Minute)
	if _, err := s.cp.CreateSale(s.ctx, flashgate.Sale{ID: id, Name: "Drawn sneakers", PriceCents: price, Total: 3, PerUser: 2,
		Queue: flashgate.QueueDraw, EntriesOpenAt: &opens, EntriesCloseAt: &closeAt, ChallengeMaxNumber: 20000,
		Variants: []flashgate.Variant{{ID: "S", Name: "Small", Total: 2}, {ID: "M", Name: "Medium", Total: 1}}}); err != nil {
		t.Fatal(err)
	}
	ann, bob := s.token(t, "ann"), s.token(t, "bob")
	testwait.Eventually(t, 20*time.Second, func() bool {
		res, err := http.Get(s.url + "/sales/" + id)
		if err != nil {
			return false
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode == 200 && strings.Contains(string(b), "data-draw") && s.entryOf(t, id, ann).status == 404
	}, "the draw sale's page served")

	ctx := browsertest.New(t, s.ctx, 900, 1100, 4*time.Minute)
	if _, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: browserShift}); err != nil {
		t.Fatalf("adding the clock's script: %v", err)
	}
	status := func() string {
		return `document.getElementById('status').className + ' | ' + document.getElementById('status').textContent`
	}
	// open loads the page afresh as the buyer of tok (a new document: only
	// the fragment would change otherwise).
	open := func(tok string) {
		t.Helper()
		if err := chromedp.Do(ctx,
			chromedp.Navigate("about:blank"),
			chromedp.Navigate(s.url+"/sales/"+id+"#token="+tok),
			chromedp.WaitVisible(chromedp.CSS(`#token-box`)),
		); err != nil {
			t.Fatalf("opening the draw's page: %v", err)
		}
	}
	// enter opens the page as the buyer of tok (unless tok is ""; the
	// page is open), chooses size and qty, enters and waits for the
	// Payment Element of the entry's hold.
	enter := func(tok, size, qty string) {
		t.Helper()
		if tok != "" {
			open(tok)
			waitJS(t, ctx, "the countdown to the close", `document.getElementById('countdown').textContent.indexOf("Entries close in ") === 0`, 10*time.Second)
			if dis, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById('draw-enter').disabled`)); err != nil || !dis {
				t.Errorf("enter button before a size is chosen: disabled=%v (%v), want disabled", dis, err)
			}
		}
		if err := chromedp.Do(ctx,
			chromedp.Click(chromedp.CSS(`input[name=draw-variant][value=`+size+`]`)),
			chromedp.SetValue(chromedp.CSS(`#draw-qty`), qty),
		); err != nil {
			t.Fatalf("choosing size %s × %s: %v", size, qty, err)
		}
		if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById('draw-qty').dispatchEvent(new Event('input')), true`)); err != nil {
			t.Fatalf("choosing size %s × %s: %v", size, qty, err)
		}
		waitJS(t, ctx, "the enter button", `!document.getElementById('draw-enter').disabled`, 5*time.Second)
		if _, err := chromedp.Run(ctx, chromedp.Click(chromedp.CSS(`#draw-enter`))); err != nil {
			t.Fatalf("clicking enter: %v", err)
		}
		waitJS(t, ctx, "the Payment Element of the hold", `!document.getElementById('payment').hidden &&
			document.querySelector('#payment-element input[data-stripelocal=card]') &&
			!document.getElementById('pay').hidden && !document.getElementById('pay').disabled`, 30*time.Second)
	}
	// hold types card into the Payment Element, presses Hold my card and
	// returns the status line once the page has an answer.
	hold := func(card string) string {
		t.Helper()
		if err := chromedp.Do(ctx,
			chromedp.SetValue(chromedp.CSS(`#payment-element input[data-stripelocal=card]`), card),
			chromedp.Click(chromedp.CSS(`#pay`)),
		); err != nil {
			t.Fatalf("holding with %s: %v", card, err)
		}
		return waitJS(t, ctx, "the hold's answer", `(function(){ var s = document.getElementById('status');
			return s.textContent.indexOf("You are in the draw") === 0 || s.className === "status err" ? `+status()+` : ""; })()`, 30*time.Second)
	}
	// intentOf is the hold at the provider of the buyer of tok's entry.
	intentOf := func(tok string) stripelocal.Intent {
		t.Helper()
		e := s.entryOf(t, id, tok)
		for _, in := range pay.stand.Intents() {
			if in.Metadata["entry_id"] == e.body["entry_id"] {
				return in
			}
		}
		t.Fatalf("no hold at the provider for entry %v", e.body)
		return stripelocal.Intent{}
	}

	// ann enters for two Medium; a declined card leaves the entry pending.
	enter(ann, "M", "2")
	if got := hold(stripelocal.DeclinedCard); got != "status err | Your card was declined." {
		t.Fatalf("after a declined card: page says %q, want the decline's message", got)
	}
	if e := s.entryOf(t, id, ann); e.body["state"] != "pending" || e.body["variant"] != "M" || e.body["quantity"] != 2.0 {
		t.Fatalf("ann's entry after the decline: %v, want pending, M × 2", e.body)
	}
	// Reloaded, the page offers the pending entry's hold again (the entry
	// read carries no client secret: the pay route answers the same hold).
	open(ann)
	waitJS(t, ctx, "the hold offered again", status()+` === "status | Your entry counts once your card is held: press Hold my card." &&
		!document.getElementById('pay').hidden && document.getElementById('draw-enter').hidden`, 10*time.Second)
	if _, err := chromedp.Run(ctx, chromedp.Click(chromedp.CSS(`#pay`))); err != nil {
		t.Fatalf("clicking Hold my card: %v", err)
	}
	waitJS(t, ctx, "the Payment Element after the reload", `!document.getElementById('payment').hidden &&
		document.querySelector('#payment-element input[data-stripelocal=card]') && !document.getElementById('pay').disabled`, 10*time.Second)
	if got := hold("4242 4242 4242 4242"); got != "status ok | You are in the draw. Results come when entries close." {
		t.Fatalf("after holding the card: page says %q, want entered", got)
	}
	if n := len(pay.stand.Intents()); n != 1 {
		t.Errorf("holds at the provider: %d, want 1 (the same hold, declined then authorised)", n)
	}
	waitJS(t, ctx, "the entry line", `document.getElementById('draw-entry').textContent === "You are in the draw: size Medium, quantity 2. You are charged 100.00 only if you win."`, 5*time.Second)
	if e := s.entryOf(t, id, ann); e.body["state"] != "entered" {
		t.Fatalf("ann's entry: %v, want entered", e.body)
	}
	if in := intentOf(ann); in.Status != "requires_capture" || in.CaptureMethod != "manual" || in.Amount != 2*price || in.Metadata["sale_id"] != id {
		t.Errorf("ann's hold at the provider: %+v, want %d held (manual capture) for %s", in, 2*price, id)
	}

	// ann withdraws: the hold is released; she enters again, one Small.
	first := intentOf(ann)
	waitJS(t, ctx, "the withdraw button", `!document.getElementById('draw-withdraw').hidden`, 5*time.Second)
	if _, err := chromedp.Run(ctx, chromedp.Click(chromedp.CSS(`#draw-withdraw`))); err != nil {
		t.Fatalf("clicking withdraw: %v", err)
	}
	waitJS(t, ctx, "the withdrawal", status()+` === "status ok | Entry withdrawn: your card hold was released." &&
		document.getElementById('draw-enter').textContent === "Enter again" && document.getElementById('draw-withdraw').hidden`, 10*time.Second)
	if in, _ := pay.stand.Intent(first.ID); in.Status != flashgate.IntentCanceled {
		t.Errorf("ann's first hold after the withdrawal: %s, want canceled", in.Status)
	}
	enter("", "S", "1")
	if got := hold("4242424242424242"); got != "status ok | You are in the draw. Results come when entries close." {
		t.Fatalf("ann entering again: page says %q, want entered", got)
	}
	// bob enters for one Small.
	enter(bob, "S", "1")
	if got := hold("4242424242424242"); got != "status ok | You are in the draw. Results come when entries close." {
		t.Fatalf("bob: page says %q, want entered", got)
	}

	// The page is the sale's: nobody's entry is in it.
	res, err := http.Get(s.url + "/sales/" + id)
	if err != nil {
		t.Fatal(err)
	}
	html, _ := io.ReadAll(res.Body)
	res.Body.Close()
	annEntry, _ := s.entryOf(t, id, ann).body["entry_id"].(string)
	if annEntry == "" || strings.Contains(string(html), annEntry) || strings.Contains(string(html), "<script>") {
		t.Errorf("the cached page holds an entry (%s) or an inline script:\n%s", annEntry, html)
	}

	// The window closes (the gateway's clock and the page's move past it):
	// the page says so and follows the entry while the draw is made.
	shift := closeAt.Sub(time.Now()) + time.Minute
	clock.shift.Store(int64(shift))
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`sessionStorage.setItem("fg-test-shift", "`+strconv.FormatInt(shift.Milliseconds(), 10)+`"), true`)); err != nil {
		t.Fatal(err)
	}
	open(ann)
	waitJS(t, ctx, "the draw being made", status()+` === "status | Entries are closed: the draw is being made. This page shows your result." &&
		document.getElementById('countdown').textContent === "Entries are closed" &&
		document.getElementById('draw-withdraw').hidden && document.getElementById('draw-enter').hidden`, 10*time.Second)
	if e := s.call(t, "DELETE", "/api/sales/"+id+"/entry", ann, ""); e.status != 409 || e.body["error"] != "closed" {
		t.Errorf("a withdrawal after the close: %d %v, want 409 closed", e.status, e.body)
	}

	// The close's work (another part's) is stood in for: ann won and was
	// charged, bob lost and his hold was released.
	set := func(tok, user string, steps ...flashgate.DrawEntryState) {
		t.Helper()
		eid, _ := s.entryOf(t, id, tok).body["entry_id"].(string)
		for i := 1; i < len(steps); i++ {
			v, err := lua.DrawSet.Run(s.ctx, s.rdb, lua.DrawChangeKeys(id), user, eid, string(steps[i]), time.Now().UnixMilli(), string(steps[i-1])).Slice()
			if err != nil || v[0] != int64(lua.DrawOK) {
				t.Fatalf("DrawSet %s %s → %s: %v, %v", user, steps[i-1], steps[i], v, err)
			}
		}
	}
	set(ann, "ann", flashgate.DrawEntered, flashgate.DrawWon, flashgate.DrawCaptured)
	got := waitJS(t, ctx, "ann's win", `(function(){ var s = document.getElementById('status');
		return s.textContent.indexOf("You won") === 0 ? `+status()+` : ""; })()`, 20*time.Second)
	if !strings.HasPrefix(got, "status ok | You won: size Small, quantity 1. Your card was charged 50.00") {
		t.Errorf("ann after the draw: page says %q, want won and charged 50.00", got)
	}
	set(bob, "bob", flashgate.DrawEntered, flashgate.DrawLost, flashgate.DrawReleased)
	open(bob)
	waitJS(t, ctx, "bob's loss", status()+` === "status | The draw is made: you were not drawn. Your hold was released." &&
		document.getElementById('draw-entry').textContent === "Not drawn this time (size Small, quantity 1). Your hold was released: nothing was charged."`, 20*time.Second)

	if v, err := chromedp.Run(ctx, chromedp.Evaluate[string](`sessionStorage.getItem("fg-violations") || ""`)); err != nil || v != "" {
		t.Errorf("Content-Security-Policy violations: %q (%v), want none", v, err)
	}
}

// TestItemPageDrawSimulated: without a payment provider (simulated
// payments, no publishable key) a draw's page counts down to the opening
// with the enter button held, and once entries are open an entry is in
// the draw at once, with no card form.
func TestItemPageDrawSimulated(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test")
	}
	s := startPageSystem(t, nil)
	now := time.Now().Truncate(time.Second)
	for _, sl := range []struct {
		id          string
		open, close time.Time
	}{{"draw-later", now.Add(time.Hour), now.Add(2 * time.Hour)}, {"draw-now", now.Add(-time.Second), now.Add(time.Hour)}} {
		if _, err := s.cp.CreateSale(s.ctx, flashgate.Sale{ID: sl.id, Name: "Drawn tee", PriceCents: 2500, Total: 5,
			Queue: flashgate.QueueDraw, EntriesOpenAt: &sl.open, EntriesCloseAt: &sl.close}); err != nil {
			t.Fatal(err)
		}
	}
	tok := s.token(t, "cyd")
	testwait.Eventually(t, 20*time.Second, func() bool {
		res, err := http.Get(s.url + "/sales/draw-now")
		if err != nil {
			return false
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode == 200 && strings.Contains(string(b), "data-draw") && s.entryOf(t, "draw-now", tok).status == 404
	}, "the draw sale's page served")

	ctx := browsertest.New(t, s.ctx, 900, 900, 2*time.Minute)
	if err := chromedp.Do(ctx,
		chromedp.Navigate(s.url+"/sales/draw-later#token="+tok),
		chromedp.WaitVisible(chromedp.CSS(`#draw-enter`)),
	); err != nil {
		t.Fatalf("opening the later draw's page: %v", err)
	}
	waitJS(t, ctx, "the countdown to the opening", `document.getElementById('countdown').textContent.indexOf("Entries open in 00:59:") === 0 &&
		document.getElementById('draw-enter').disabled && document.getElementById('status').textContent === "Entries are not open yet."`, 10*time.Second)

	if err := chromedp.Do(ctx,
		chromedp.Navigate(s.url+"/sales/draw-now"),
		chromedp.WaitVisible(chromedp.CSS(`#draw-enter`)),
	); err != nil {
		t.Fatalf("opening the open draw's page: %v", err)
	}
	waitJS(t, ctx, "the enter button", `!document.getElementById('draw-enter').disabled && !document.getElementById('draw-qty')`, 10*time.Second)
	if _, err := chromedp.Run(ctx, chromedp.Click(chromedp.CSS(`#draw-enter`))); err != nil {
		t.Fatalf("clicking enter: %v", err)
	}
	waitJS(t, ctx, "the entry", `document.getElementById('status').textContent === "You are in the draw. Results come when entries close." &&
		document.getElementById('draw-entry').textContent === "You are in the draw: quantity 1. You are charged 25.00 only if you win." &&
		document.getElementById('payment').hidden && document.getElementById('pay').hidden && !document.getElementById('draw-withdraw').hidden`, 20*time.Second)
	if e := s.entryOf(t, "draw-now", tok); e.body["state"] != "entered" {
		t.Errorf("cyd's entry: %v, want entered", e.body)
	}
}
