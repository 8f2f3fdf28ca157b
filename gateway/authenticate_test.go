package gateway

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/flashgate/flashgate/internal/testenv/testclock"
)

func TestAuth(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Reserver = &fakeReserver{} })
	e.sale(t, "s1", 100, 150, true)
	h := e.s.Handler()
	exp := jwt.NewNumericDate(time.Now().Add(time.Hour))
	sign := func(m jwt.SigningMethod, key any, claims jwt.Claims) string {
		s, err := jwt.NewWithClaims(m, claims).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	b64 := base64.RawURLEncoding.EncodeToString
	good := jwt.RegisteredClaims{Subject: "u1", ExpiresAt: exp}
	payload := b64([]byte(`{"sub":"u1","exp":` + strconv.FormatInt(exp.Unix(), 10) + `}`))
	tests := []struct {
		name   string
		header string
		status int
	}{
		{"valid", "Bearer " + sign(jwt.SigningMethodHS256, testSecret, good), 201},
		{"lower-case scheme", "bearer " + sign(jwt.SigningMethodHS256, testSecret, jwt.RegisteredClaims{Subject: "u2", ExpiresAt: exp}), 201},
		{"missing header", "", 401},
		{"basic", "Basic dTE6cGFzcw==", 401},
		{"bearer only", "Bearer ", 401},
		{"garbage", "Bearer not.a.token", 401},
		{"forged", "Bearer " + sign(jwt.SigningMethodHS256, []byte("another secret"), good), 401},
		{"alg none", "Bearer " + sign(jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, good), 401},
		{"hs512", "Bearer " + sign(jwt.SigningMethodHS512, testSecret, good), 401},
		{"rs256 header", "Bearer " + b64([]byte(`{"alg":"RS256","typ":"JWT"}`)) + "." + payload + "." + b64([]byte("sig")), 401},
		{"expired", "Bearer " + sign(jwt.SigningMethodHS256, testSecret, jwt.RegisteredClaims{Subject: "u1", ExpiresAt: jwt.NewNumericDate(time.Now().Add(-time.Minute))}), 401},
		{"no exp", "Bearer " + sign(jwt.SigningMethodHS256, testSecret, jwt.RegisteredClaims{Subject: "u1"}), 401},
		{"no sub", "Bearer " + sign(jwt.SigningMethodHS256, testSecret, jwt.RegisteredClaims{ExpiresAt: exp}), 401},
		{"long sub", "Bearer " + sign(jwt.SigningMethodHS256, testSecret, jwt.RegisteredClaims{Subject: strings.Repeat("x", 129), ExpiresAt: exp}), 401},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := req{method: "POST", path: "/api/sales/s1/orders"}
			if tc.header != "" {
				r.header = map[string]string{"Authorization": tc.header}
			}
			for i := 0; i < 2; i++ { // twice: the second answer comes from the token cache
				resp := do(h, r)
				want := tc.status
				if i == 1 && want == 201 {
					want = 201 // the fake reserver admits repeats
				}
				if resp.StatusCode() != want {
					t.Fatalf("try %d: got %d %s, want %d", i, resp.StatusCode(), resp.Body(), want)
				}
				if want == 401 && errCode(resp) != "unauthorized" {
					t.Fatalf("got body %s, want unauthorized", resp.Body())
				}
			}
		})
	}
}

// TestTokenExpiry checks that a token stops working at exp.
func TestTokenExpiry(t *testing.T) {
	clock := testclock.New(time.Now())
	e := newEnv(t, func(c *Config) { c.Clock = clock; c.Reserver = &fakeReserver{}; c.UserRate = -1 })
	e.sale(t, "s1", 100, 150, true)
	tok, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.RegisteredClaims{
		Subject: "u1", ExpiresAt: jwt.NewNumericDate(clock.Now().Add(time.Minute)),
	}).SignedString(testSecret)
	r := req{method: "POST", path: "/api/sales/s1/orders", token: tok}
	if got := do(e.s.Handler(), r).StatusCode(); got != 201 {
		t.Fatalf("fresh token: got %d, want 201", got)
	}
	clock.Add(2 * time.Minute)
	if got := do(e.s.Handler(), r).StatusCode(); got != 401 {
		t.Fatalf("expired token: got %d, want 401", got)
	}
}

// rawToken signs any header and payload text with key.
func rawToken(header, payload string, key []byte) string {
	b64 := base64.RawURLEncoding.EncodeToString
	s := b64([]byte(header)) + "." + b64([]byte(payload))
	m := hmac.New(sha256.New, key)
	m.Write([]byte(s))
	return s + "." + b64(m.Sum(nil))
}
