package admin

import (
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/flashgate/flashgate/lua"
)

// TestAdminVariantSale: POST /admin/sales takes variants (total omitted:
// their sum), refuses bad ones with the field named, and GET
// /admin/sales/{id} shows each variant's figures.
func TestAdminVariantSale(t *testing.T) {
	e := newEnv(t, sqliteDSN(t), nil)
	srv := httptest.NewServer(e.handler())
	t.Cleanup(srv.Close)
	c := client{t, srv.URL}
	steps := []struct {
		name, method, path, body string
		wantCode                 int
		check                    func(map[string]any) error
	}{
		{"create", "POST", "/admin/sales", `{"id":"shoe","name":"Shoe","price_cents":100,"variants":[{"id":"42","name":"EU 42","total":3},{"id":"43","name":"EU 43","total":5}]}`,
			201, func(m map[string]any) error {
				vs, _ := m["variants"].([]any)
				if m["total"] != 8.0 || len(vs) != 2 {
					return fmt.Errorf("got total %v, variants %v; want 8 and two", m["total"], m["variants"])
				}
				return nil
			}},
		{"total the sum", "POST", "/admin/sales", `{"id":"s2","name":"x","total":8,"variants":[{"id":"a","name":"A","total":3},{"id":"b","name":"B","total":5}]}`, 201, nil},
		{"total not the sum", "POST", "/admin/sales", `{"id":"s3","name":"x","total":9,"variants":[{"id":"a","name":"A","total":3},{"id":"b","name":"B","total":5}]}`, 400, errField("total")},
		{"with buckets", "POST", "/admin/sales", `{"id":"sb","name":"x","buckets":2,"variants":[{"id":"a","name":"A","total":3},{"id":"b","name":"B","total":1}]}`, 201, nil},
		{"bad id", "POST", "/admin/sales", `{"id":"s3","name":"x","variants":[{"id":"a,b","name":"A","total":3}]}`, 400, errField("variants[0].id")},
		{"id twice", "POST", "/admin/sales", `{"id":"s3","name":"x","variants":[{"id":"a","name":"A","total":3},{"id":"a","name":"B","total":1}]}`, 400, errField("variants[1].id")},
		{"no name", "POST", "/admin/sales", `{"id":"s3","name":"x","variants":[{"id":"a","total":3}]}`, 400, errField("variants[0].name")},
		{"zero total", "POST", "/admin/sales", `{"id":"s3","name":"x","variants":[{"id":"a","name":"A","total":0}]}`, 400, errField("variants[0].total")},
		{"empty list", "POST", "/admin/sales", `{"id":"s3","name":"x","total":3,"variants":[]}`, 400, errField("variants")},
		{"unknown variant field", "POST", "/admin/sales", `{"id":"s3","name":"x","variants":[{"id":"a","name":"A","total":3,"price":1}]}`, 400, errField("price")},
		{"status", "GET", "/admin/sales/shoe", "", 200, func(m map[string]any) error {
			vs, _ := m["variants"].([]any)
			if len(vs) != 2 {
				return errors.New("no variants")
			}
			v, _ := vs[1].(map[string]any)
			if v["id"] != "43" || v["name"] != "EU 43" || v["total"] != 5.0 || v["booked"] != 0.0 || v["remaining"] != 5.0 {
				return fmt.Errorf("variant 43: got %v", v)
			}
			return nil
		}},
		{"bucketed status", "GET", "/admin/sales/sb", "", 200, func(m map[string]any) error {
			vs, _ := m["variants"].([]any)
			bs, _ := m["bucket_figures"].([]any)
			if len(vs) != 2 || len(bs) != 2 {
				return fmt.Errorf("got variants %v, bucket figures %v; want two of each", m["variants"], m["bucket_figures"])
			}
			v, _ := vs[0].(map[string]any)
			if v["id"] != "a" || v["total"] != 3.0 || v["remaining"] != 3.0 {
				return fmt.Errorf("variant a: got %v", v)
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
	// The leader exports each variant's booked and total.
	if code, _, raw := c.do("POST", "/admin/sales/shoe/start", testToken, ""); code != 200 {
		t.Fatalf("start: %d %s", code, raw)
	}
	if v, err := lua.Reserve.Run(e.ctx, e.rdb, lua.ReserveKeys("shoe"), "o1", "u1", 1, e.clock.Now().UnixMilli(), "shoe", "", "", "43").Slice(); err != nil || v[0] != int64(0) {
		t.Fatalf("reserving 1 of 43: %v, %v", v, err)
	}
	// A closed sale's settlement per variant: 43's unit is in Redis, its
	// row not yet (no sink runs here), so it is not settled.
	if code, _, raw := c.do("POST", "/admin/sales/shoe/stop", testToken, ""); code != 200 {
		t.Fatalf("stop: %d %s", code, raw)
	}
	if _, m, raw := c.do("GET", "/admin/sales/shoe", testToken, ""); true {
		vs, _ := m["variants"].([]any)
		var got []string
		for _, x := range vs {
			v, _ := x.(map[string]any)
			got = append(got, fmt.Sprint(v["id"])+" "+fmt.Sprint(v["settlement"]))
		}
		want := []string{"42 map[db_live_units:0 difference:0 redis_booked:0 settled:false]", "43 map[db_live_units:0 difference:1 redis_booked:1 settled:false]"}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("settlement per variant: got %v, want %v (%s)", got, want, raw)
		}
	}
	e.lead()
	_, _, metrics := c.do("GET", "/metrics", "", "")
	for _, want := range []string{`flashgate_variant_booked{sale="shoe",variant="42"} 0`, `flashgate_variant_booked{sale="shoe",variant="43"} 1`,
		`flashgate_variant_total{sale="shoe",variant="42"} 3`, `flashgate_variant_total{sale="shoe",variant="43"} 5`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics of the leader lacks %s", want)
		}
	}
}
