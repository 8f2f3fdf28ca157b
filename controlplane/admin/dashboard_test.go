package admin

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/browsertest"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/lua"
)

// TestDashboard drives the dashboard in headless Chromium: it asks for the
// token, renders the sales table and charts, starts a sale and shows its
// figures move. FLASHGATE_DASHBOARD_PNG, when set, names a file that also
// receives the screenshot.
func TestDashboard(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test")
	}
	e := newEnv(t, sqliteDSN(t), nil)
	srv := httptest.NewServer(e.handler())
	t.Cleanup(srv.Close)
	for _, s := range []flashgate.Sale{
		{ID: "spring-drop", Name: "Limited sneakers", PriceCents: 12900, Total: 100},
		{ID: "vinyl-reissue", Name: "Vinyl reissue", PriceCents: 3500, Total: 500},
	} {
		if _, err := e.svc.CreateSale(e.ctx, s); err != nil {
			t.Fatal(err)
		}
	}

	ctx := browsertest.New(t, e.ctx, 1440, 900, 60*time.Second)

	if err := chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/admin/"),
		chromedp.WaitVisible(chromedp.CSS(`#token`)),
	); err != nil {
		t.Fatalf("opening the dashboard: %v", err)
	}
	appHidden, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById('app').hidden`))
	if err != nil {
		t.Fatal(err)
	}
	if !appHidden {
		t.Fatal("the dashboard shows data before a token was given")
	}
	row := `#sales tbody tr[data-sale="spring-drop"]`
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS(`#token`), testToken),
		chromedp.Click(chromedp.CSS(`#token-go`)),
		chromedp.WaitVisible(chromedp.CSS(row)),
		chromedp.WaitVisible(chromedp.CSS(`#sales tbody tr[data-sale="vinyl-reissue"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#chart-requests`)),
	); err != nil {
		t.Fatalf("token and table: %v", err)
	}
	// The table is redrawn every second, so the page itself finds and
	// clicks the button, in one step.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector('`+row+` button[data-act="start"]').click() || true`)); err != nil {
		t.Fatalf("clicking start: %v", err)
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(row+` .state.open`))); err != nil {
		t.Fatalf("waiting for the sale to show open: %v", err)
	}
	if got := field(t, e.rdb, "spring-drop", lua.FieldStart); got != 1 {
		t.Fatalf("start = %d after the Start button, want 1", got)
	}
	// The click shows in the recent admin actions.
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#audit tbody tr`))); err != nil {
		t.Fatalf("waiting for the recent admin actions: %v", err)
	}
	audit, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('#audit tbody tr').textContent`))
	if err != nil || !strings.Contains(audit, "start_sale") || !strings.Contains(audit, "spring-drop") {
		t.Errorf("recent admin actions: got %q (%v), want start_sale of spring-drop", audit, err)
	}

	// Traffic: admitted and rejected requests and purchases over ~3s.
	for i := 0; i < 30; i++ {
		pipe := e.rdb.Pipeline()
		pipe.HIncrBy(e.ctx, lua.SaleKey("spring-drop"), lua.FieldAccess, int64(40+i*3))
		pipe.HIncrBy(e.ctx, lua.SaleKey("spring-drop"), lua.FieldRejected, int64(200+i*40))
		if _, err := pipe.Exec(e.ctx); err != nil {
			t.Fatal(err)
		}
		for j := 0; j < 2; j++ {
			e.reserve("spring-drop", "u"+strconv.Itoa(i)+"-"+strconv.Itoa(j))
		}
		if i%5 == 4 {
			for _, o := range e.persist("spring-drop") {
				if o.UserID[len(o.UserID)-1] == '0' {
					_, _ = e.svc.Pay(e.ctx, o.ID, o.UserID)
				}
			}
		}
		time.Sleep(100 * time.Millisecond) // traffic over time, for the rate and the chart: not a wait
	}
	var booked, paid, rps string
	testwait.For(15*time.Second, func() bool {
		got, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`(function(){
			var r = document.querySelector('`+row+`');
			if (!r) return ['', '', ''];
			return [r.querySelector('.c-booked').textContent, r.querySelector('.c-paid').textContent, document.getElementById('rps-now').textContent];
		})()`))
		if err != nil || len(got) != 3 {
			t.Fatalf("reading the table: %v", err)
		}
		booked, paid, rps = got[0], got[1], got[2]
		return strings.TrimSpace(booked) == "60" && strings.TrimSpace(paid) == "30"
	})
	if strings.TrimSpace(booked) != "60" || strings.TrimSpace(paid) != "30" {
		t.Fatalf("dashboard shows booked %q paid %q, want 60 and 30", booked, paid)
	}
	// The chart has drawn pixels of its line colour.
	drawn, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(function(){
		var c = document.getElementById('chart-requests'), d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data, n = 0;
		for (var i = 0; i < d.length; i += 4) { if (d[i+3] > 0 && d[i+2] > 150 && d[i] < 140 && d[i+2] - d[i] > 60) n++; }
		return String(n);
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := strconv.Atoi(drawn); n < 10 {
		t.Errorf("requests chart drew %s line pixels, want a line", drawn)
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	shot := filepath.Join(t.TempDir(), "dashboard.png")
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	if out := os.Getenv("FLASHGATE_DASHBOARD_PNG"); out != "" {
		if err := os.WriteFile(out, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("screenshot %s (%d bytes); requests/s shown %s", shot, len(png), rps)
}
