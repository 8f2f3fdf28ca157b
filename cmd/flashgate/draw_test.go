package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flashgate/flashgate/draw"
)

// TestDrawVerify: `flashgate draw verify FILE` verifies a draw's file and
// prints its winners per variant; a tampered file, a missing one or a bad
// command line is one line of error and a non-zero exit code.
func TestDrawVerify(t *testing.T) {
	dir := t.TempDir()
	entries := make([]draw.Entry, 90)
	for i := range entries {
		entries[i] = draw.Entry{ID: fmt.Sprintf("e%03d", i), Variant: []string{"S", "M", "L"}[i%3], Quantity: 1}
	}
	f, err := draw.New("drop", bytes.Repeat([]byte{9}, 32), map[string]int{"S": 10, "M": 10, "L": 40}, entries)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := draw.Write(&buf, f); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "drop.entries")
	tampered := filepath.Join(dir, "tampered.entries")
	if err := os.WriteFile(good, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(buf.String(), " lost\n", " won\n", 1)
	if err := os.WriteFile(tampered, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"draw", "verify", good}, &out, &errb, env(nil)); err != nil {
		t.Fatalf("verify a good file: %v", err)
	}
	for _, want := range []string{"draw of sale drop: verified", "entries      90", "S     10       30       10", "L     40       30       30", "50 won, 40 lost"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	cases := []struct {
		name string
		args []string
		want string
		code int
	}{
		{"tampered", []string{"draw", "verify", tampered}, "does not verify: entry", 1},
		{"missing", []string{"draw", "verify", filepath.Join(dir, "none")}, "no such file", 1},
		{"not a draw file", []string{"draw", "verify", "/dev/null"}, "not a draw's entries file", 1},
		{"no file", []string{"draw", "verify"}, "usage: flashgate draw verify FILE", 2},
		{"two files", []string{"draw", "verify", good, good}, "usage: flashgate draw verify FILE", 2},
		{"no subcommand", []string{"draw"}, "usage: flashgate draw verify FILE", 2},
	}
	for _, tc := range cases {
		err := run(context.Background(), tc.args, &bytes.Buffer{}, &bytes.Buffer{}, env(nil))
		if err == nil || !strings.Contains(err.Error(), tc.want) || exitCode(err) != tc.code || oneLine(err.Error()) != err.Error() {
			t.Errorf("%s: got %v (exit %d), want one line with %q, exit %d", tc.name, err, exitCode(err), tc.want, tc.code)
		}
	}
}
