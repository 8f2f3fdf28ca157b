package bearer

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/valyala/fasthttp"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/gateway/jsonscan"
)

// refVerify is the reference: golang-jwt with the gateway's rules (HS256
// only, exp required, a sub that is a user id by flashgate.ValidUserID:
// 1–maxSubject bytes, no control characters).
func refVerify(tok string, now time.Time) (string, bool) {
	p := jwt.NewParser(jwt.WithValidMethods([]string{"HS256"}), jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(func() time.Time { return now }))
	var c jwt.RegisteredClaims
	t, err := p.ParseWithClaims(tok, &c, func(*jwt.Token) (any, error) { return testSecret, nil })
	if err != nil || !t.Valid || c.ExpiresAt == nil || !flashgate.ValidUserID(c.Subject) ||
		now.Unix() >= c.ExpiresAt.Unix() {
		return "", false
	}
	return c.Subject, true
}

// fastVerify runs a token through the gateway's shape check and verifier.
func fastVerify(v *Verifier, tok string, now time.Time) (string, bool) {
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.Set("Authorization", "Bearer "+tok)
	b, ok := Token(&ctx)
	if !ok {
		return "", false
	}
	return v.Verify(b, now.UnixNano())
}

// rawToken signs any header and payload text with key.
func rawToken(header, payload string, key []byte) string {
	b64 := base64.RawURLEncoding.EncodeToString
	s := b64([]byte(header)) + "." + b64([]byte(payload))
	m := hmac.New(sha256.New, key)
	m.Write([]byte(s))
	return s + "." + b64(m.Sum(nil))
}

