package admin

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/lua"
)

type client struct {
	t    *testing.T
	base string
}

// do sends a request with token (none when "") and returns the status and
// the decoded JSON body (nil when not JSON).
func (c client) do(method, path, token, body string) (int, map[string]any, string) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	return res.StatusCode, m, string(raw)
}

func keys(m map[string]any) string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return strings.Join(ks, ",")
}

func TestAdminUnauthorized(t *testing.T) {
	e := newEnv(t, sqliteDSN(t), nil)
	srv := httptest.NewServer(e.handler())
	t.Cleanup(srv.Close)
	c := client{t, srv.URL}
	routes := []struct{ method, path string }{
		{"POST", "/admin/sales"}, {"GET", "/admin/sales"}, {"GET", "/admin/sales/x"},
		{"POST", "/admin/sales/x/start"}, {"POST", "/admin/sales/x/stop"},
		{"POST", "/admin/sales/x/resync"}, {"POST", "/admin/orders/o1/refund"},
	}
	for _, r := range routes {
		for _, tok := range []string{"", "wrong", testToken + "x", strings.ToUpper(testToken)} {
			code, body, _ := c.do(r.method, r.path, tok, `{}`)
			if code != http.StatusUnauthorized || body["error"] != "unauthorized" || len(body) != 1 {
				t.Errorf("%s %s with token %q: got %d %v, want 401 {error: unauthorized}", r.method, r.path, tok, code, body)
			}
		}
	}
	// Basic scheme other than Bearer is refused too.
	req, _ := http.NewRequest("GET", srv.URL+"/admin/sales", nil)
	req.Header.Set("Authorization", "Basic "+testToken)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Errorf("Basic auth: got %d, want 401", res.StatusCode)
	}
	for _, p := range []string{"/metrics", "/healthz", "/readyz", "/admin/", "/admin/admin.js"} {
		if code, _, _ := c.do("GET", p, "", ""); code != http.StatusOK {
			t.Errorf("GET %s without token: got %d, want 200", p, code)
		}
	}
}

