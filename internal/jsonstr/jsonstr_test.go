package jsonstr_test

import (
	"encoding/json"
	"testing"

	"github.com/flashgate/flashgate/internal/jsonstr"
)

// check asserts that Append(s) is valid JSON decoding to what encoding/json's
// own encoding of s decodes to.
func check(t *testing.T, s string) {
	t.Helper()
	got := jsonstr.Append(nil, s)
	want, err := json.Marshal(s)
	if err != nil {
		t.Fatalf("json.Marshal(%q): %v", s, err)
	}
	var g, w string
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("Append(%q) = %s, not valid JSON: %v", s, got, err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatalf("json.Unmarshal(%s): %v", want, err)
	}
	if g != w {
		t.Errorf("Append(%q) decodes to %q, want %q (encoding/json: %s)", s, g, w, want)
	}
}

func TestAppend(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"", `""`},
		{"o-1", `"o-1"`},
		{`a"b\c`, `"a\"b\\c"`},
		{"\x00\n\x1f", `"\u0000\u000a\u001f"`},
		{"<a&b>", `"\u003ca\u0026b\u003e"`},
		{"\u2028\u2029", `"\u2028\u2029"`},
		{"é世😀", `"é世😀"`},
		{"a\xffb", `"a\ufffdb"`},
		{"\xe4\xb8", `"\ufffd\ufffd"`},
		{"\xed\xa0\x80", `"\ufffd\ufffd\ufffd"`}, // a surrogate half
	}
	for _, tt := range tests {
		if got := string(jsonstr.Append([]byte("x"), tt.in)); got != "x"+tt.want {
			t.Errorf("Append(%q) = %s, want x%s", tt.in, got, tt.want)
		}
		check(t, tt.in)
	}
}

func TestAppendAllocs(t *testing.T) {
	buf := make([]byte, 0, 64)
	if n := testing.AllocsPerRun(100, func() { buf = jsonstr.Append(buf[:0], "o-1\xff<>") }); n != 0 {
		t.Errorf("Append allocates %v times into a large enough buffer, want 0", n)
	}
}

func FuzzAppend(f *testing.F) {
	for _, s := range []string{"", "o-1", "a\xffb", "\u2028<&>", "\"\\\x00", "\xed\xa0\x80"} {
		f.Add(s)
	}
	f.Fuzz(check)
}