// TestVerifierMatchesJWT: on tokens that golang-jwt and the usual issuers
// write, the gateway's verifier agrees with golang-jwt; on odd ones it may
// only be stricter.
func TestVerifierMatchesJWT(t *testing.T) {
	now := time.Unix(1_900_000_000, 500_000_000)
	exp := strconv.FormatInt(now.Unix()+60, 10)
	past := strconv.FormatInt(now.Unix(), 10) // exp == now (in seconds): expired
	hs := `{"alg":"HS256","typ":"JWT"}`
	tests := []struct {
		name, header, payload string
		key                   []byte
		want                  string // the sub accepted, "" for a 401
		stricter              bool   // golang-jwt accepts, the gateway need not
	}{
		{"plain", hs, `{"sub":"u1","exp":` + exp + `}`, testSecret, "u1", false},
		{"other header order", `{"typ":"JWT","alg":"HS256"}`, `{"exp":` + exp + `,"sub":"u2"}`, testSecret, "u2", false},
		{"no typ", `{"alg":"HS256"}`, `{"sub":"u3","exp":` + exp + `}`, testSecret, "u3", false},
		{"white space", hs, " {\n\"sub\" : \"u4\" ,\t\"exp\": " + exp + " } ", testSecret, "u4", false},
		{"escapes", hs, `{"sub":"a\u003cb\/\"c\u00e9\ud83d\ude00","exp":` + exp + `}`, testSecret, "a<b/\"cé😀", false},
		{"float exp", hs, `{"sub":"u5","exp":` + exp + `.9}`, testSecret, "u5", false},
		{"exponent exp", hs, `{"sub":"u6","exp":1.9e9}`, testSecret, "", false},
		{"other claims", hs, `{"sub":"u7","exp":` + exp + `,"iss":"x","aud":["a","b"],"jti":"j","iat":1,"x":{"y":[1,true,null,"z"]}}`, testSecret, "u7", false},
		{"aud string", hs, `{"sub":"u8","exp":` + exp + `,"aud":"a"}`, testSecret, "u8", false},
		{"nulls", hs, `{"sub":"u9","exp":` + exp + `,"nbf":null,"iat":null,"iss":null,"aud":null}`, testSecret, "u9", false},
		{"nbf passed", hs, `{"sub":"u10","exp":` + exp + `,"nbf":` + past + `}`, testSecret, "u10", false},
		{"nbf ahead", hs, `{"sub":"u11","exp":` + exp + `,"nbf":` + exp + `}`, testSecret, "", false},
		{"expired", hs, `{"sub":"u1","exp":` + past + `}`, testSecret, "", false},
		{"no exp", hs, `{"sub":"u1"}`, testSecret, "", false},
		{"null exp", hs, `{"sub":"u1","exp":null}`, testSecret, "", false},
		{"no sub", hs, `{"exp":` + exp + `}`, testSecret, "", false},
		{"empty sub", hs, `{"sub":"","exp":` + exp + `}`, testSecret, "", false},
		{"long sub", hs, `{"sub":"` + strings.Repeat("x", maxSubject+1) + `","exp":` + exp + `}`, testSecret, "", false},
		{"longest sub", hs, `{"sub":"` + strings.Repeat("x", maxSubject) + `","exp":` + exp + `}`, testSecret, strings.Repeat("x", maxSubject), false},
		{"number sub", hs, `{"sub":12,"exp":` + exp + `}`, testSecret, "", false},
		{"string exp", hs, `{"sub":"u1","exp":"` + exp + `"}`, testSecret, "", true},
		{"bool iat", hs, `{"sub":"u1","exp":` + exp + `,"iat":true}`, testSecret, "", false},
		{"number aud", hs, `{"sub":"u1","exp":` + exp + `,"aud":[1]}`, testSecret, "", false},
		{"wrong key", hs, `{"sub":"u1","exp":` + exp + `}`, []byte("another secret"), "", false},
		{"hs512 header", `{"alg":"HS512"}`, `{"sub":"u1","exp":` + exp + `}`, testSecret, "", false},
		{"none", `{"alg":"none"}`, `{"sub":"u1","exp":` + exp + `}`, testSecret, "", false},
		{"alg not a string", `{"alg":["HS256"]}`, `{"sub":"u1","exp":` + exp + `}`, testSecret, "", false},
		{"header not json", `alg=HS256`, `{"sub":"u1","exp":` + exp + `}`, testSecret, "", false},
		{"payload not json", hs, `sub=u1`, testSecret, "", false},
		{"trailing garbage", hs, `{"sub":"u1","exp":` + exp + `}x`, testSecret, "", false},
		{"array payload", hs, `["sub"]`, testSecret, "", false},
		{"duplicate sub", hs, `{"sub":"u1","sub":"u2","exp":` + exp + `}`, testSecret, "", true},
		{"folded sub", hs, `{"sub":"u1","SUB":"u2","exp":` + exp + `}`, testSecret, "", true},
		{"long-s sub", hs, `{"ſub":"u2","exp":` + exp + `}`, testSecret, "", true},
		{"escaped name", hs, `{"s\u0075b":"u12","exp":` + exp + `}`, testSecret, "u12", false},
		{"lone surrogate", hs, `{"sub":"a\ud800","exp":` + exp + `}`, testSecret, "", true},
		{"invalid utf-8 sub", hs, "{\"sub\":\"a\xff\",\"exp\":" + exp + "}", testSecret, "", true},
		{"control char", hs, "{\"sub\":\"a\x01\",\"exp\":" + exp + "}", testSecret, "", false},
		{"escaped nul", hs, `{"sub":"a\u0000b","exp":` + exp + `}`, testSecret, "", false},
		{"escaped control char", hs, `{"sub":"a\u0001","exp":` + exp + `}`, testSecret, "", false},
		{"escaped line feed", hs, `{"sub":"a\nb","exp":` + exp + `}`, testSecret, "", false},
		{"escaped del", hs, `{"sub":"a\u007f","exp":` + exp + `}`, testSecret, "", false},
		{"escaped c1 control", hs, `{"sub":"a\u0085","exp":` + exp + `}`, testSecret, "", false},
		{"e-mail sub", hs, `{"sub":"j\u00fcrgen@b\u00fccher.example","exp":` + exp + `}`, testSecret, "jürgen@bücher.example", false},
		{"provider sub", hs, `{"sub":"auth0|64f1c2a9","exp":` + exp + `}`, testSecret, "auth0|64f1c2a9", false},
		{"huge exp", hs, `{"sub":"u1","exp":1e300}`, testSecret, "", false},
	}
	v := NewVerifier(testSecret)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tok := rawToken(tc.header, tc.payload, tc.key)
			for i := 0; i < 2; i++ { // twice: the second sees a remembered header
				got, ok := fastVerify(v, tok, now)
				if !ok {
					got = ""
				}
				if got != tc.want {
					t.Fatalf("try %d: got %q (%v), want %q", i, got, ok, tc.want)
				}
			}
			ref, refOK := refVerify(tok, now)
			switch {
			case tc.stricter && !refOK:
				t.Fatalf("golang-jwt refuses it too: the case shows nothing")
			case !tc.stricter && ref != tc.want:
				t.Fatalf("golang-jwt: got %q (%v), want %q", ref, refOK, tc.want)
			}
		})
	}
}

