package systemtest

import (
	"encoding/json"
	"html/template"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/browsertest"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/static"
)

// variantAPI answers the item page's calls for a sale sold in sizes S, M
// and L as the gateway's contract does: GET /api/sales/{id} with each
// variant's remaining units, and the purchase, whose body it keeps.
type variantAPI struct {
	mu     sync.Mutex
	left   map[string]int
	bodies []string
}

func (a *variantAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/api/sales/tee":
		var vs []map[string]any
		sum := 0
		for _, id := range []string{"S", "M", "L"} {
			vs = append(vs, map[string]any{"id": id, "name": "Size " + id, "total": 3, "remaining": a.left[id]})
			sum += a.left[id]
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"id": "tee", "state": "open", "total": 9, "remaining": sum, "variants": vs})
	case r.Method == http.MethodPost && r.URL.Path == "/api/sales/tee/orders":
		var b struct {
			Variant string `json:"variant"`
		}
		raw := make([]byte, 1024)
		n, _ := r.Body.Read(raw)
		a.bodies = append(a.bodies, string(raw[:n]))
		_ = json.Unmarshal(raw[:n], &b)
		if a.left[b.Variant] <= 0 {
			w.WriteHeader(http.StatusConflict)
			_, _ = w.Write([]byte(`{"error":"sold_out","variant":"` + b.Variant + `"}`))
			return
		}
		a.left[b.Variant]--
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"order_id":"ord-1","variant":"` + b.Variant + `"}`))
	default:
		http.NotFound(w, r)
	}
}

// TestItemPageSizePicker opens the item page of a sale sold in sizes (the
// page against the purchase contract, the API answered as the gateway
// does): one size sells out while the page is open and turns grey and
// unselectable without a reload, and a purchase of another size sends
// that size.
func TestItemPageSizePicker(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test")
	}
	gw, err := fs.Sub(static.Gateway, "gateway")
	if err != nil {
		t.Fatal(err)
	}
	page := template.Must(template.ParseFS(gw, "item.html"))
	api := &variantAPI{left: map[string]int{"S": 3, "M": 3, "L": 1}}
	mux := http.NewServeMux()
	mux.Handle("/api/", api)
	mux.Handle("/static/", http.StripPrefix("/static/", http.FileServerFS(gw)))
	mux.HandleFunc("/sales/tee", func(w http.ResponseWriter, r *http.Request) {
		_ = page.Execute(w, map[string]any{"ID": "tee", "Name": "Flash tee", "Price": "€19.00", "Total": 9, "StartsAt": ""})
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	ctx := browsertest.New(t, t.Context(), 900, 800, 25*time.Second)
	if err := chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/sales/tee#token=t0k3n"),
		chromedp.WaitVisible(chromedp.CSS(`#size-list button[data-variant="L"]`)),
	); err != nil {
		t.Fatalf("opening the item page: %v", err)
	}
	if got := waitJS(t, ctx, "the picker's buttons", `Array.from(document.querySelectorAll('#size-list button')).map(function(b){
		return b.getAttribute('data-variant') + (b.disabled ? '-' : '+') + b.getAttribute('aria-pressed'); }).join(' ')`, 5*time.Second); got != "S+false M+false L+false" {
		t.Errorf("buttons %q, want S, M and L enabled, none pressed", got)
	}
	if disabled, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById('buy').disabled`)); err != nil || !disabled {
		t.Errorf("buy disabled = %v (%v) before a size is chosen, want true", disabled, err)
	}

	// L is chosen, then sells out elsewhere: the next poll greys it and
	// unchooses it, without a reload.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#size-list button[data-variant="L"]`))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "L pressed", `document.querySelector('#size-list button[data-variant="L"]').getAttribute('aria-pressed') === "true"`, 5*time.Second)
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.__marker = true`)); err != nil {
		t.Fatal(err)
	}
	api.mu.Lock()
	api.left["L"] = 0
	api.mu.Unlock()
	waitJS(t, ctx, "L greyed", `(function(){ var b = document.querySelector('#size-list button[data-variant="L"]');
		return b.disabled && b.getAttribute('aria-disabled') === "true" && b.getAttribute('aria-pressed') === "false" &&
			/sold out/.test(b.getAttribute('aria-label')) && document.getElementById('buy').disabled; })()`, 5*time.Second)
	if kept, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.__marker === true`)); err != nil || !kept {
		t.Fatalf("the page reloaded (%v)", err)
	}

	// M buys, and the purchase names it.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#size-list button[data-variant="M"]`)), chromedp.Click(chromedp.CSS(`#buy`))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the order", `document.getElementById('status').textContent.indexOf("Got it!") === 0`, 5*time.Second)
	api.mu.Lock()
	bodies := strings.Join(api.bodies, " ")
	api.mu.Unlock()
	if bodies != `{"variant":"M","quantity":1}` {
		t.Errorf("purchase bodies %s, want one of M", bodies)
	}
}

