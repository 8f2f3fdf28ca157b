package gateway

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/lua"
)

// TestUserIDRule buys with tokens whose sub breaks docs/api.md's user id
// rule (flashgate.ValidUserID): each is 401 unauthorized and reserves
// nothing; ordinary ids, non-ASCII letters among them, buy (201) with the
// id as they sent it.
func TestUserIDRule(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.UserRate = -1 })
	e.sale(t, "s1", 100, 150, true)
	h := e.s.Handler()
	exp := strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10)
	// raw signs a payload whose sub is the JSON text sub, as written.
	raw := func(sub string) string {
		return rawToken(`{"alg":"HS256","typ":"JWT"}`, `{"sub":`+sub+`,"exp":`+exp+`}`, testSecret)
	}
	tests := []struct {
		name, tok string
		status    int
		user      string // the user id of a 201
	}{
		{"plain", token(t, "alice"), 201, "alice"},
		{"e-mail", token(t, "bob@example.com"), 201, "bob@example.com"},
		{"international e-mail", token(t, "jürgen.müller@bücher.example"), 201, "jürgen.müller@bücher.example"},
		{"auth0", token(t, "auth0|64f1c2a9e4b0d"), 201, "auth0|64f1c2a9e4b0d"},
		{"uuid", token(t, "6f1c2a9e-4b0d-4c2e-9f3a-2b1d0c9e8f7a"), 201, "6f1c2a9e-4b0d-4c2e-9f3a-2b1d0c9e8f7a"},
		{"cjk and emoji", token(t, "用户😀"), 201, "用户😀"},
		{"space", token(t, "Ann Lee"), 201, "Ann Lee"},
		{"longest", token(t, strings.Repeat("x", flashgate.MaxUserID)), 201, strings.Repeat("x", flashgate.MaxUserID)},
		{"nul", token(t, "carol\x00"), 401, ""},
		{"nul alone", token(t, "\x00"), 401, ""},
		{"nul escaped by hand", raw(`"dave\u0000x"`), 401, ""},
		{"tab", token(t, "eve\tx"), 401, ""},
		{"line feed", token(t, "frank\nINFO forged log line"), 401, ""},
		{"escape sequence", token(t, "gina\x1b[31m"), 401, ""},
		{"del", token(t, "hal\x7f"), 401, ""},
		{"c1 control", token(t, "ivan\u0085"), 401, ""},
		{"too long", token(t, strings.Repeat("x", flashgate.MaxUserID+1)), 401, ""},
		{"too long in letters", token(t, strings.Repeat("é", flashgate.MaxUserID/2)+"x"), 401, ""},
		{"empty", raw(`""`), 401, ""},
		{"c1 control escaped by hand", raw(`"kim\u009b"`), 401, ""},
		{"letters escaped by hand", raw(`"l\u00e9a"`), 201, "léa"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp := do(h, req{method: "POST", path: "/api/sales/s1/orders", token: tc.tok})
			if resp.StatusCode() != tc.status {
				t.Fatalf("got %d %s, want %d", resp.StatusCode(), resp.Body(), tc.status)
			}
			if tc.status == 401 {
				if got := errCode(resp); got != "unauthorized" {
					t.Fatalf("got body %s, want unauthorized", resp.Body())
				}
				return
			}
			var v struct {
				UserID string `json:"user_id"`
			}
			if err := json.Unmarshal(resp.Body(), &v); err != nil || v.UserID != tc.user {
				t.Fatalf("got body %s, want the order of user %q", resp.Body(), tc.user)
			}
		})
	}
	// Only the ordinary ids reserved.
	buyers, err := e.primary.HKeys(context.Background(), lua.BuyersKey("s1")).Result()
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for _, tc := range tests {
		if tc.status == 201 {
			want++
		}
	}
	if len(buyers) != want {
		t.Errorf("buyers: got %d %q, want %d", len(buyers), buyers, want)
	}
	for _, b := range buyers {
		if strings.ContainsAny(b, "\x00\t\n\x1b\x7f\u0085") {
			t.Errorf("buyer %q reserved, want it refused", b)
		}
	}
}