// FuzzVerifier compares the gateway's verifier with golang-jwt on every
// input: whatever the gateway accepts, golang-jwt accepts with the same
// sub; whatever golang-jwt accepts, the gateway accepts too unless it is
// one of the documented stricter cases (stricterReason). make test runs it
// for a while on top of its corpus (testdata/fuzz/FuzzVerifier).
func FuzzVerifier(f *testing.F) {
	now := time.Unix(1_900_000_000, 0)
	f.Add(`{"alg":"HS256","typ":"JWT"}`, `{"sub":"u1","exp":1900000060}`, true)
	f.Add(`{"alg":"HS256"}`, `{"sub":"a\u00e9","exp":1900000060.5,"nbf":1,"aud":["x"]}`, true)
	f.Add(`{"alg":"HS256"}`, `{"SUB":"x","sub":"y","exp":1900000060}`, true)
	f.Add(`{"alg":"HS256"}`, `{"sub":"u1","exp":1900000060}`, false)
	f.Add(`{"alg":"HS256"}`, `{"sub":"a\u0000b","exp":1900000060}`, true)
	f.Add(`{"alg":"HS256"}`, `{"sub":"a\u0085\n","exp":1900000060}`, true)
	f.Add(`{"alg":"HS256"}`, `{"sub":"u1","exp":1900000060,"nbf":1899999999}`, true)
	f.Add(`{"alg":"HS256"}`, `{"sub":"u1","exp":68719476735,"nbf":-68719476735.5,"iat":1e9}`, true)
	f.Add(`{"typ":"JWT","alg":"HS256"}`, `{"exp":1900000001,"sub":"\ud83d\ude00","aud":"a","x":[{"y":null}]}`, true)
	v := NewVerifier(testSecret)
	f.Fuzz(func(t *testing.T, header, payload string, rightKey bool) {
		key := testSecret
		if !rightKey {
			key = []byte("x")
		}
		tok := rawToken(header, payload, key)
		got, ok := fastVerify(v, tok, now)
		ref, refOK := refVerify(tok, now)
		switch {
		case ok && (!refOK || ref != got):
			t.Fatalf("%s %s: gateway accepts sub %q, golang-jwt says %q (%v)", header, payload, got, ref, refOK)
		case !ok && refOK && stricterReason(tok, payload, ref) == "":
			t.Fatalf("%s %s: gateway refuses, golang-jwt accepts sub %q", header, payload, ref)
		}
	})
}

// BenchmarkVerify is the signature and claims check of a new token.
func BenchmarkVerify(b *testing.B) {
	v := NewVerifier(testSecret)
	tok := []byte(token(b, "user-123456"))
	now := time.Now().UnixNano()
	if _, ok := v.Verify(tok, now); !ok {
		b.Fatal("token refused")
	}
	b.ReportAllocs()
	for b.Loop() {
		v.Verify(tok, now)
	}
}

// BenchmarkVerifyJWT is the same check by golang-jwt, for comparison.
func BenchmarkVerifyJWT(b *testing.B) {
	tok := token(b, "user-123456")
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		refVerify(tok, now)
	}
}

// tokenPayload returns the decoded claims of a test token.
func tokenPayload(b *testing.B) []byte {
	tok := token(b, "user-123456")
	p, err := base64.RawURLEncoding.DecodeString(strings.Split(tok, ".")[1])
	if err != nil {
		b.Fatal(err)
	}
	return p
}

// BenchmarkClaims is the claims scanner on a token's payload.
func BenchmarkClaims(b *testing.B) {
	p := tokenPayload(b)
	var c claims
	b.ReportAllocs()
	for b.Loop() {
		if !parseClaims(p, &c) {
			b.Fatal("claims refused")
		}
	}
}

// BenchmarkClaimsJSON is the same payload read by encoding/json into
// golang-jwt's claims, for comparison.
func BenchmarkClaimsJSON(b *testing.B) {
	p := tokenPayload(b)
	b.ReportAllocs()
	for b.Loop() {
		var c jwt.RegisteredClaims
		if err := json.Unmarshal(p, &c); err != nil {
			b.Fatal(err)
		}
	}
}

