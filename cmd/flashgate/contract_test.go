package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/static"
)

// contractSpec is what the contract test reads of an OpenAPI description.
type contractSpec struct {
	Paths map[string]map[string]struct {
		RequestBody *struct {
			Content map[string]struct {
				Schema struct {
					AdditionalProperties *bool  `json:"additionalProperties"`
					Ref                  string `json:"$ref"`
				} `json:"schema"`
				Example json.RawMessage `json:"example"`
			} `json:"content"`
		} `json:"requestBody"`
	} `json:"paths"`
	Components struct {
		Schemas map[string]struct {
			AdditionalProperties *bool `json:"additionalProperties"`
		} `json:"schemas"`
	} `json:"components"`
}

// TestContract runs `flashgate serve` against a real Redis and checks both
// listeners against their OpenAPI descriptions (static/*/openapi.json) and
// docs/api.md's error rules, route by route: every method a path does not
// describe is 405 method_not_allowed in JSON with Allow naming the ones it
// does; unknown paths are 404 not_found in JSON; a body with a field its
// schema does not have (additionalProperties: false) is 400 bad_request.
func TestContract(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	rs := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var errb bytes.Buffer
	const secret, adminTok = "contract-secret", "contract-admin"
	cfg, err := parseConfig("serve", []string{"--redis", rs.URL,
		"--db", "sqlite://" + filepath.Join(t.TempDir(), "fg.db"),
		"--jwt-secret", secret, "--admin-token", adminTok,
		"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
		"--state-refresh", "20ms", "--log-level", "error"}, &errb, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	st := newStack(cfg, &errb)
	t.Cleanup(st.close)
	_, _, g, public, admin, err := serveAll(ctx, st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.cancel(); _ = g.wait() })
	buyer, err := mintToken([]byte(secret), "contract-user", time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}

	type answer struct {
		status int
		header http.Header
		body   map[string]any
		raw    string
	}
	cl := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func(method, url, token, body string) answer {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		res, err := cl.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, url, err)
		}
		defer res.Body.Close()
		raw, _ := io.ReadAll(res.Body)
		a := answer{status: res.StatusCode, header: res.Header, raw: string(raw)}
		_ = json.Unmarshal(raw, &a.body)
		return a
	}
	// jsonError checks that a is status with {"error": code} in JSON.
	jsonError := func(what string, a answer, status int, code string) {
		t.Helper()
		if a.status != status || a.body["error"] != code || !strings.HasPrefix(a.header.Get("Content-Type"), "application/json") {
			t.Errorf("%s: got %d %q (%s), want %d JSON {\"error\":%q}", what, a.status, a.raw, a.header.Get("Content-Type"), status, code)
		}
	}

	// A sale open for the purchase route's checks.
	if a := do("POST", admin+"/admin/sales", adminTok, `{"id":"spring-drop","name":"Spring","price_cents":100,"total":5}`); a.status != 201 {
		t.Fatalf("create: %d %s", a.status, a.raw)
	}
	if a := do("POST", admin+"/admin/sales/spring-drop/start", adminTok, ""); a.status != 200 {
		t.Fatalf("start: %d %s", a.status, a.raw)
	}
	testwait.Eventually(t, 10*time.Second, func() bool {
		return do("GET", public+"/api/sales/spring-drop", "", "").body["state"] == "open"
	}, "the gateway to see the sale open")

	listeners := []struct {
		name, base, spec, token string
		unknown                 []string
	}{
		{"public", public, "gateway/openapi.json", buyer,
			[]string{"/nope", "/api/nope", "/api/sales/spring-drop/nope", "/static/nope.css", "/admin/sales", "/metrics",
				// Paths not in their canonical form name no route.
				"/api//sales/spring-drop", "/api/./sales/spring-drop", "//api/sales/spring-drop",
				"/api/sales/x/../spring-drop", "/static/./buy.js", "//healthz", "/api/sales/spring-drop/orders/"}},
		{"admin", admin, "admin/openapi.json", adminTok,
			[]string{"/nope", "/api/sales/spring-drop", "/admin/nope", "/admin/sales/spring-drop/nope", "/admin/orders/x",
				"/admin//sales", "/admin/./sales", "//admin/sales", "/admin/x/../sales", "/admin/sales/spring-drop/.", "//healthz"}},
	}
	params := strings.NewReplacer("{id}", "spring-drop", "{order_id}", "no-such-order", "{file}", "buy.js")
	for _, l := range listeners {
		var raw []byte
		var err error
		if l.name == "public" {
			raw, err = fs.ReadFile(static.Gateway, l.spec)
		} else {
			raw, err = fs.ReadFile(static.Admin, l.spec)
		}
		if err != nil {
			t.Fatal(err)
		}
		var spec contractSpec
		if err := json.Unmarshal(raw, &spec); err != nil {
			t.Fatal(err)
		}
		paths := make([]string, 0, len(spec.Paths))
		for p := range spec.Paths {
			paths = append(paths, p)
		}
		sort.Strings(paths)
		for _, path := range paths {
			ops := spec.Paths[path]
			url := l.base + params.Replace(path)
			var described []string
			for m := range ops {
				if m != "parameters" {
					described = append(described, strings.ToUpper(m))
				}
			}
			for _, m := range []string{"GET", "POST", "PUT", "PATCH", "DELETE"} {
				if slices.Contains(described, m) {
					continue
				}
				a := do(m, url, l.token, "")
				jsonError(l.name+" "+m+" "+path, a, 405, "method_not_allowed")
				allow := a.header.Get("Allow")
				for _, d := range described {
					if !strings.Contains(allow, d) {
						t.Errorf("%s %s %s: Allow %q lacks %s", l.name, m, path, allow, d)
					}
				}
			}
			for m, op := range ops {
				if op.RequestBody == nil {
					continue
				}
				c := op.RequestBody.Content["application/json"]
				closed := c.Schema.AdditionalProperties
				if ref, ok := strings.CutPrefix(c.Schema.Ref, "#/components/schemas/"); ok {
					closed = spec.Components.Schemas[ref].AdditionalProperties
				}
				if closed == nil || *closed {
					continue
				}
				var body map[string]any
				if err := json.Unmarshal(c.Example, &body); err != nil {
					t.Fatalf("%s %s: example: %v", m, path, err)
				}
				body["no_such_field"] = 1
				b, _ := json.Marshal(body)
				a := do(strings.ToUpper(m), url, l.token, string(b))
				jsonError(l.name+" "+strings.ToUpper(m)+" "+path+" with an unknown field", a, 400, "bad_request")
				if l.name == "admin" && a.body["field"] != "no_such_field" {
					t.Errorf("%s %s with an unknown field: got field %v, want no_such_field", m, path, a.body["field"])
				}
			}
		}
		for _, p := range l.unknown {
			for _, m := range []string{"GET", "POST"} {
				jsonError(l.name+" "+m+" "+p, do(m, l.base+p, l.token, ""), 404, "not_found")
				jsonError(l.name+" "+m+" "+p+" without a token", do(m, l.base+p, "", ""), 404, "not_found")
			}
		}
		// One readiness body on every listener.
		if a := do("GET", l.base+"/readyz", "", ""); a.status != 200 || a.raw != `{"status":"ready"}` || a.header.Get("Content-Type") != "application/json" {
			t.Errorf("%s GET /readyz: got %d %q (%s), want 200 application/json {\"status\":\"ready\"}", l.name, a.status, a.raw, a.header.Get("Content-Type"))
		}
	}
	// The unknown field was refused, not ignored: nothing was bought or made.
	if a := do("GET", admin+"/admin/sales", adminTok, ""); strings.Count(a.raw, `"id"`) != 1 {
		t.Errorf("sales after the refused bodies: %s, want spring-drop alone", a.raw)
	}
	if a := do("GET", admin+"/admin/sales/spring-drop", adminTok, ""); a.body["booked"] != 0.0 {
		t.Errorf("booked after the refused purchase: %v, want 0", a.body["booked"])
	}
}

