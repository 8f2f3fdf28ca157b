package systemtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/golang-jwt/jwt/v5"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane"
	"github.com/flashgate/flashgate/gateway"
	"github.com/flashgate/flashgate/internal/testenv/browsertest"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/inventory"
	"github.com/flashgate/flashgate/lua"
	"github.com/flashgate/flashgate/ordersink"
	"github.com/flashgate/flashgate/sqldb"
)

// pageSystem is every tier of one process, wired as cmd/flashgate's build
// does, with the gateway serving on a loopback port.
type pageSystem struct {
	ctx  context.Context
	rdb  *redis.Client
	db   *sqldb.DB
	cp   *controlplane.Service
	url  string // http://127.0.0.1:port
	jwtS []byte
	// adminToken is the control plane's admin token.
	adminToken string
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// startPageSystem starts it; mod, when not nil, adjusts the control plane's
// Config before it is built.
func startPageSystem(t *testing.T, mod func(*controlplane.Config)) *pageSystem {
	t.Helper()
	return startPageSystemPaying(t, mod, pagePay{})
}

// startPageSystemPaying starts it with the payments of pay
// (itempage_pay_test.go).
func startPageSystemPaying(t *testing.T, mod func(*controlplane.Config), pay pagePay) *pageSystem {
	t.Helper()
	return startPageSystemWith(t, mod, pay, nil)
}

// startPageSystemWith starts it with the payments of pay; gmod, when not
// nil, adjusts the gateway's Config before it is built.
func startPageSystemWith(t *testing.T, mod func(*controlplane.Config), pay pagePay, gmod func(*gateway.Config)) *pageSystem {
	t.Helper()
	rs := redistest.Start(t)
	rdb := rs.Client(t)
	sinkReader := rs.Client(t)
	ctx := context.Background()
	db, err := sqldb.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "fg.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })

	s := &pageSystem{ctx: ctx, rdb: rdb, db: db, jwtS: []byte(randomHex(t, 32)), adminToken: randomHex(t, 32)}
	inv := inventory.New(rdb, inventory.Config{Logger: quiet})
	cfg := controlplane.Config{Redis: rdb, Store: db, Releaser: inv, AdminToken: s.adminToken, Logger: quiet}
	if mod != nil {
		mod(&cfg)
	}
	pay.controlplane(&cfg, db)
	s.cp, err = controlplane.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	gcfg := gateway.Config{
		Primary: rdb, Replica: rdb, Reserver: inv, Catalog: db, Orders: s.cp,
		Draws: s.cp, JWTSecret: s.jwtS, Logger: quiet, ShutdownDelay: -1,
	}
	pay.gateway(&gcfg, s.cp)
	if gmod != nil {
		gmod(&gcfg)
	}
	gw, err := gateway.New(gcfg)
	if err != nil {
		t.Fatal(err)
	}
	sink := ordersink.New(sinkReader, db, ordersink.Config{Logger: quiet})

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.url = "http://" + ln.Addr().String()
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(3)
	go func() {
		defer wg.Done()
		if err := gw.Serve(ln); err != nil {
			t.Errorf("gateway: %v", err)
		}
	}()
	go func() {
		defer wg.Done()
		if err := sink.Run(runCtx); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("ordersink: %v", err)
		}
	}()
	go func() {
		defer wg.Done()
		if err := s.cp.Run(runCtx); err != nil {
			t.Errorf("controlplane: %v", err)
		}
	}()
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := gw.Shutdown(sctx); err != nil {
			t.Errorf("gateway shutdown: %v", err)
		}
		stop()
		wg.Wait()
	})
	return s
}

// token mints a buyer token for user, valid for an hour.
func (s *pageSystem) token(t *testing.T, user string) string {
	t.Helper()
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": user, "exp": time.Now().Add(time.Hour).Unix(),
	}).SignedString(s.jwtS)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// waitJS evaluates expr in the page until it is truthy and returns its
