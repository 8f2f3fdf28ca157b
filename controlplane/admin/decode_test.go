package admin

import (
	"net/http/httptest"
	"testing"
)

// TestAdminBodyKeys: an admin JSON body with a key sent twice in one
// object, or a key that matches a field only case-insensitively, at any
// nesting level, is 400 bad_request naming the key (encoding/json alone
// keeps the last of two keys and takes "Per_User" for per_user).
func TestAdminBodyKeys(t *testing.T) {
	e := newEnv(t, sqliteDSN(t), nil)
	srv := httptest.NewServer(e.handler())
	t.Cleanup(srv.Close)
	c := client{t, srv.URL}
	tests := []struct {
		name, body string
		wantCode   int
		wantField  string
	}{
		{"per_user twice", `{"id":"s1","name":"x","total":10,"per_user":1,"per_user":5}`, 400, "per_user"},
		{"Per_User", `{"id":"s1","name":"x","total":10,"Per_User":5}`, 400, "Per_User"},
		{"Total beside total", `{"id":"s1","name":"x","total":10,"Total":10}`, 400, "Total"},
		{"ID alone", `{"ID":"s1","name":"x","total":10}`, 400, "ID"},
		{"unknown", `{"id":"s1","name":"x","total":10,"colour":"red"}`, 400, "colour"},
		{"variant key twice", `{"id":"s1","name":"x","variants":[{"id":"a","name":"A","total":3,"total":30}]}`, 400, "total"},
		{"variant Name", `{"id":"s1","name":"x","variants":[{"id":"a","Name":"A","total":3}]}`, 400, "Name"},
		{"second variant key twice", `{"id":"s1","name":"x","variants":[{"id":"a","name":"A","total":3},{"id":"b","id":"c","name":"B","total":1}]}`, 400, "id"},
		{"trailing data", `{"id":"s1","name":"x","total":10} {}`, 400, "body"},
		{"not an object", `[1]`, 400, "body"},
		{"not JSON", `{"id":`, 400, "body"},
		{"a good body", `{"id":"good","name":"x","total":10,"per_user":2,"variants":[{"id":"a","name":"A","total":4},{"id":"b","name":"B","total":6}]}`, 201, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body, raw := c.do("POST", "/admin/sales", testToken, tt.body)
			if code != tt.wantCode {
				t.Fatalf("POST /admin/sales %s: got %d %s, want %d", tt.body, code, raw, tt.wantCode)
			}
			if tt.wantField == "" {
				return
			}
			if body["error"] != "bad_request" || body["field"] != tt.wantField {
				t.Errorf("POST /admin/sales %s: got %s, want bad_request naming %q", tt.body, raw, tt.wantField)
			}
		})
	}
}