// TestMetricsMuxContract: the listener of the tiers without an admin API
// (gateway and inventory --metrics-listen, the order sink's --admin-listen)
// answers like the others: JSON 404 and 405 with Allow, one readiness body,
// and not ready is 503 unavailable.
func TestMetricsMuxContract(t *testing.T) {
	st := newStack(&Config{}, io.Discard)
	var down atomic.Bool
	srv := httptest.NewServer(st.metricsMux(func(context.Context) error {
		if down.Load() {
			return errors.New("down")
		}
		return nil
	}))
	t.Cleanup(srv.Close)
	tests := []struct {
		method, path string
		status       int
		body, allow  string
	}{
		{"GET", "/readyz", 200, `{"status":"ready"}`, ""},
		{"GET", "/nope", 404, `{"error":"not_found"}` + "\n", ""},
		{"POST", "/metrics", 405, `{"error":"method_not_allowed"}` + "\n", "GET, HEAD"},
		{"DELETE", "/readyz", 405, `{"error":"method_not_allowed"}` + "\n", "GET, HEAD"},
		{"GET", "//metrics", 404, `{"error":"not_found"}` + "\n", ""},
		{"GET", "/./readyz", 404, `{"error":"not_found"}` + "\n", ""},
	}
	for _, tc := range tests {
		req, _ := http.NewRequest(tc.method, srv.URL+tc.path, nil)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != tc.status || string(b) != tc.body || res.Header.Get("Content-Type") != "application/json" || res.Header.Get("Allow") != tc.allow {
			t.Errorf("%s %s: got %d %q (%s, Allow %q), want %d %q (application/json, Allow %q)",
				tc.method, tc.path, res.StatusCode, b, res.Header.Get("Content-Type"), res.Header.Get("Allow"), tc.status, tc.body, tc.allow)
		}
	}
	down.Store(true)
	res, err := http.Get(srv.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 503 || string(b) != `{"error":"unavailable"}`+"\n" {
		t.Errorf("/readyz while not ready: got %d %q, want 503 unavailable", res.StatusCode, b)
	}
}
