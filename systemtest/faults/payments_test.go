//go:build faults

package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stripe/stripe-go/v82"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/stripelocal"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/lua"
)

// paymentsScenario: a crowd buys and pays through --payments stripe against
// a local stand-in of Stripe's API while the webhooks are duplicated,
// reordered, delayed past the payment window or never sent, and payments
// succeed after their orders expired (some with a unit free again, some
// after the freed units were sold to others).
var paymentsScenario = scenario{name: "payments-webhooks",
	fault: "a crowd pays through a local Stripe stand-in: webhooks duplicated x3, reordered, delayed past the window, lost; " +
		"payments succeeding after expiry, with and without a unit left (PostgreSQL)",
	opts: clusterOpts{postgres: true}, own: paymentsRun}

const (
	payUnits  = 60
	payWindow = 4 * time.Second
	payGrace  = time.Second
)

func paymentsRun(t *testing.T, s *suite, sc scenario) (r result) {
	r = result{name: sc.name, fault: sc.fault, outage: "–", recovery: "–"}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	stand := stripelocal.New("sk_test_faults", "whsec_faults")
	ts := httptest.NewServer(stand)
	defer ts.Close()
	o := sc.opts
	o.env = []string{"FLASHGATE_PAYMENTS=stripe", "FLASHGATE_STRIPE_KEY=" + stand.Key, "FLASHGATE_STRIPE_WEBHOOK_SECRET=" + stand.WebhookSecret,
		"FLASHGATE_STRIPE_API_BASE=" + ts.URL, "FLASHGATE_PAYMENT_WINDOW=" + payWindow.String(), "FLASHGATE_PAYMENT_GRACE=" + payGrace.String()}
	c := s.startCluster(t, sc.name, o)
	const sale = "pay-sale"
	c.openSale(ctx, sale, payUnits)
	problem := func(format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		r.problems = append(r.problems, msg)
		t.Error(msg)
	}
	cl := &http.Client{Timeout: 10 * time.Second}
	call := func(method, url, tok string, body []byte, hdr map[string]string) (int, map[string]any) {
		req, _ := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		res, err := cl.Do(req)
		if err != nil {
			return 0, nil
		}
		defer res.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(io.LimitReader(res.Body, 1<<20)).Decode(&out)
		return res.StatusCode, out
	}
	token := func(user string) string {
		tok, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": user, "exp": time.Now().Add(time.Hour).Unix()}).SignedString(c.jwt)
		return tok
	}
	gw := func(i int) string { return c.gwURL[i%len(c.gwURL)] }
	hook := func(i int, evID, typ, intent, status string) {
		ev := stand.Event(evID, typ, intent, status)
		for try := 0; try < 20; try++ { // the provider retries until a 2xx
			code, _ := call("POST", gw(i)+"/webhooks/stripe", "", ev, map[string]string{"Stripe-Signature": stand.Sign(ev, time.Now())})
			if code == 200 {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
		problem("webhook %s never accepted", evID)
	}
	var requests atomic.Int64
	type buyer struct{ user, tok, order string }
	buy := func(prefix string, n int) []buyer {
		var (
			mu  sync.Mutex
			out []buyer
			wg  sync.WaitGroup
		)
		sem := make(chan struct{}, 16)
		for i := range n {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				b := buyer{user: prefix + strconv.Itoa(i)}
				b.tok = token(b.user)
				code, body := call("POST", gw(i)+"/api/sales/"+sale+"/orders", b.tok, nil, nil)
				requests.Add(1)
				if code == 201 {
					b.order, _ = body["order_id"].(string)
					mu.Lock()
					out = append(out, b)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		return out
	}
	stored := func(bs []buyer) {
		for _, b := range bs {
			if _, ok := testwait.For(30*time.Second, func() bool { _, err := c.db.Order(ctx, b.order); return err == nil }); !ok {
				problem("order %s never stored", b.order)
			}
		}
	}
	start := time.Now()
	first := buy("pay-a-", payUnits+20)
	r.created += len(first)
	stored(first)
	lateHonoured := map[string]bool{}
	var wg sync.WaitGroup
	var late, never []buyer
	// paid checks b's order out through a gateway and pays its intent at
	// the provider; it returns the intent ("" after a problem).
	paid := func(i int, b buyer) string {
		_, body := call("POST", gw(i)+"/api/orders/"+b.order+"/pay", b.tok, nil, nil)
		pi, _ := body["payment_intent"].(string)
		if pi == "" {
			problem("pay %s: %v", b.order, body)
			return ""
		}
		stand.SetStatus(pi, "succeeded")
		return pi
	}
	for i, b := range first {
		switch i % 5 {
		case 0, 1: // paid at once; its webhook duplicated x3 and a stale failure after it
			wg.Add(1)
			go func() {
				defer wg.Done()
				pi := paid(i, b)
				if pi == "" {
					return
				}
				var dup sync.WaitGroup
				for range 3 {
					dup.Add(1)
					go func() { defer dup.Done(); hook(i, "evt_ok_"+b.order, flashgate.EventIntentSucceeded, pi, "") }()
				}
				dup.Wait()
				hook(i, "evt_oldfail_"+b.order, flashgate.EventIntentFailed, pi, "requires_payment_method")
			}()
		case 2: // paid, its webhook held back past the window and grace
			wg.Add(1)
			go func() {
				defer wg.Done()
				pi := paid(i, b)
				if pi == "" {
					return
				}
				time.Sleep(payWindow + payGrace + 2*time.Second) // the delivery delay being simulated
				hook(i, "evt_late_"+b.order, flashgate.EventIntentSucceeded, pi, "")
			}()
		case 3: // checkout, never paid: the reconciliation cancels it
			call("POST", gw(i)+"/api/orders/"+b.order+"/pay", b.tok, nil, nil)
			never = append(never, b)
		case 4: // the checkout's answer lost; the payment succeeds after expiry
			late = append(late, b)
		}
	}
	// The late ones and the never-paid ones expire; then the freed units
	// are sold again but for half as many as there are late payments, so
	// that some late payments find a unit and the others none.
	for _, b := range append(append([]buyer{}, late...), never...) {
		if _, ok := testwait.For(60*time.Second, func() bool {
			o, err := c.db.Order(ctx, b.order)
			return err == nil && o.Status == flashgate.StatusExpired
		}); !ok {
			problem("order %s never expired", b.order)
		}
	}
	time.Sleep(500 * time.Millisecond) // let the gateways' cached state show the freed units
	booked, _ := c.rdb.HGet(ctx, lua.SaleKey(sale), "booked").Int64()
	second := buy("pay-b-", max(int(payUnits-booked)-len(late)/2, 0))
	r.created += len(second)
	stored(second)
	sc2 := stripe.NewClient(stand.Key, stripe.WithBackends(stripe.NewBackendsWithConfig(&stripe.BackendConfig{
		URL: stripe.String(ts.URL), LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull}})))
	for i, b := range late {
		p := &stripe.PaymentIntentCreateParams{Amount: stripe.Int64(4900), Currency: stripe.String("usd")}
		p.SetIdempotencyKey("flashgate-order-" + b.order)
		p.AddMetadata("order_id", b.order)
		pi, err := sc2.V1PaymentIntents.Create(ctx, p)
		if err != nil {
			problem("creating the late intent of %s: %v", b.order, err)
			continue
		}
		stand.SetStatus(pi.ID, "succeeded")
		wg.Add(1)
		go func() {
			defer wg.Done()
			hook(i, "evt_lateok_"+b.order, flashgate.EventIntentSucceeded, pi.ID, "")
			hook(i+1, "evt_lateok_"+b.order, flashgate.EventIntentSucceeded, pi.ID, "")
		}()
	}
	wg.Wait()
	// Settled: no payment left half way, no unpaid order left.
	settled := func() bool {
		rows, err := c.db.OpenPayments(ctx, time.Now().Add(time.Hour), 1)
		if err != nil || len(rows) > 0 {
			return false
		}
		live, err := c.db.LiveOrders(ctx, sale)
		if err != nil {
			return false
		}
		for _, o := range live {
			if o.Status == flashgate.StatusPendingPayment {
				return false
			}
		}
		return true
	}
	if d, ok := testwait.For(90*time.Second, settled); !ok {
		problem("payments not settled after %v", d)
	}
	// Re-sync has delivered every release by now; read the final state.
	f := payFinal{Total: payUnits, Orders: map[string]flashgate.Order{}}
	for _, st := range []flashgate.OrderStatus{flashgate.StatusPaid, flashgate.StatusPendingPayment, flashgate.StatusExpired, flashgate.StatusCancelled, flashgate.StatusRefunded} {
		after := ""
		for {
			page, err := c.db.OrdersPage(ctx, sale, st, after, 500)
			if err != nil {
				t.Fatalf("reading orders: %v", err)
			}
			for _, o := range page {
				f.Orders[o.ID] = o
				after = o.ID
			}
			if len(page) < 500 {
				break
			}
		}
	}
	ps, err := c.db.SalePayments(ctx, sale)
	if err != nil {
		t.Fatalf("reading payments: %v", err)
	}
	for id, p := range ps {
		if p.Outcome == "honoured_late" {
			lateHonoured[id] = true
		}
	}
	testwait.For(10*time.Second, func() bool { // the re-sync's last delivery
		b, _ := c.rdb.HGet(ctx, lua.SaleKey(sale), "booked").Int64()
		return checkPayments(payFinal{Total: f.Total, Orders: f.Orders, Booked: b}, nil).BookedDiffersFromDB == 0
	})
	f.Booked, _ = c.rdb.HGet(ctx, lua.SaleKey(sale), "booked").Int64()
	f.Buyers, _ = c.rdb.HGetAll(ctx, lua.BuyersKey(sale)).Result()
	refunds := map[string]int{}
	for _, rf := range stand.Refunds() {
		refunds[rf.PaymentIntent]++
	}
	for _, in := range stand.Intents() {
		f.Intents = append(f.Intents, payIntent{ID: in.ID, OrderID: in.Metadata["order_id"], Status: in.Status, Refunds: refunds[in.ID]})
	}
	r.requests = int(requests.Load())
	v := checkPayments(f, lateHonoured)
	r.history = v.String()
	r.rows = len(f.Orders)
	r.happened = fmt.Sprintf("%d buyers then %d more; %d orders, %d late payments; took %v", payUnits+20, len(second), len(f.Orders), len(late), time.Since(start).Round(time.Second))
	t.Log("payments: " + v.String())
	for _, p := range v.problems {
		problem("%s", p)
	}
	if !v.ok() && len(v.problems) == 0 {
		problem("payments: %s", v.String())
	}
	if v.Late == 0 || v.Refunded == 0 {
		problem("the scenario exercised no late honour (%d) or no late refund (%d)", v.Late, v.Refunded)
	}
	return r
}