// TestSecondsIntegers checks that the integer shortcut of seconds
// reads every number as the float64 path does, at and around its limits.
func TestSecondsIntegers(t *testing.T) {
	for _, s := range []string{
		"0", "-0", "7", "1700000000", "68719476735", "68719476736", "68719476737",
		"-68719476736", "-68719476737", "99999999999", "100000000000", "123456789012345",
		"1e3", "1.5", "-1.5", "1700000000.9", "01", "-", "",
	} {
		p := jsonscan.New([]byte(s))
		got, gotOK := seconds(&p)
		var want int64
		wantOK := false
		q := jsonscan.New([]byte(s))
		if t, ok := q.Number(); ok {
			if f, err := strconv.ParseFloat(string(t), 64); err == nil && f <= maxSeconds && f >= -maxSeconds {
				want, wantOK = int64(math.Trunc(f)), true
			}
		}
		if got != want || gotOK != wantOK || gotOK && p.Pos() != q.Pos() {
			t.Errorf("seconds(%q): got %d %v, want %d %v", s, got, gotOK, want, wantOK)
		}
	}
}

// refShape is the bearer shape rule as docs/api.md states it: "bearer "
// in any case, then a token (trimmed) of at most maxTokenSize bytes with
// three non-empty dot-separated segments, the last SigLen long.
func refShape(h string) (string, bool) {
	if len(h) <= 7 || !strings.EqualFold(h[:7], "bearer ") {
		return "", false
	}
	tok := strings.TrimSpace(h[7:])
	segs := strings.Split(tok, ".")
	if len(tok) > maxTokenSize || len(segs) != 3 || segs[0] == "" || segs[1] == "" || len(segs[2]) != SigLen {
		return "", false
	}
	return tok, true
}

// FuzzBearerShape: Token takes exactly the headers refShape takes.
func FuzzBearerShape(f *testing.F) {
	sig := strings.Repeat("s", SigLen)
	for _, h := range []string{
		"Bearer a.b." + sig, "bearer a.b." + sig, "BEARER  a.b." + sig + " ", "Bearer a.b.c",
		"Bearer .b." + sig, "Bearer a.." + sig, "Bearer a.b.c." + sig, "Bearer a.b" + sig,
		"Bearer ab." + sig, "Bearer a.b.." + sig[1:], "Bearer " + sig + "." + sig + "." + sig,
		"Bearer ..." + sig, "Bearer ." + sig, "Basic a.b." + sig, "Bearer ", "",
	} {
		f.Add(h)
	}
	f.Fuzz(func(t *testing.T, h string) {
		var ctx fasthttp.RequestCtx
		ctx.Request.Header.Set("Authorization", h)
		h = string(ctx.Request.Header.Peek("Authorization")) // as fasthttp keeps it
		got, ok := Token(&ctx)
		want, wantOK := refShape(h)
		if ok != wantOK || string(got) != want {
			t.Fatalf("%q: got %q %v, want %q %v", h, got, ok, want, wantOK)
		}
	})
}

// TestClaimIndex: each registered name is found by its own spelling, a
// spelling encoding/json would fold onto one is refused, any other name is
// another member.
func TestClaimIndex(t *testing.T) {
	for i, n := range claimNames {
		if got := claimIndex([]byte(n)); got != i {
			t.Errorf("claimIndex(%q): got %d, want %d", n, got, i)
		}
	}
	for _, c := range []struct {
		key  string
		want int
	}{
		{"Sub", -2}, {"EXP", -2}, {"ſub", -2}, {"iſſ", -2}, {"nbF", -2},
		{"subject", -1}, {"", -1}, {"su", -1}, {"name", -1},
	} {
		if got := claimIndex([]byte(c.key)); got != c.want {
			t.Errorf("claimIndex(%q): got %d, want %d", c.key, got, c.want)
		}
	}
}

// testSecret signs the tests' tokens.
var testSecret = []byte("test-secret-for-the-gateway")

// token returns a token for user that expires in an hour.
func token(t testing.TB, user string) string {
	t.Helper()
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.RegisteredClaims{
		Subject:   user,
		ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour)),
	}).SignedString(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}