func TestAdminRoutes(t *testing.T) {
	e := newEnv(t, sqliteDSN(t), nil)
	srv := httptest.NewServer(e.handler())
	t.Cleanup(srv.Close)
	c := client{t, srv.URL}
	tok := testToken

	steps := []struct {
		name, method, path, body string
		wantCode                 int
		wantKeys                 string // comma-separated sorted keys; "" to skip
		check                    func(map[string]any) error
	}{
		{"create", "POST", "/admin/sales", `{"id":"s1","name":"Shoes","price_cents":1999,"total":3,"starts_at":"2030-05-01T13:00:00Z","ends_at":null}`,
			201, "ends_at,id,name,price_cents,starts_at,state,total", func(m map[string]any) error {
				if m["state"] != "upcoming" || m["total"] != 3.0 || m["starts_at"] != "2030-05-01T13:00:00Z" {
					return errors.New("wrong sale")
				}
				return nil
			}},
		{"create again", "POST", "/admin/sales", `{"id":"s1","name":"Shoes","price_cents":1,"total":3}`, 409, "error", errCode("exists")},
		{"bad id", "POST", "/admin/sales", `{"id":"a b","name":"x","total":3}`, 400, "error,field", errField("id")},
		{"no name", "POST", "/admin/sales", `{"id":"s2","total":3}`, 400, "error,field", errField("name")},
		{"long name", "POST", "/admin/sales", `{"id":"s2","name":"` + strings.Repeat("n", 201) + `","total":3}`, 400, "error,field", errField("name")},
		{"negative price", "POST", "/admin/sales", `{"id":"s2","name":"x","price_cents":-1,"total":3}`, 400, "error,field", errField("price_cents")},
		{"price over a payment's amount", "POST", "/admin/sales", `{"id":"s2","name":"x","price_cents":4611686018427387917,"total":4,"per_user":4}`, 400, "error,field", errField("price_cents")},
		{"price × per_user over a payment's amount", "POST", "/admin/sales", `{"id":"s2","name":"x","price_cents":250000000000,"total":4,"per_user":4}`, 400, "error,field", errField("price_cents")},
		{"zero total", "POST", "/admin/sales", `{"id":"s2","name":"x","total":0}`, 400, "error,field", errField("total")},
		{"huge total", "POST", "/admin/sales", `{"id":"s2","name":"x","total":1000001}`, 400, "error,field", errField("total")},
		{"total as text", "POST", "/admin/sales", `{"id":"s2","name":"x","total":"3"}`, 400, "error,field", errField("total")},
		{"ratio below 1", "POST", "/admin/sales", `{"id":"s2","name":"x","total":3,"admit_ratio":0.5}`, 400, "error,field", errField("admit_ratio")},
		{"per_user over total", "POST", "/admin/sales", `{"id":"s2","name":"x","total":3,"per_user":4}`, 400, "error,field", errField("per_user")},
		{"bad starts_at", "POST", "/admin/sales", `{"id":"s2","name":"x","total":3,"starts_at":"tomorrow"}`, 400, "error,field", errField("starts_at")},
		{"ends before start", "POST", "/admin/sales", `{"id":"s2","name":"x","total":3,"starts_at":"2030-05-01T13:00:00Z","ends_at":"2030-05-01T12:00:00Z"}`, 400, "error,field", errField("ends_at")},
		{"buckets over 64", "POST", "/admin/sales", `{"id":"s2","name":"x","total":300,"buckets":65}`, 400, "error,field", errField("buckets")},
		{"buckets over total", "POST", "/admin/sales", `{"id":"s2","name":"x","total":3,"buckets":4}`, 400, "error,field", errField("buckets")},
		{"bucketed", "POST", "/admin/sales", `{"id":"b3","name":"Hot","total":10,"buckets":3}`,
			201, "bucket_salts,buckets,ends_at,id,name,price_cents,starts_at,state,total", func(m map[string]any) error {
				if salts, _ := m["bucket_salts"].([]any); m["buckets"] != 3.0 || len(salts) != 3 {
					return errors.New("wrong buckets")
				}
				return nil
			}},
		{"status bucketed", "GET", "/admin/sales/b3", "", 200,
			"admission_cap,admitted,booked,bucket_figures,bucket_salts,buckets,id,name,orders,rejected,remaining,reserved,state,stream_backlog,total", func(m map[string]any) error {
				if figs, _ := m["bucket_figures"].([]any); len(figs) != 3 || m["remaining"] != 10.0 {
					return errors.New("wrong bucket figures")
				}
				return nil
			}},
		{"not json", "POST", "/admin/sales", `{"id":`, 400, "error,field", errField("body")},
		{"too large", "POST", "/admin/sales", `{"name":"` + strings.Repeat("x", 70<<10) + `"}`, 413, "error", errCode("too_large")},
		{"status upcoming", "GET", "/admin/sales/s1", "", 200,
			"admission_cap,admitted,booked,id,name,orders,rejected,remaining,reserved,state,stream_backlog,total", func(m map[string]any) error {
				o, _ := m["orders"].(map[string]any)
				if keys(o) != "cancelled,expired,paid,pending_payment,persisted,refunded" {
					return errors.New("orders keys " + keys(o))
				}
				if m["state"] != "upcoming" || m["remaining"] != 3.0 || m["admission_cap"] != 4.0 {
					return errors.New("wrong figures")
				}
				return nil
			}},
		{"status unknown", "GET", "/admin/sales/nope", "", 404, "error", errCode("not_found")},
		{"status bad id", "GET", "/admin/sales/a.b", "", 404, "error", errCode("not_found")},
		{"start", "POST", "/admin/sales/s1/start", "", 200, "", stateIs("open")},
		{"start unknown", "POST", "/admin/sales/nope/start", "", 404, "error", errCode("not_found")},
		{"resync", "POST", "/admin/sales/s1/resync", "", 200, "after,before", func(m map[string]any) error {
			a, _ := m["after"].(map[string]any)
			if keys(a) != "admission_cap,admitted,booked,remaining,reserved,total" || a["remaining"] != 3.0 {
				return errors.New("after " + keys(a))
			}
			return nil
		}},
		{"resync unknown", "POST", "/admin/sales/nope/resync", "", 404, "error", errCode("not_found")},
		{"refund unknown", "POST", "/admin/orders/nope/refund", "", 404, "error", errCode("not_found")},
		{"list", "GET", "/admin/sales", "", 200, "", nil},
	}
	for _, s := range steps {
		code, body, raw := c.do(s.method, s.path, tok, s.body)
		if code != s.wantCode {
			t.Errorf("%s: %s %s: got %d %s, want %d", s.name, s.method, s.path, code, raw, s.wantCode)
			continue
		}
		if s.wantKeys != "" && keys(body) != s.wantKeys {
			t.Errorf("%s: got keys %s, want %s", s.name, keys(body), s.wantKeys)
		}
		if s.check != nil {
			if err := s.check(body); err != nil {
				t.Errorf("%s: %v in %s", s.name, err, raw)
			}
		}
	}
	_, _, raw := c.do("GET", "/admin/sales", tok, "")
	var list []flashgate.Sale
	if err := json.Unmarshal([]byte(raw), &list); err != nil || len(list) != 2 || list[0].ID != "b3" || list[1].ID != "s1" {
		t.Fatalf("list: got %s (%v), want sales b3 and s1", raw, err)
	}
	if list[0].Buckets != 3 || len(list[0].BucketSalts) != 3 || list[1].Buckets != 0 {
		t.Errorf("list: got buckets %d %v and %d, want 3 with 3 salts, and none", list[0].Buckets, list[0].BucketSalts, list[1].Buckets)
	}

	// A purchase, persisted, refunded: the unit comes back.
	rc, oid := e.reserve("s1", "u1")
	if rc != lua.ReserveOK {
		t.Fatalf("reserve: code %d", rc)
	}
	if code, _, raw := c.do("POST", "/admin/orders/"+oid+"/refund", tok, ""); code != 404 {
		t.Errorf("refund of an order not yet persisted: got %d %s, want 404", code, raw)
	}
	e.persist("s1")
	code, body, raw := c.do("POST", "/admin/orders/"+oid+"/refund", tok, "")
	if code != 200 || body["status"] != "refunded" || body["order_id"] != oid || body["user_id"] != "u1" {
		t.Errorf("refund: got %d %s, want 200 refunded", code, raw)
	}
	if code, body, _ := c.do("POST", "/admin/orders/"+oid+"/refund", tok, ""); code != 200 || body["status"] != "refunded" {
		t.Errorf("refund again: got %d %v, want 200 refunded", code, body)
	}
	if got := field(t, e.rdb, "s1", lua.FieldBooked); got != 0 {
		t.Errorf("booked after refund = %d, want 0", got)
	}
	code, body, raw = c.do("GET", "/admin/sales/s1", tok, "")
	if o, _ := body["orders"].(map[string]any); code != 200 || o["refunded"] != 1.0 || o["persisted"] != 1.0 {
		t.Errorf("status after refund: %d %s", code, raw)
	}
	if code, _, _ := c.do("POST", "/admin/sales/s1/stop", tok, ""); code != 200 {
		t.Errorf("stop: got %d", code)
	}
	code, body, raw = c.do("GET", "/admin/sales/s1", tok, "")
	if st, _ := body["settlement"].(map[string]any); code != 200 || body["state"] != "closed" || st["settled"] != true || st["difference"] != 0.0 {
		t.Errorf("status after stop: %d %s, want closed with a settled settlement", code, raw)
	}
	// The deployment's figures are the leader's alone (metrics.go).
	_, _, metrics := c.do("GET", "/metrics", "", "")
	for _, leaderOnly := range []string{"flashgate_orders{", "flashgate_sale_booked{", "flashgate_stream_backlog{", "flashgate_settlement_difference{"} {
		if strings.Contains(metrics, leaderOnly) {
			t.Errorf("/metrics of a control plane that does not lead has %s…}, want none", leaderOnly)
		}
	}
	e.lead()
	_, _, metrics = c.do("GET", "/metrics", "", "")
	for _, want := range []string{`flashgate_orders{status="refunded"} 1`, `flashgate_refunds_total 1`, `flashgate_sale_booked{sale="s1"} 0`,
		`flashgate_sale_admitted{sale="s1"}`, `flashgate_stream_backlog{sale="s1"} 0`, `flashgate_resync_total`, `flashgate_expired_total 0`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func errCode(want string) func(map[string]any) error {
	return func(m map[string]any) error {
		if m["error"] != want {
			return errors.New("error code is not " + want)
		}
		return nil
	}
}

func errField(want string) func(map[string]any) error {
	return func(m map[string]any) error {
		if m["error"] != "bad_request" || m["field"] != want {
			return errors.New("not bad_request on field " + want)
		}
		return nil
	}
}

func stateIs(want string) func(map[string]any) error {
	return func(m map[string]any) error {
		if m["state"] != want {
			return errors.New("state is not " + want)
		}
		return nil
	}
}

// TestAdminFairSale: POST /admin/sales takes a fair queue's settings and
// answers them; a bad one is 400 naming the field; GET /admin/sales/{id}
// carries the queue's figures.
func TestAdminFairSale(t *testing.T) {
	e := newEnv(t, sqliteDSN(t), nil)
	srv := httptest.NewServer(e.handler())
	t.Cleanup(srv.Close)
	c := client{t, srv.URL}
	code, m, raw := c.do("POST", "/admin/sales", testToken, `{"id":"f1","name":"Fair","price_cents":1,"total":3,"starts_at":"2030-05-01T13:00:00Z",
		"queue":"fair","prequeue_seconds":1200,"challenge_maxnumber":5000,"challenge_auto":false,"admit_per_minute":60,"admit_seconds":90}`)
	if code != 201 || m["queue"] != "fair" || m["prequeue_seconds"] != 1200.0 || m["challenge_maxnumber"] != 5000.0 ||
		m["challenge_auto"] != false || m["admit_per_minute"] != 60.0 || m["admit_seconds"] != 90.0 {
		t.Fatalf("create: got %d %s", code, raw)
	}
	code, m, raw = c.do("POST", "/admin/sales", testToken, `{"id":"f2","name":"Fair","total":3,"starts_at":"2030-05-01T13:00:00Z","queue":"fair","prequeue_seconds":90000}`)
	if code != 400 || m["field"] != "prequeue_seconds" {
		t.Errorf("a too long pre-queue: got %d %s, want 400 naming prequeue_seconds", code, raw)
	}
	code, m, raw = c.do("GET", "/admin/sales/f1", testToken, "")
	q, _ := m["queue"].(map[string]any)
	if code != 200 || q == nil || q["open"] != false || q["entrants"] != 0.0 || q["admitted_position"] != 0.0 {
		t.Errorf("status: got %d %s, want a closed queue with no entrants", code, raw)
	}
}

// TestAdminNonCanonicalPaths: a path not in its canonical form is 404
// not_found in JSON, with the token or without, on a route's path and on
// the dashboard's; it was the mux's 307 (HTML) to the cleaned path, before
// the token was checked.
func TestAdminNonCanonicalPaths(t *testing.T) {
	e := newEnv(t, sqliteDSN(t), nil)
	srv := httptest.NewServer(e.handler())
	t.Cleanup(srv.Close)
	cl := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	paths := []string{"/admin//sales", "/admin/./sales", "/admin/x/../sales", "//admin/sales", "/admin/sales/.",
		"/admin//", "/admin/./app.js", "/admin/sales//x", "//healthz", "/./metrics"}
	for _, p := range paths {
		for _, m := range []string{"GET", "POST"} {
			for _, tok := range []string{"", testToken} {
				req, _ := http.NewRequest(m, srv.URL+p, nil)
				if tok != "" {
					req.Header.Set("Authorization", "Bearer "+tok)
				}
				res, err := cl.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				raw, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if res.StatusCode != 404 || string(raw) != `{"error":"not_found"}`+"\n" || res.Header.Get("Content-Type") != "application/json" {
					t.Errorf("%s %s (token %v): got %d %q (%s), want 404 JSON not_found", m, p, tok != "", res.StatusCode, raw, res.Header.Get("Content-Type"))
				}
			}
		}
	}
}
