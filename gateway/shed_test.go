package gateway

import (
	"context"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/flashgate/flashgate/internal/testenv/testwait"
)

// heldReserver is a Reserver whose calls wait, once entered, until hold
// is closed.
type heldReserver struct {
	next    Reserver
	entered chan struct{}
	hold    chan struct{}
}

func (r *heldReserver) Reserve(ctx context.Context, saleID, userID, variant string, qty int64) (string, error) {
	r.entered <- struct{}{}
	<-r.hold
	return r.next.Reserve(ctx, saleID, userID, variant, qty)
}

// TestShedOverReserveLimit: with the adaptive limit at 1 and one reserve
// in flight, a second purchase is answered 503 unavailable at once with a
// Retry-After of 1–3 s, its admission given back and counted "shed"; the
// cheap answers (sold out, pages) are not shed; once the reserve returns,
// purchases go through again.
func TestShedOverReserveLimit(t *testing.T) {
	held := &heldReserver{entered: make(chan struct{}, 1), hold: make(chan struct{})}
	e := newEnv(t, func(c *Config) {
		held.next = c.Reserver
		c.Reserver = held
		c.UserRate = -1
		c.ReserveLimit = 1
	})
	h := e.s.Handler()
	e.sale(t, "big", 100, 200, true)
	e.sale(t, "none", 0, 0, true)

	first := make(chan *fasthttp.Response, 1)
	go func() { first <- do(h, req{method: "POST", path: "/api/sales/big/orders", token: token(t, "u1")}) }()
	<-held.entered

	s := e.s.lookup([]byte("big"))
	before := s.admitted.Load()
	r := do(h, req{method: "POST", path: "/api/sales/big/orders", token: token(t, "u2")})
	if r.StatusCode() != 503 || errCode(r) != "unavailable" {
		t.Fatalf("over the limit: got %d %s, want 503 unavailable", r.StatusCode(), r.Body())
	}
	if ra := string(r.Header.Peek("Retry-After")); ra != "1" && ra != "2" && ra != "3" {
		t.Errorf("got Retry-After %q, want 1, 2 or 3", ra)
	}
	if got := s.admitted.Load(); got != before {
		t.Errorf("got %d admitted after the shed purchase, want %d (its admission given back)", got, before)
	}
	if got := metricValue(t, e, "flashgate_admission_total", "shed"); got != 1 {
		t.Errorf("got %v shed decisions, want 1", got)
	}
	if got := metricValue(t, e, "flashgate_reserve_inflight", ""); got != 1 {
		t.Errorf("got flashgate_reserve_inflight %v, want 1", got)
	}
	if got := metricValue(t, e, "flashgate_reserve_limit", ""); got != 1 {
		t.Errorf("got flashgate_reserve_limit %v, want 1", got)
	}
	// Cheap answers are never shed.
	if r := do(h, req{method: "POST", path: "/api/sales/none/orders", token: token(t, "u3")}); r.StatusCode() != 409 || errCode(r) != "sold_out" {
		t.Errorf("sold out while the limit is full: got %d %s, want 409 sold_out", r.StatusCode(), r.Body())
	}
	if r := do(h, req{method: "GET", path: "/sales/big"}); r.StatusCode() != 200 {
		t.Errorf("item page while the limit is full: got %d, want 200", r.StatusCode())
	}

	close(held.hold)
	if r := <-first; r.StatusCode() != 201 {
		t.Fatalf("the held purchase: got %d %s, want 201", r.StatusCode(), r.Body())
	}
	testwait.Eventually(t, 5*time.Second, func() bool { return e.s.reserves.Inflight() == 0 }, "reserve still in flight")
	go func() { <-held.entered }()
	if r := do(h, req{method: "POST", path: "/api/sales/big/orders", token: token(t, "u2")}); r.StatusCode() != 201 {
		t.Fatalf("after the reserve returned: got %d %s, want 201", r.StatusCode(), r.Body())
	}
}

// metricValue returns the value of the series name (a counter or gauge)
// whose one label's value is label ("" for none).
func metricValue(t *testing.T, e *env, name, label string) float64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if l := m.GetLabel(); label == "" && len(l) == 0 || len(l) == 1 && l[0].GetValue() == label {
				return m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no series %s{%s}", name, label)
	return 0
}
