package admin

import (
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/lua"
)

// TestAdminDrawSale: POST /admin/sales takes "mode": "draw" with its entry
// window, refuses a bad window or mode with the field named, prepares a
// hash that refuses purchases, and GET /admin/sales/{id} counts the
// entries.
func TestAdminDrawSale(t *testing.T) {
	e := newEnv(t, sqliteDSN(t), nil)
	srv := httptest.NewServer(e.handler())
	t.Cleanup(srv.Close)
	c := client{t, srv.URL}
	const window = `"entries_open_at":"2030-05-01T12:00:00Z","entries_close_at":"2030-05-02T12:00:00Z"`
	steps := []struct {
		name, method, path, body string
		wantCode                 int
		check                    func(map[string]any) error
	}{
		{"create", "POST", "/admin/sales", `{"id":"drop","name":"Drop","price_cents":100,"per_user":2,"mode":"draw",` + window + `,"challenge_maxnumber":1000,
			"variants":[{"id":"S","name":"Small","total":3},{"id":"M","name":"Medium","total":2}]}`,
			201, func(m map[string]any) error {
				if m["queue"] != "draw" || m["entries_open_at"] != "2030-05-01T12:00:00Z" || m["entries_close_at"] != "2030-05-02T12:00:00Z" {
					return fmt.Errorf("got queue %v, window %v..%v", m["queue"], m["entries_open_at"], m["entries_close_at"])
				}
				return nil
			}},
		{"queue draw", "POST", "/admin/sales", `{"id":"d2","name":"x","total":1,"queue":"draw",` + window + `}`, 201, nil},
		{"mode fair", "POST", "/admin/sales", `{"id":"f1","name":"x","total":1,"mode":"fair","starts_at":"2030-05-01T12:00:00Z"}`, 201, func(m map[string]any) error {
			if m["queue"] != "fair" {
				return fmt.Errorf("got queue %v, want fair", m["queue"])
			}
			return nil
		}},
		{"mode first come", "POST", "/admin/sales", `{"id":"c1","name":"x","total":1,"mode":"first_come"}`, 201, nil},
		{"no window", "POST", "/admin/sales", `{"id":"d3","name":"x","total":1,"mode":"draw"}`, 400, errField("entries_open_at")},
		{"no close", "POST", "/admin/sales", `{"id":"d3","name":"x","total":1,"mode":"draw","entries_open_at":"2030-05-01T12:00:00Z"}`, 400, errField("entries_close_at")},
		{"close before open", "POST", "/admin/sales", `{"id":"d3","name":"x","total":1,"mode":"draw","entries_open_at":"2030-05-02T12:00:00Z","entries_close_at":"2030-05-01T12:00:00Z"}`, 400, errField("entries_close_at")},
		{"bad time", "POST", "/admin/sales", `{"id":"d3","name":"x","total":1,"mode":"draw","entries_open_at":"tomorrow","entries_close_at":"2030-05-01T12:00:00Z"}`, 400, errField("entries_open_at")},
		{"window without draw", "POST", "/admin/sales", `{"id":"d3","name":"x","total":1,` + window + `}`, 400, errField("entries_open_at")},
		{"ends at the close", "POST", "/admin/sales", `{"id":"d3","name":"x","total":1,"mode":"draw","ends_at":"2030-05-02T12:00:00Z",` + window + `}`, 400, errField("ends_at")},
		{"bucketed draw", "POST", "/admin/sales", `{"id":"d3","name":"x","total":4,"buckets":2,"mode":"draw",` + window + `}`, 400, errField("buckets")},
		{"unknown mode", "POST", "/admin/sales", `{"id":"d3","name":"x","total":1,"mode":"raffle"}`, 400, errField("mode")},
		{"mode and queue disagree", "POST", "/admin/sales", `{"id":"d3","name":"x","total":1,"mode":"draw","queue":"fair",` + window + `}`, 400, errField("mode")},
		{"fair settings on a draw", "POST", "/admin/sales", `{"id":"d3","name":"x","total":1,"mode":"draw","admit_seconds":5,` + window + `}`, 400, errField("queue")},
		{"difficulty", "POST", "/admin/sales", `{"id":"d3","name":"x","total":1,"mode":"draw","challenge_maxnumber":-1,` + window + `}`, 400, errField("challenge_maxnumber")},
		{"status", "GET", "/admin/sales/drop", "", 200, func(m map[string]any) error {
			d, _ := m["draw"].(map[string]any)
			if d == nil || d["entries"] != 0.0 || d["entries_close_at"] != "2030-05-02T12:00:00Z" {
				return fmt.Errorf("got draw %v", m["draw"])
			}
			return nil
		}},
		{"first-come status", "GET", "/admin/sales/c1", "", 200, func(m map[string]any) error {
			if _, ok := m["draw"]; ok {
				return fmt.Errorf("got draw %v, want none", m["draw"])
			}
			return nil
		}},
	}
	for _, s := range steps {
		code, body, raw := c.do(s.method, s.path, testToken, s.body)
		if code != s.wantCode {
			t.Errorf("%s: %s %s: got %d %s, want %d", s.name, s.method, s.path, code, raw, s.wantCode)
			continue
		}
		if s.check != nil {
			if err := s.check(body); err != nil {
				t.Errorf("%s: %v (%s)", s.name, err, raw)
			}
		}
	}

	// The prepared hash is a draw with its window: entries go in, and a
	// purchase is refused as not started, even once the sale is opened.
	if code, _, raw := c.do("POST", "/admin/sales/drop/start", testToken, ""); code != 200 {
		t.Fatalf("start: %d %s", code, raw)
	}
	at := time.Date(2030, 5, 1, 13, 0, 0, 0, time.UTC).UnixMilli()
	for i, u := range []string{"ann", "bob", "cat"} {
		v, err := lua.DrawEnter.Run(e.ctx, e.rdb, lua.DrawEnterKeys("drop", ""), u, fmt.Sprintf("e%d", i), "S", 1, at, 0).Slice()
		if err != nil || v[0] != int64(lua.DrawOK) {
			t.Fatalf("DrawEnter %s: %v, %v", u, v, err)
		}
	}
	if v, err := lua.DrawSet.Run(e.ctx, e.rdb, lua.DrawChangeKeys("drop"), "ann", "e0", string(flashgate.DrawEntered), at, string(flashgate.DrawPending)).Slice(); err != nil || v[0] != int64(lua.DrawOK) {
		t.Fatalf("DrawSet: %v, %v", v, err)
	}
	if code, _ := e.reserve("drop", "dan"); code != lua.ReserveNotStarted {
		t.Errorf("a purchase of an open draw: code %d, want %d (not started)", code, lua.ReserveNotStarted)
	}
	code, body, raw := c.do("GET", "/admin/sales/drop", testToken, "")
	d, _ := body["draw"].(map[string]any)
	if code != 200 || d == nil || d["entries"] != 3.0 || d["pending"] != 2.0 || d["entered"] != 1.0 || d["made"] != 3.0 {
		t.Errorf("status after three entries: %d %s", code, raw)
	}
	vs, _ := d["variants"].([]any)
	if len(vs) != 2 || fmt.Sprint(vs[0]) != "map[id:S made:3]" {
		t.Errorf("variants' entries: got %v", d["variants"])
	}

	// The leader journals the entries to the database.
	e.lead()
	testwait.Eventually(t, 10*time.Second, func() bool {
		got, err := e.db.DrawEntries(e.ctx, "drop")
		return err == nil && len(got) == 3 && got[0].State == flashgate.DrawEntered
	}, "the draw's entries in the database")
}

