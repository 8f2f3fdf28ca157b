package gateway

import (
	"encoding/json"
	"io/fs"
	"strconv"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/static"
)

// TestOpenAPIDescribesEveryRoute checks static/gateway/openapi.json against
// the router: every described operation reaches its route (not "other") and
// answers with a status the description lists; every route the router
// counts (routeNames, but "other") is reached by some described operation;
// and the description is served at /api/openapi.json.
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	raw, err := fs.ReadFile(static.Gateway, "gateway/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		OpenAPI string `json:"openapi"`
		Paths   map[string]map[string]struct {
			Responses map[string]json.RawMessage `json:"responses"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(raw, &spec); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	if !strings.HasPrefix(spec.OpenAPI, "3.") || len(spec.Paths) == 0 {
		t.Fatalf("openapi.json: got openapi %q with %d paths, want 3.x with paths", spec.OpenAPI, len(spec.Paths))
	}

	e := newEnv(t, func(c *Config) { c.UserRate = -1 })
	e.sale(t, "open1", 5, 8, true)
	e.orders.orders["ord-a"] = flashgate.Order{ID: "ord-a", SaleID: "open1", UserID: "alice", Status: flashgate.StatusPendingPayment}
	alice := token(t, "alice")
	params := strings.NewReplacer("{id}", "open1", "{order_id}", "ord-a", "{file}", "buy.js")

	reached := map[int]bool{}
	for path, ops := range spec.Paths {
		for method, op := range ops {
			var rq fasthttp.Request
			req{method: strings.ToUpper(method), path: params.Replace(path), token: alice}.request(&rq)
			var ctx fasthttp.RequestCtx
			ctx.Init(&rq, nil, nil)
			route := e.s.route(&ctx)
			reached[route] = true
			status := ctx.Response.StatusCode()
			if route == routeOther {
				t.Errorf("%s %s: the router counts it as \"other\", want a route of its own", method, path)
			}
			if _, ok := op.Responses[strconv.Itoa(status)]; !ok {
				t.Errorf("%s %s: got %d %s, which the description does not list", method, path, status, ctx.Response.Body())
			}
		}
	}
	for r := range numRoutes {
		if r != routeOther && !reached[r] {
			t.Errorf("route %q is not in static/gateway/openapi.json", routeNames[r])
		}
	}

	r := do(e.s.Handler(), req{method: "GET", path: "/api/openapi.json"})
	if r.StatusCode() != 200 || string(r.Header.ContentType()) != "application/json" || string(r.Body()) != string(raw) {
		t.Errorf("GET /api/openapi.json: got %d %q, want 200 application/json and the description", r.StatusCode(), r.Header.ContentType())
	}
}