// value as a string; after timeout the test fails, naming what.
func waitJS(t *testing.T, ctx context.Context, what, expr string, timeout time.Duration) string {
	t.Helper()
	var (
		v   string
		err error
	)
	if _, ok := testwait.For(timeout, func() bool {
		v, err = chromedp.Run(ctx, chromedp.Evaluate[string](`(function(){ var v = (`+expr+`); return v ? String(v) : ""; })()`))
		return err == nil && v != ""
	}); !ok {
		snap, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('countdown').textContent + ' | ' +
			document.getElementById('status').textContent + ' | buy disabled=' + (document.getElementById('buy') || {}).disabled`))
		t.Fatalf("waited %v for %s: %v (page: %s)", timeout, what, err, snap)
	}
	return v
}

var orderRe = regexp.MustCompile(`order is ([A-Za-z0-9_-]+)\.`)

// TestItemPage drives the item page in headless Chromium against every tier
// in-process (real redis-server, SQLite): the countdown ticks and the buy
// button stays disabled before the start; once the admin starts the sale the
// button enables, a click buys (the order id shown is the one Redis holds
// for the buyer and reaches the database), and buying again says already
// purchased with the same order. FLASHGATE_ITEMPAGE_PNG, when set, names a
// file that also receives the final screenshot.
func TestItemPage(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test")
	}
	s := startPageSystem(t, nil)
	const id = "spring-drop"
	startsAt := time.Now().Add(time.Hour)
	if _, err := s.cp.CreateSale(s.ctx, flashgate.Sale{
		ID: id, Name: "Limited sneakers", PriceCents: 12900, Total: 5, StartsAt: &startsAt,
	}); err != nil {
		t.Fatal(err)
	}

	ctx := browsertest.New(t, s.ctx, 900, 800, 25*time.Second)

	if err := chromedp.Do(ctx,
		chromedp.Navigate(s.url+"/sales/"+id+"#token="+s.token(t, "alice")),
		chromedp.WaitVisible(chromedp.CSS(`#buy`)),
	); err != nil {
		t.Fatalf("opening the item page: %v", err)
	}
	if title, err := chromedp.Run(ctx, chromedp.Title()); err != nil || !strings.Contains(title, "Limited sneakers") {
		t.Fatalf("title %q (%v), want the sale's name", title, err)
	}
	if loc, err := chromedp.Run(ctx, chromedp.Location()); err != nil || strings.Contains(loc, "token") || strings.Contains(loc, "#") {
		t.Errorf("address bar %q (%v): the token (fragment) should be moved out of it", loc, err)
	}

	// Before the start: a ticking countdown about an hour long, and a
	// disabled button.
	countRe := `/^Starts in (\d+d )?\d\d:\d\d:\d\d$/`
	first := waitJS(t, ctx, "the countdown", `(function(){ var c = document.getElementById('countdown').textContent;
		return `+countRe+`.test(c) ? c : ""; })()`, 5*time.Second)
	if !strings.HasPrefix(first, "Starts in 00:59:") && first != "Starts in 01:00:00" {
		t.Errorf("countdown %q, want about an hour", first)
	}
	waitJS(t, ctx, "the countdown to tick", `document.getElementById('countdown').textContent !== `+jsString(first), 3*time.Second)
	waitJS(t, ctx, "the page to see the sale upcoming", `document.getElementById('status').textContent === "Not started yet."`, 5*time.Second)
	if disabled, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById('buy').disabled`)); err != nil || !disabled {
		t.Fatalf("buy button disabled = %v (%v) before the start, want true", disabled, err)
	}

	// The admin starts the sale: the page's poll enables the button.
	if err := s.cp.Start(s.ctx, id); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	waitJS(t, ctx, "the buy button to enable", `!document.getElementById('buy').disabled`, 5*time.Second)
	enabledAfter := time.Since(started)
	if cd, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#countdown`))); err != nil || cd != "On sale now" {
		t.Errorf("countdown %q (%v) once open, want \"On sale now\"", cd, err)
	}

	// A click buys: the order id shown is alice's live order in Redis, and
	// the order sink writes it to the database.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#buy`))); err != nil {
		t.Fatalf("clicking buy: %v", err)
	}
	got := waitJS(t, ctx, "the order id", `(function(){ var s = document.getElementById('status');
		return s.className === "status ok" && s.textContent.indexOf("Got it!") === 0 ? s.textContent : ""; })()`, 5*time.Second)
	m := orderRe.FindStringSubmatch(got)
	if m == nil {
		t.Fatalf("status %q has no order id", got)
	}
	orderID := m[1]
	held, err := s.rdb.HGet(s.ctx, lua.BuyersKey(id), "alice").Result()
	if err != nil || held != orderID {
		t.Fatalf("Redis holds order %q (%v) for alice, the page shows %q", held, err, orderID)
	}
	var o flashgate.Order
	if _, ok := testwait.For(5*time.Second, func() bool { o, err = s.db.Order(s.ctx, orderID); return err == nil }); !ok {
		t.Fatalf("order %s never reached the database: %v", orderID, err)
	}
	if o.UserID != "alice" || o.SaleID != id || o.Quantity != 1 {
		t.Fatalf("order row %+v, want alice's one unit of %s", o, id)
	}
	if disabled, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById('buy').disabled`)); err != nil || !disabled {
		t.Errorf("buy button disabled = %v (%v) after the purchase, want true", disabled, err)
	}
	waitJS(t, ctx, "the stock to show 4 left", `document.getElementById('remaining').textContent === "4"`, 5*time.Second)

	// Buying again (after a reload: the page keeps the token for the tab)
	// says already purchased, with the same order.
	if err := chromedp.Do(ctx, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(`#buy`))); err != nil {
		t.Fatalf("reloading: %v", err)
	}
	waitJS(t, ctx, "the buy button to enable after the reload", `!document.getElementById('buy').disabled`, 5*time.Second)
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#buy`))); err != nil {
		t.Fatalf("clicking buy again: %v", err)
	}
	again := waitJS(t, ctx, "already purchased", `(function(){ var s = document.getElementById('status').textContent;
		return s.indexOf("Already purchased") === 0 ? s : ""; })()`, 5*time.Second)
	if m := orderRe.FindStringSubmatch(again); m == nil || m[1] != orderID {
		t.Errorf("second purchase says %q, want order %s", again, orderID)
	}
	if n, err := s.rdb.HLen(s.ctx, lua.BuyersKey(id)).Result(); err != nil || n != 1 {
		t.Errorf("buyers hash has %d entries (%v), want 1", n, err)
	}

	// The pay button pays the order (simulated payments: at once).
	waitJS(t, ctx, "the pay button", `!document.getElementById('pay').hidden`, 5*time.Second)
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#pay`))); err != nil {
		t.Fatalf("clicking pay: %v", err)
	}
	waitJS(t, ctx, "the order paid", `(function(){ var s = document.getElementById('status');
		return s.className === "status ok" && s.textContent.indexOf("Paid") === 0 ? s.textContent : ""; })()`, 10*time.Second)
	if o, err := s.cp.Order(s.ctx, orderID, "alice"); err != nil || o.Status != flashgate.StatusPaid {
		t.Errorf("order after the pay button: got %+v, %v; want paid", o, err)
	}

	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	shot := filepath.Join(t.TempDir(), "itempage.png")
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	if out := os.Getenv("FLASHGATE_ITEMPAGE_PNG"); out != "" {
		if err := os.WriteFile(out, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("button enabled %v after the start; order %s; screenshot %s (%d bytes)",
		enabledAfter.Round(time.Millisecond), orderID, shot, len(png))
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}

// TestItemPageTokenInQuery opens an item page with the token in the query
// string among other parameters, and with both a fragment and a query
// token: the page keeps the token (the fragment's first) in sessionStorage
// and leaves the address bar with the other parameters and no token.
func TestItemPageTokenInQuery(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test")
	}
	s := startPageSystem(t, nil)
	const id = "query-drop"
	if _, err := s.cp.CreateSale(s.ctx, flashgate.Sale{ID: id, Name: "Query socks", PriceCents: 900, Total: 5}); err != nil {
		t.Fatal(err)
	}
	alice, bob := s.token(t, "alice"), s.token(t, "bob")
	ctx := browsertest.New(t, s.ctx, 900, 800, 25*time.Second)
	for _, c := range []struct{ suffix, wantToken, wantLoc string }{
		{"?utm=mail&token=" + alice + "&lang=de", alice, "/sales/" + id + "?utm=mail&lang=de"},
		{"?token=" + alice + "#token=" + bob + "&x=1", bob, "/sales/" + id + "#x=1"},
	} {
		if err := chromedp.Do(ctx,
			chromedp.Navigate(s.url+"/sales/"+id+c.suffix),
			chromedp.WaitVisible(chromedp.CSS(`#buy`)),
		); err != nil {
			t.Fatalf("opening %s: %v", c.suffix, err)
		}
		got := waitJS(t, ctx, "the token in sessionStorage", `sessionStorage.getItem("flashgate-token") || ""`, 5*time.Second)
		if got != c.wantToken {
			t.Errorf("%s: sessionStorage token …%s, want …%s", c.suffix, got[max(0, len(got)-12):], c.wantToken[len(c.wantToken)-12:])
		}
		loc, err := chromedp.Run(ctx, chromedp.Location())
		if err != nil || loc != s.url+c.wantLoc {
			t.Errorf("%s: address bar %q (%v), want %q", c.suffix, loc, err, s.url+c.wantLoc)
		}
	}
}
