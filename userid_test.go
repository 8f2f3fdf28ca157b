package flashgate

import (
	"strings"
	"testing"
)

func TestValidUserID(t *testing.T) {
	tests := []struct {
		id   string
		want bool
	}{
		{"alice", true},
		{"user-123456", true},
		{"alice@example.com", true},
		{"jürgen.müller@bücher.example", true},
		{"auth0|64f1c2a9e4b0d", true},
		{"google-oauth2|110169484474386276334", true},
		{"6f1c2a9e-4b0d-4c2e-9f3a-2b1d0c9e8f7a", true},
		{"a b", true},
		{"用户😀", true},
		{strings.Repeat("x", MaxUserID), true},
		{strings.Repeat("é", MaxUserID/2), true},
		{"", false},
		{strings.Repeat("x", MaxUserID+1), false},
		{strings.Repeat("é", MaxUserID/2) + "x", false},
		{"a\x00b", false},
		{"\x00", false},
		{"a\x01", false},
		{"a\tb", false},
		{"a\nb", false},
		{"a\rb", false},
		{"a\x1b[31m", false},
		{"a\x7f", false},
		{"a\u0080", false},
		{"a\u009f", false},
		{"a\u00a0", true}, // no-break space: a character, not a control
		{"a\xff", false},
		{"a\xc3", false},             // truncated sequence
		{"a\xc0\xaf", false},         // overlong '/'
		{"a\xed\xa0\x80", false},     // a surrogate
		{"a\xf4\x90\x80\x80", false}, // beyond U+10FFFF
	}
	for _, tc := range tests {
		if got := ValidUserID(tc.id); got != tc.want {
			t.Errorf("ValidUserID(%q): got %v, want %v", tc.id, got, tc.want)
		}
		if got := ValidUserID([]byte(tc.id)); got != tc.want {
			t.Errorf("ValidUserID([]byte(%q)): got %v, want %v", tc.id, got, tc.want)
		}
	}
	b := []byte("jürgen.müller@bücher.example")
	if n := testing.AllocsPerRun(100, func() { ValidUserID(b) }); n != 0 {
		t.Errorf("ValidUserID of bytes: got %v allocations, want 0", n)
	}
}