// TestAdminDrawFile: GET /admin/sales/{id}/draw.txt answers the entries
// file the close stored, as text, with the token only; 404 before the
// close and for an unknown sale.
func TestAdminDrawFile(t *testing.T) {
	e := newEnv(t, sqliteDSN(t), nil)
	srv := httptest.NewServer(e.handler())
	t.Cleanup(srv.Close)
	c := client{t, srv.URL}
	const window = `"entries_open_at":"2030-05-01T12:00:00Z","entries_close_at":"2030-05-02T12:00:00Z"`
	if code, _, raw := c.do("POST", "/admin/sales", testToken, `{"id":"drop","name":"Drop","total":2,"mode":"draw",`+window+`}`); code != 201 {
		t.Fatalf("create: %d %s", code, raw)
	}
	if code, body, raw := c.do("GET", "/admin/sales/drop/draw.txt", testToken, ""); code != 404 || body["error"] != "not_found" {
		t.Errorf("before the close: got %d %s, want 404 not_found", code, raw)
	}
	const file = "flashgate draw v1\nsale drop\n"
	if _, err := e.db.PutDrawFile(e.ctx, "drop", []byte(file)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path, token string
		want              int
		body              string
	}{
		{"the file", "/admin/sales/drop/draw.txt", testToken, 200, file},
		{"no token", "/admin/sales/drop/draw.txt", "", 401, ""},
		{"unknown sale", "/admin/sales/nope/draw.txt", testToken, 404, ""},
	} {
		code, _, raw := c.do("GET", tc.path, tc.token, "")
		if code != tc.want || (tc.body != "" && raw != tc.body) {
			t.Errorf("%s: got %d %q, want %d %q", tc.name, code, raw, tc.want, tc.body)
		}
	}
}
