package admin

import (
	"encoding/json"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/flashgate/flashgate/static"
)

// openAPIOp is what the test reads of one operation of an OpenAPI
// description.
type openAPIOp struct {
	Responses   map[string]json.RawMessage `json:"responses"`
	RequestBody *struct {
		Content map[string]struct {
			Example json.RawMessage `json:"example"`
		} `json:"content"`
	} `json:"requestBody"`
}

var pathParam = regexp.MustCompile(`\{[^}]*\}`)

// TestOpenAPIDescribesEveryRoute checks static/admin/openapi.json against
// the router: every pattern Handler registers is described, every described
// route answers on the real handler with a status the description lists,
// and the description is served at /admin/openapi.json without a token.
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	raw, err := fs.ReadFile(static.Admin, "admin/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		OpenAPI string                          `json:"openapi"`
		Paths   map[string]map[string]openAPIOp `json:"paths"`
	}
	if err := json.Unmarshal(raw, &spec); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	if !strings.HasPrefix(spec.OpenAPI, "3.") {
		t.Fatalf("openapi.json: got openapi %q, want 3.x", spec.OpenAPI)
	}
	described := map[string]bool{}
	for path, ops := range spec.Paths {
		for method := range ops {
			described[strings.ToUpper(method)+" "+pathParam.ReplaceAllString(path, "{}")] = true
		}
	}

	e := newEnv(t, sqliteDSN(t), nil)
	mux, ok := e.handler().(*routeMux)
	if !ok {
		t.Fatalf("Handler() is %T, want *routeMux (its patterns are the route table)", e.handler())
	}
	registered := map[string]bool{}
	for _, p := range mux.Patterns() {
		registered[pathParam.ReplaceAllString(p, "{}")] = true
	}
	for r := range registered {
		if !described[r] {
			t.Errorf("route %s is not in static/admin/openapi.json", r)
		}
	}
	for d := range described {
		if !registered[d] {
			t.Errorf("static/admin/openapi.json describes %s, which the router does not register", d)
		}
	}

	// Every described operation answers with a documented status. Creating
	// the sale comes first, so that the other sale routes find it.
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	c := client{t, srv.URL}
	type call struct{ method, path string }
	var calls []call
	for path, ops := range spec.Paths {
		for method := range ops {
			calls = append(calls, call{strings.ToUpper(method), path})
		}
	}
	slices.SortFunc(calls, func(a, b call) int {
		first := func(c call) bool { return c.method == "POST" && c.path == "/admin/sales" }
		switch {
		case first(a) && !first(b):
			return -1
		case first(b) && !first(a):
			return 1
		}
		return strings.Compare(a.method+a.path, b.method+b.path)
	})
	for _, cl := range calls {
		op := spec.Paths[cl.path][strings.ToLower(cl.method)]
		body := ""
		if op.RequestBody != nil {
			body = string(op.RequestBody.Content["application/json"].Example)
		}
		url := strings.NewReplacer("{id}", "spring-drop", "{order_id}", "no-such-order").Replace(cl.path)
		req, _ := http.NewRequest(cl.method, srv.URL+url, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testToken)
		res, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if _, ok := op.Responses[strconv.Itoa(res.StatusCode)]; !ok {
			t.Errorf("%s %s: got %d, which the description does not list", cl.method, url, res.StatusCode)
		}
		if res.StatusCode == 404 && strings.HasPrefix(url, "/admin/sales") && !strings.Contains(res.Header.Get("Content-Type"), "json") {
			t.Errorf("%s %s: got the router's 404, want the route's answer", cl.method, url)
		}
	}
	if code, body, _ := c.do("GET", "/admin/openapi.json", "", ""); code != 200 || body["openapi"] != spec.OpenAPI {
		t.Errorf("GET /admin/openapi.json without a token: got %d, want 200 and the description", code)
	}
}
