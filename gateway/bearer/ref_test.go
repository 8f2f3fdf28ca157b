package bearer

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/flashgate/flashgate/gateway/jsonscan"
)

// stricterReason says why the gateway's verifier may refuse a token that
// golang-jwt accepts: the ways verify.go and claims.go are documented to be
// stricter. It returns "" when none applies, and a refusal is then a bug
// (a buyer with a good token turned away).
func stricterReason(tok, payload, refSub string) string {
	if len(tok) > maxTokenSize {
		return "token longer than maxTokenSize"
	}
	if strings.ContainsRune(refSub, utf8.RuneError) {
		return "sub not valid UTF-8 or a lone surrogate (golang-jwt decodes it as U+FFFD)"
	}
	d := json.NewDecoder(strings.NewReader(payload))
	d.UseNumber()
	if t, err := d.Token(); err != nil || t != json.Delim('{') {
		return ""
	}
	seen := map[string]bool{}
	for d.More() {
		t, err := d.Token()
		if err != nil {
			return ""
		}
		key := t.(string)
		registered := false
		for _, n := range claimNames {
			switch {
			case key == n && seen[n]:
				return "registered claim " + n + " given twice"
			case key == n:
				seen[n], registered = true, true
			case strings.EqualFold(key, n):
				return "registered claim " + n + " spelled " + strconv.Quote(key)
			}
		}
		var v json.RawMessage
		if err := d.Decode(&v); err != nil {
			return ""
		}
		switch {
		case registered && (key == "exp" || key == "nbf" || key == "iat"):
			if bytes.HasPrefix(v, []byte(`"`)) {
				return key + " written as a string"
			}
			if f, err := strconv.ParseFloat(string(v), 64); err == nil && math.Abs(f) > maxSeconds {
				return key + " beyond ±maxSeconds"
			}
		case !registered && jsonDepth(v) > jsonscan.MaxDepth+1:
			return "claim " + strconv.Quote(key) + " nested deeper than jsonscan.MaxDepth"
		}
	}
	return ""
}

// jsonDepth is the nesting depth of a JSON value: 1 for a scalar, one
// more for each array or object around it.
func jsonDepth(v []byte) int {
	depth, deepest, inString := 0, 1, false
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case inString:
		case c == '[' || c == '{':
			depth++
			deepest = max(deepest, depth+1)
		case c == ']' || c == '}':
			depth--
		}
	}
	return deepest
}

// TestStricterReason: each documented way of being stricter than
// golang-jwt is recognised, and ordinary tokens have no excuse.
func TestStricterReason(t *testing.T) {
	deep := strings.Repeat("[", jsonscan.MaxDepth+1) + strings.Repeat("]", jsonscan.MaxDepth+1)
	for _, tc := range []struct {
		payload, refSub string
		stricter        bool
	}{
		{`{"sub":"u1","exp":1900000060}`, "u1", false},
		{`{"sub":"u1","exp":1900000060,"x":{"sub":1,"SUB":2,"exp":"3"}}`, "u1", false},
		{`{"sub":"u1","exp":1900000060,"x":` + strings.Repeat("[", jsonscan.MaxDepth) + strings.Repeat("]", jsonscan.MaxDepth) + `}`, "u1", false},
		{`{"sub":"u1","exp":68719476736}`, "u1", false},
		{`{"sub":"u1","sub":"u1","exp":1900000060}`, "u1", true},
		{`{"sub":"u1","Exp":1900000060,"exp":1900000060}`, "u1", true},
		{`{"ſub":"u1","exp":1900000060}`, "u1", true},
		{`{"sub":"u1","exp":"1900000060"}`, "u1", true},
		{`{"sub":"u1","exp":1900000060,"nbf":-1e11}`, "u1", true},
		{`{"sub":"a\ud800","exp":1900000060}`, "a\uFFFD", true},
		{`{"sub":"u1","exp":1900000060,"x":` + deep + `}`, "u1", true},
	} {
		tok := rawToken(`{"alg":"HS256"}`, tc.payload, testSecret)
		if got := stricterReason(tok, tc.payload, tc.refSub); (got != "") != tc.stricter {
			t.Errorf("%s: got reason %q, want one: %v", tc.payload, got, tc.stricter)
		}
	}
	if got := stricterReason(strings.Repeat("x", maxTokenSize+1), "{}", ""); got == "" {
		t.Errorf("a token over maxTokenSize: got no reason, want one")
	}
}
