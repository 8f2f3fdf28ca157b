package systemtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/admin"
	"github.com/flashgate/flashgate/internal/testenv/browsertest"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/lua"
)

// TestDashboardFairQueue drives the admin dashboard in headless Chromium
// against every tier in-process, the control plane's loops on the wall
// clock, and reads each sale's queue line: none for a first-come sale;
// "not open yet" before a fair sale's pre-queue; its entrants in the
// pre-queue; after the start, the entrants, the admitted position (as the
// leader admits) and the rate and estimated wait of GET /admin/sales/{id}.
func TestDashboardFairQueue(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test")
	}
	s := startPageSystem(t, nil)
	adminSrv := httptest.NewServer(admin.Handler(s.cp))
	t.Cleanup(adminSrv.Close)
	const fair, waiting, later, plain = "fair-drop", "waiting-drop", "later-drop", "plain-sale"
	startsAt := time.Now().Add(5 * time.Second)
	laterAt := time.Now().Add(2 * time.Hour)
	for _, sale := range []flashgate.Sale{
		{ID: fair, Name: "Fair sneakers", PriceCents: 12900, Total: 2, StartsAt: &startsAt, Queue: flashgate.QueueFair},
		{ID: waiting, Name: "Waiting drop", PriceCents: 900, Total: 5, StartsAt: &laterAt, Queue: flashgate.QueueFair, PrequeueSeconds: 86400},
		{ID: later, Name: "Later drop", PriceCents: 900, Total: 5, StartsAt: &laterAt, Queue: flashgate.QueueFair, PrequeueSeconds: 60},
		{ID: plain, Name: "First come", PriceCents: 500, Total: 10},
	} {
		if _, err := s.cp.CreateSale(s.ctx, sale); err != nil {
			t.Fatal(err)
		}
	}
	// Entrants straight into Redis once the leader has opened the
	// pre-queues (the entry API has its own tests): fair-drop's may come
	// before or after its start, which changes none of its figures.
	for id, users := range map[string][]string{fair: {"ann", "ben", "cat"}, waiting: {"dan", "eve"}} {
		testwait.Eventually(t, 10*time.Second, func() bool {
			open, _ := s.rdb.HGet(s.ctx, lua.SaleKey(id), lua.FieldQueueOpen).Result()
			return open == "1"
		}, "the leader to open %s's pre-queue", id)
		for _, u := range users {
			if err := lua.QueueEnter.Run(s.ctx, s.rdb, lua.QueueEnterKeys(id, "none"), u, 0).Err(); err != nil {
				t.Fatalf("%s enters %s: %v", u, id, err)
			}
		}
	}

	ctx := browsertest.New(t, s.ctx, 1440, 900, 60*time.Second)
	row := func(id string) string { return `#sales tbody tr[data-sale="` + id + `"]` }
	if err := chromedp.Do(ctx,
		chromedp.Navigate(adminSrv.URL+"/admin/"),
		chromedp.WaitVisible(chromedp.CSS(`#token`)),
		chromedp.SendKeys(chromedp.CSS(`#token`), s.adminToken),
		chromedp.Click(chromedp.CSS(`#token-go`)),
		chromedp.WaitVisible(chromedp.CSS(row(fair))),
		chromedp.WaitVisible(chromedp.CSS(row(waiting))),
		chromedp.WaitVisible(chromedp.CSS(row(later))),
		chromedp.WaitVisible(chromedp.CSS(row(plain))),
	); err != nil {
		t.Fatalf("opening the dashboard: %v", err)
	}
	// queueLine is the row's queue line, "-" when it has none.
	queueLine := func(id string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(function(){
			var r = document.querySelector('`+row(id)+`'), q = r && r.querySelector('.c-queue');
			return q ? q.textContent : '-'; })()`))
		if err != nil {
			t.Fatalf("reading %s's queue line: %v", id, err)
		}
		return v
	}
	waitLine := func(id, what string, want func() string) {
		t.Helper()
		var got, w string
		if _, ok := testwait.For(20*time.Second, func() bool { w, got = want(), queueLine(id); return got == w }); !ok {
			t.Fatalf("%s's queue line %s: got %q, want %q", id, what, got, w)
		}
	}
	fixed := func(s string) func() string { return func() string { return s } }

	if got := queueLine(plain); got != "-" {
		t.Errorf("the first-come sale's queue line: got %q, want none", got)
	}
	waitLine(later, "before its pre-queue", fixed("Fair queue: 0 entrants · admitted 0 · 0/min · wait — · not open yet"))
	waitLine(waiting, "in the pre-queue", fixed("Fair queue: 2 entrants · admitted 0 · 0/min · wait —"))

	// After the start the leader admits a position per unit: 2.
	var q adminQueueFigures
	testwait.Eventually(t, 20*time.Second, func() bool {
		q = adminQueue(t, adminSrv.URL, s.adminToken, fair)
		return q.AdmittedPosition == 2
	}, "the leader to admit 2 positions of %s (last: %+v)", fair, &q)
	// One more entrant, after the start: all entrants count, not only the
	// pre-start ones.
	if err := lua.QueueEnter.Run(s.ctx, s.rdb, lua.QueueEnterKeys(fair, "none"), "fay", 0).Err(); err != nil {
		t.Fatalf("fay enters: %v", err)
	}
	waitLine(fair, "after the start", func() string {
		q = adminQueue(t, adminSrv.URL, s.adminToken, fair)
		wait := "—"
		if q.ETASeconds != nil {
			wait = strconv.FormatInt((*q.ETASeconds+59)/60, 10) + " min"
		}
		return fmt.Sprintf("Fair queue: %d entrants · admitted %d · %d/min · wait %s", q.Entrants, q.AdmittedPosition, q.RatePerMinute, wait)
	})
	if q.Entrants != 4 || q.AdmittedPosition != 2 {
		t.Errorf("after the start: the admin API says %d entrants, admitted %d; want 4 and 2", q.Entrants, q.AdmittedPosition)
	}
}

// adminQueueFigures is the part of GET /admin/sales/{id}'s queue the
// dashboard's queue line shows.
type adminQueueFigures struct {
	Entrants         int64  `json:"entrants"`
	AdmittedPosition int64  `json:"admitted_position"`
	RatePerMinute    int64  `json:"rate_per_minute"`
	ETASeconds       *int64 `json:"eta_seconds"`
}

// adminQueue reads a fair sale's queue figures from the admin API.
func adminQueue(t *testing.T, base, token, id string) adminQueueFigures {
	t.Helper()
	req, err := http.NewRequest("GET", base+"/admin/sales/"+id, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var v struct {
		Queue *adminQueueFigures `json:"queue"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(body, &v) != nil || v.Queue == nil {
		t.Fatalf("GET /admin/sales/%s: got %d %s, want 200 with a queue", id, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return *v.Queue
}
