package systemtest

import (
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/browsertest"
)

// TestItemPagePurchasedFollowsOrder: in a fair sale the item page's
// "bought" state follows the order: after the buyer cancels the order the
// page, reloaded, polls with the purchased ticket, reads its order_id,
// finds the order cancelled and goes back to the ticket from before the
// purchase, which answers the buyer's place (admitted, the window still
// open), and the buy button is on again.
func TestItemPagePurchasedFollowsOrder(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test")
	}
	s := startPageSystem(t, nil)
	const id = "fair-cancel"
	startsAt := time.Now().Add(6 * time.Second)
	if _, err := s.cp.CreateSale(s.ctx, flashgate.Sale{ID: id, Name: "Fair boots", PriceCents: 9900, Total: 2,
		StartsAt: &startsAt, Queue: flashgate.QueueFair, ChallengeMaxNumber: 3000, AdmitSeconds: 600}); err != nil {
		t.Fatal(err)
	}
	ctx := browsertest.New(t, s.ctx, 900, 900, 60*time.Second)
	if _, err := chromedp.Run(ctx, chromedp.Navigate(s.url+"/sales/"+id+"?token="+s.token(t, "dana"))); err != nil {
		t.Fatalf("opening the item page: %v", err)
	}
	waitJS(t, ctx, "the join button", `!document.getElementById('queue').hidden && !document.getElementById('enter').hidden`, 10*time.Second)
	if _, err := chromedp.Run(ctx, chromedp.Click(chromedp.CSS(`#enter`))); err != nil {
		t.Fatalf("clicking join: %v", err)
	}
	waitJS(t, ctx, "admission", `!document.getElementById('buy').disabled &&
		document.getElementById('queue-line').textContent.indexOf("It's your turn") === 0`, 25*time.Second)
	if _, err := chromedp.Run(ctx, chromedp.Click(chromedp.CSS(`#buy`))); err != nil {
		t.Fatalf("clicking buy: %v", err)
	}
	got := waitJS(t, ctx, "the order id", `(function(){ var s = document.getElementById('status');
		return s.className === "status ok" && s.textContent.indexOf("Got it!") === 0 ? s.textContent : ""; })()`, 5*time.Second)
	m := orderRe.FindStringSubmatch(got)
	if m == nil {
		t.Fatalf("page says %q, want an order id", got)
	}
	waitJS(t, ctx, "the purchased ticket", `(sessionStorage.getItem('flashgate-ticket-`+id+`') || '').indexOf('b`+m[1]+`~') === 0`, 5*time.Second)
	cancel, err := chromedp.Run(ctx, chromedp.Evaluate[int](`fetch("/api/orders/`+m[1]+`/cancel", {method: "POST",
		headers: {"Authorization": "Bearer " + sessionStorage.getItem("flashgate-token")}}).then(function (r) { return r.status; })`,
		chromedp.EvalAwaitPromise))
	if err != nil || cancel != 200 {
		t.Fatalf("cancelling the order: got %d (%v), want 200", cancel, err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Reload()); err != nil {
		t.Fatalf("reloading: %v", err)
	}
	waitJS(t, ctx, "the place again after the cancel", `!document.getElementById('buy').disabled &&
		document.getElementById('queue-line').textContent.indexOf("It's your turn") === 0 &&
		(sessionStorage.getItem('flashgate-ticket-`+id+`') || '').charAt(0) === 'k'`, 15*time.Second)
}