// TestItemPageSizePickerLive is TestItemPageSizePicker against every tier
// over real HTTP: size L sells out to another buyer while the page is
// open, the page greys it from the gateway's own sale view without a
// reload, and the browser's buyer buys M, whose row in the database names
// M.
func TestItemPageSizePickerLive(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test")
	}
	s := startFaultSystem(t, "single")
	s.startGateway(t)
	s.startSink("sink", s.db)
	sale := flashgate.Sale{ID: "tee", Name: "Flash tee", PriceCents: 1900,
		Variants: []flashgate.Variant{{ID: "S", Name: "Small", Total: 3}, {ID: "M", Name: "Medium", Total: 3}, {ID: "L", Name: "Large", Total: 1}}}
	if _, err := s.cp.CreateSale(s.ctx, sale); err != nil {
		t.Fatal(err)
	}
	if err := s.cp.Start(s.ctx, sale.ID); err != nil {
		t.Fatal(err)
	}
	ctx := browsertest.New(t, t.Context(), 900, 800, 30*time.Second)
	if err := chromedp.Do(ctx,
		chromedp.Navigate(*s.base.Load()+"/sales/tee#token="+s.token(t, "browser")),
		chromedp.WaitVisible(chromedp.CSS(`#size-list button[data-variant="L"]`)),
	); err != nil {
		t.Fatalf("opening the item page: %v", err)
	}
	waitJS(t, ctx, "L open", `!document.querySelector('#size-list button[data-variant="L"]').disabled`, 10*time.Second)
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.__marker = true`)); err != nil {
		t.Fatal(err)
	}
	outs := (&crowd{s: s, sale: sale.ID, users: []string{"other"}, workers: 1, order: wanting("L")}).run(s.ctx, t)
	if outs[0].answer != "201" {
		t.Fatalf("another buyer's purchase of L: %s, want 201", outs[0].answer)
	}
	waitJS(t, ctx, "L greyed", `(function(){ var b = document.querySelector('#size-list button[data-variant="L"]');
		return b.disabled && b.getAttribute('aria-disabled') === "true" && /sold out/.test(b.getAttribute('aria-label')); })()`, 10*time.Second)
	if kept, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.__marker === true`)); err != nil || !kept {
		t.Fatalf("the page reloaded (%v)", err)
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#size-list button[data-variant="M"]`)), chromedp.Click(chromedp.CSS(`#buy`))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the order", `document.getElementById('status').textContent.indexOf("Got it!") === 0`, 10*time.Second)
	var row flashgate.Order
	if _, ok := testwait.For(10*time.Second, func() bool {
		live, err := s.db.LiveOrders(s.ctx, sale.ID)
		for _, o := range live {
			if o.UserID == "browser" {
				row = o
			}
		}
		return err == nil && row.ID != ""
	}); !ok {
		t.Fatal("the browser's order never reached the database")
	}
	if row.Variant != "M" || row.Quantity != 1 {
		t.Errorf("the browser's row: variant %q, %d units; want one unit of M", row.Variant, row.Quantity)
	}
}
