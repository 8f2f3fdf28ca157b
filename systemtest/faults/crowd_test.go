//go:build faults

package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// attempt is one HTTP request a buyer sent.
type attempt struct {
	gw         int // index of the gateway it went to
	start, end time.Time
	status     int    // 0: no answer (connection refused, reset, timeout)
	code       string // the answer's "error" field, or the transport error
	unsent     bool   // no answer, and the request never reached the gateway (a failed dial)
}

// failed reports whether the attempt got no answer or a 5xx.
func (a attempt) failed() bool { return a.status == 0 || a.status >= 500 }

// outcome is what one buyer ended with.
type outcome struct {
	user     string
	final    string // "201", "409 sold_out", "gave up: 503 unavailable", …
	orderID  string // from a 201, or a 409 already_purchased naming the buyer's order
	attempts []attempt
}

// crowd is n distinct buyers (prefix0 … prefix<n-1>) arriving evenly over
// spread, each pressing "buy" once and retrying as a real buyer behind a
// load balancer would: on no answer or a 5xx it tries again after a back-off
// on the other gateway, on 429 after Retry-After; a 201, or a 409
// already_purchased carrying an order id, is the buyer's order.
type crowd struct {
	c        *cluster
	sale     string
	prefix   string
	n        int
	spread   time.Duration
	inFlight int           // most requests in flight (default 128)
	budget   time.Duration // how long one buyer keeps trying (default 20s)
	// pay and cancel, when not 0: buyer i with an order pays it when
	// i%pay == 1 and cancels it when i%cancel == 2, right after buying.
	pay, cancel int
	// variant, when set, is the variant buyer i asks for: the purchase
	// body names it, and the history records it.
	variant func(i int) string

	done atomic.Int64 // buyers with a final answer
}

const maxAttempts = 12

func (cr *crowd) run(ctx context.Context) []outcome {
	if cr.inFlight == 0 {
		cr.inFlight = 128
	}
	if cr.budget == 0 {
		cr.budget = 20 * time.Second
	}
	client := &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{MaxIdleConns: 2 * cr.inFlight, MaxIdleConnsPerHost: cr.inFlight, IdleConnTimeout: 30 * time.Second},
	}
	defer client.CloseIdleConnections()
	sem := make(chan struct{}, cr.inFlight)
	out := make([]outcome, cr.n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < cr.n; i++ {
		if cr.spread > 0 {
			if d := time.Until(start.Add(cr.spread * time.Duration(i) / time.Duration(cr.n))); d > 0 {
				select {
				case <-time.After(d):
				case <-ctx.Done():
				}
			}
		}
		if ctx.Err() != nil {
			break
		}
		user := cr.prefix + strconv.Itoa(i)
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
			"sub": user, "exp": time.Now().Add(time.Hour).Unix(),
		}).SignedString(cr.c.jwt)
		if err != nil {
			panic(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = cr.buy(ctx, client, sem, i, user, tok)
			cr.done.Add(1)
			if id := out[i].orderID; id != "" {
				switch {
				case cr.cancel > 0 && i%cr.cancel == 2:
					cr.orderOp(ctx, client, sem, i, user, tok, hCancel, id)
				case cr.pay > 0 && i%cr.pay == 1:
					cr.orderOp(ctx, client, sem, i, user, tok, hPay, id)
				}
			}
		}()
	}
	wg.Wait()
	return out
}

func (cr *crowd) buy(ctx context.Context, client *http.Client, sem chan struct{}, i int, user, tok string) outcome {
	o := outcome{user: user}
	gw := i % len(cr.c.gwURL)
	deadline := time.Now().Add(cr.budget)
	backoff := 50 * time.Millisecond
	variant, body := "", ""
	if cr.variant != nil {
		variant = cr.variant(i)
		body = `{"variant":"` + variant + `"}`
	}
	for len(o.attempts) < maxAttempts && ctx.Err() == nil && time.Now().Before(deadline) {
		sem <- struct{}{}
		a := cr.send(ctx, client, gw, "/api/sales/"+cr.sale+"/orders", tok, body)
		<-sem
		cr.c.hist.recordPurchase(cr.sale, variant, user, a.orderID, a.status, a.code, !a.unsent, a.start, a.end)
		o.attempts = append(o.attempts, a.attempt)
		switch {
		case a.status == http.StatusCreated:
			if a.orderID == "" || a.userID != user || a.saleID != cr.sale {
				o.final = fmt.Sprintf("bad 201: order %q user %q sale %q", a.orderID, a.userID, a.saleID)
				return o
			}
			o.final, o.orderID = "201", a.orderID
			return o
		case a.status == http.StatusConflict && a.code == "already_purchased" && a.orderID != "":
			o.final, o.orderID = "409 already_purchased", a.orderID
			return o
		case a.status == http.StatusTooManyRequests:
			wait := time.Second // Retry-After, at least 100ms and at most 1s
			if s, err := strconv.Atoi(a.retryAfter); err == nil && s >= 0 {
				wait = min(max(time.Duration(s)*time.Second, 100*time.Millisecond), time.Second)
			}
			o.final = "gave up: 429 rate_limited"
			time.Sleep(wait) // not a synchronisation: the buyer honours Retry-After
			continue
		case a.failed():
			o.final = "gave up: " + a.label()
			gw = (gw + 1) % len(cr.c.gwURL) // the load balancer's next upstream
			time.Sleep(backoff)             // not a synchronisation: the buyer's backoff
			backoff = min(2*backoff, time.Second)
			continue
		}
		o.final = a.label()
		return o
	}
	return o
}

