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
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stripe/stripe-go/v82"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/stripelocal"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/lua"
)

// paymentsRaceScenario: two actors on one payment at once, everywhere a
// payment can be raced, with two gateways and two control planes: each
// success delivered to both gateways at the same moment (and once more
// under another event id), admin refunds racing the success, admin
// refunds of payments in flight, and late successes delivered to both
// gateways while the leader's reconciliation settles them too. Judged by
// the payments' model (history_payment.go): each succeeded charge paid or
// refunded, never both, never neither; no refund of a live order; live
// units within the stock; Redis booked equal to the live units.
var paymentsRaceScenario = scenario{name: "payments-race",
	fault: "two gateways and two control planes: each webhook to both gateways at once, admin refunds racing successes and payments in flight, " +
		"late successes racing the leader's reconciliation (PostgreSQL)",
	opts: clusterOpts{postgres: true, controlPlanes: 2}, own: paymentsRaceRun}

const raceUnits = 40

func paymentsRaceRun(t *testing.T, s *suite, sc scenario) (r result) {
	r = result{name: sc.name, fault: sc.fault, outage: "–", recovery: "–"}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	stand := stripelocal.New("sk_test_race", "whsec_race")
	ts := httptest.NewServer(stand)
	defer ts.Close()
	o := sc.opts
	o.env = []string{"FLASHGATE_PAYMENTS=stripe", "FLASHGATE_STRIPE_KEY=" + stand.Key, "FLASHGATE_STRIPE_WEBHOOK_SECRET=" + stand.WebhookSecret,
		"FLASHGATE_STRIPE_API_BASE=" + ts.URL, "FLASHGATE_PAYMENT_WINDOW=" + payWindow.String(), "FLASHGATE_PAYMENT_GRACE=" + payGrace.String()}
	c := s.startCluster(t, sc.name, o)
	const sale = "race-sale"
	c.openSale(ctx, sale, raceUnits)
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
	// hook delivers one event to gateway g until it is taken.
	hook := func(g int, evID, typ, intent string) {
		ev := stand.Event(evID, typ, intent, "")
		for try := 0; try < 20; try++ {
			code, _ := call("POST", c.gwURL[g%len(c.gwURL)]+"/webhooks/stripe", "", ev, map[string]string{"Stripe-Signature": stand.Sign(ev, time.Now())})
			if code == 200 {
				return
			}
			time.Sleep(200 * time.Millisecond) // the provider's retry
		}
		problem("webhook %s never accepted", evID)
	}
	// both delivers a success to both gateways at the same moment, and
	// once more under another id.
	both := func(order, intent string) {
		var wg sync.WaitGroup
		for g := range 2 {
			wg.Add(1)
			go func() { defer wg.Done(); hook(g, "evt_ok_"+order, flashgate.EventIntentSucceeded, intent) }()
		}
		wg.Add(1)
		go func() { defer wg.Done(); hook(1, "evt_ok2_"+order, flashgate.EventIntentSucceeded, intent) }()
		wg.Wait()
	}
	refund := func(order string) {
		for try := 0; try < 20; try++ {
			err := c.adminDo(ctx, "POST", "/admin/orders/"+order+"/refund", nil, nil)
			if err == nil {
				return
			}
			time.Sleep(200 * time.Millisecond) // 503: the provider unreachable, asked again
		}
	}
	type buyer struct{ user, tok, order string }
	var buyers []buyer
	for i := range raceUnits + 10 {
		b := buyer{user: "race-" + strconv.Itoa(i)}
		b.tok = token(b.user)
		code, body := call("POST", c.gwURL[i%2]+"/api/sales/"+sale+"/orders", b.tok, nil, nil)
		r.requests++
		if code == 201 {
			b.order, _ = body["order_id"].(string)
			buyers = append(buyers, b)
		}
	}
	r.created = len(buyers)
	for _, b := range buyers {
		if _, ok := testwait.For(30*time.Second, func() bool { _, err := c.db.Order(ctx, b.order); return err == nil }); !ok {
			problem("order %s never stored", b.order)
		}
	}
	start := time.Now()
	var (
		wg   sync.WaitGroup
		late []buyer
		n    [4]int
	)
	for i, b := range buyers {
		kind := i % 4
		if kind == 3 { // the checkout's answer lost; succeeds after expiry
			late = append(late, b)
			n[kind]++
			continue
		}
		_, body := call("POST", c.gwURL[i%2]+"/api/orders/"+b.order+"/pay", b.tok, nil, nil)
		pi, _ := body["payment_intent"].(string)
		if pi == "" {
			problem("pay %s: %v", b.order, body)
			continue
		}
		n[kind]++
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch kind {
			case 0: // paid; the success to both gateways at once
				stand.SetStatus(pi, "succeeded")
				both(b.order, pi)
			case 1: // an admin refund racing the success
				var race sync.WaitGroup
				race.Add(2)
				go func() { defer race.Done(); stand.SetStatus(pi, "succeeded"); both(b.order, pi) }()
				go func() { defer race.Done(); refund(b.order) }()
				race.Wait()
			case 2: // an admin refund of a payment in flight, which then tries to succeed
				refund(b.order)
				stand.SetStatus(pi, "succeeded")
				both(b.order, pi)
			}
		}()
	}
	// The late ones expire, then their payments succeed, delivered to
	// both gateways while the leader reconciles them.
	for _, b := range late {
		if _, ok := testwait.For(60*time.Second, func() bool {
			o, err := c.db.Order(ctx, b.order)
			return err == nil && o.Status == flashgate.StatusExpired
		}); !ok {
			problem("order %s never expired", b.order)
		}
	}
	sc2 := stripe.NewClient(stand.Key, stripe.WithBackends(stripe.NewBackendsWithConfig(&stripe.BackendConfig{
		URL: stripe.String(ts.URL), LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull}})))
	for _, b := range late {
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
		go func() { defer wg.Done(); both(b.order, pi.ID) }()
	}
	wg.Wait()
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
	f := payFinal{Total: raceUnits, Orders: map[string]flashgate.Order{}}
	for _, st := range []flashgate.OrderStatus{flashgate.StatusPaid, flashgate.StatusPendingPayment, flashgate.StatusExpired, flashgate.StatusCancelled, flashgate.StatusRefunded} {
		page, err := c.db.OrdersPage(ctx, sale, st, "", 1000)
		if err != nil {
			t.Fatalf("reading orders: %v", err)
		}
		for _, o := range page {
			f.Orders[o.ID] = o
		}
	}
	ps, err := c.db.SalePayments(ctx, sale)
	if err != nil {
		t.Fatalf("reading payments: %v", err)
	}
	lateHonoured := map[string]bool{}
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
	// An order refunded by an admin holds no money: its intent is
	// canceled, or refunded once.
	for _, in := range f.Intents {
		if o, ok := f.Orders[in.OrderID]; ok && o.Status == flashgate.StatusRefunded && in.Status == "succeeded" && in.Refunds != 1 {
			problem("order %s refunded, its intent %s succeeded with %d refunds", o.ID, in.ID, in.Refunds)
		}
	}
	v := checkPayments(f, lateHonoured)
	r.history = v.String()
	r.rows = len(f.Orders)
	r.happened = fmt.Sprintf("%d orders: %d paid with the success to both gateways, %d admin refunds racing the success, %d of payments in flight, %d late; took %v",
		len(buyers), n[0], n[1], n[2], n[3], time.Since(start).Round(time.Second))
	t.Log("payments-race: " + v.String())
	for _, p := range v.problems {
		problem("%s", p)
	}
	if !v.ok() && len(v.problems) == 0 {
		problem("payments: %s", v.String())
	}
	return r
}