type answer struct {
	attempt
	orderID, userID, saleID string
	retryAfter              string
}

func (a attempt) label() string {
	if a.status == 0 {
		return "no answer"
	}
	return strings.TrimSpace(strconv.Itoa(a.status) + " " + a.code)
}

// orderOp pays or cancels (kind) the buyer's order id as a buyer would:
// on no answer or a 5xx again on the other gateway after a back-off, on
// 409 not_payable again after 500ms (the order may not be in the database
// yet), on 429 after Retry-After; at most 6 attempts within the budget.
// Every attempt goes into the history.
func (cr *crowd) orderOp(ctx context.Context, client *http.Client, sem chan struct{}, i int, user, tok string, kind hKind, id string) {
	gw := i % len(cr.c.gwURL)
	deadline := time.Now().Add(cr.budget)
	backoff := 50 * time.Millisecond
	for n := 0; n < 6 && ctx.Err() == nil && time.Now().Before(deadline); n++ {
		sem <- struct{}{}
		a := cr.send(ctx, client, gw, "/api/orders/"+id+"/"+hKindName[kind], tok, "")
		<-sem
		cr.c.hist.record(kind, cr.sale, user, id, a.status, a.code, !a.unsent, a.start, a.end)
		switch {
		case a.failed():
			gw = (gw + 1) % len(cr.c.gwURL)
			time.Sleep(backoff) // not a synchronisation: the buyer's backoff, as for the others below
			backoff = min(2*backoff, time.Second)
		case a.status == http.StatusConflict && a.code == "not_payable":
			time.Sleep(500 * time.Millisecond)
		case a.status == http.StatusTooManyRequests:
			time.Sleep(time.Second)
		default:
			return
		}
	}
}

// send POSTs path to gateway gw with the buyer's token, and reqBody when
// it is not "".
func (cr *crowd) send(ctx context.Context, client *http.Client, gw int, path, tok, reqBody string) answer {
	a := answer{attempt: attempt{gw: gw, start: time.Now()}}
	defer func() { a.end = time.Now() }()
	var rb io.Reader
	if reqBody != "" {
		rb = strings.NewReader(reqBody)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, cr.c.gwURL[gw]+path, rb)
	if err != nil {
		panic(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := client.Do(req)
	if err != nil {
		a.code = err.Error()
		a.unsent = !sentErr(err)
		a.end = time.Now()
		return a
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	a.end = time.Now()
	if err != nil {
		a.code = err.Error()
		return a
	}
	a.status = resp.StatusCode
	a.retryAfter = resp.Header.Get("Retry-After")
	var v struct {
		Error   string `json:"error"`
		OrderID string `json:"order_id"`
		UserID  string `json:"user_id"`
		SaleID  string `json:"sale_id"`
	}
	_ = json.Unmarshal(body, &v)
	a.code, a.orderID, a.userID, a.saleID = v.Error, v.OrderID, v.UserID, v.SaleID
	return a
}

// crowdStats summarises one crowd's answers.
type crowdStats struct {
	buyers     int
	requests   int
	orders     int            // buyers who ended with an order
	finals     map[string]int // final answer → buyers
	perAttempt map[string]int // every attempt's answer → count
	failed     int            // attempts with no answer or a 5xx
	outage     time.Duration  // longest window in which buyers got only failures
	firstFail  time.Time
	lastFail   time.Time
}

func stats(outs []outcome) crowdStats {
	st := crowdStats{finals: map[string]int{}, perAttempt: map[string]int{}}
	var all []attempt
	for _, o := range outs {
		if o.user == "" {
			st.finals["never sent"]++
			continue
		}
		st.buyers++
		st.finals[o.final]++
		if o.orderID != "" {
			st.orders++
		}
		for _, a := range o.attempts {
			st.requests++
			lbl := a.label()
			if a.status == 0 {
				lbl = "no answer"
			}
			st.perAttempt[lbl]++
			all = append(all, a)
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].end.Before(all[j].end) })
	open := false
	var ws time.Time
	for _, a := range all {
		if a.failed() {
			st.failed++
			if st.firstFail.IsZero() || a.start.Before(st.firstFail) {
				st.firstFail = a.start
			}
			if a.end.After(st.lastFail) {
				st.lastFail = a.end
			}
			if !open {
				open, ws = true, a.start
			}
			st.outage = max(st.outage, a.end.Sub(ws))
			continue
		}
		open = false
	}
	return st
}

// String lists a count map as "k=v, …", largest first.
func countList(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s=%d", k, m[k])
	}
	return b.String()
}
