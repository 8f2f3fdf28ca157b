package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// TestFlagOwnership: every command the binary runs has its bit in cmdNames
// (without one it would silently take no flags), every flag belongs to some
// command, and a command's -h lists exactly the flags declared for it while
// any other flag is "flag provided but not defined".
func TestFlagOwnership(t *testing.T) {
	for _, f := range flagSpecs {
		if f.cmds == 0 {
			t.Errorf("--%s: taken by no command", f.name)
		}
	}
	for _, c := range commands {
		if cmdNames[c.name] == 0 {
			t.Errorf("command %q: missing from cmdNames", c.name)
			continue
		}
		var help bytes.Buffer
		if cfg, err := parseConfig(c.name, []string{"-h"}, &help, env(nil)); cfg != nil || err != nil {
			t.Fatalf("%s -h: got %v, %v; want nil, nil", c.name, cfg, err)
		}
		for _, f := range flagSpecs {
			listed := strings.Contains(help.String(), "\n  -"+f.name+" ") || strings.Contains(help.String(), "\n  -"+f.name+"\n")
			if listed != f.cmds.has(c.name) {
				t.Errorf("%s -h lists --%s: got %v, want %v", c.name, f.name, listed, f.cmds.has(c.name))
			}
			if f.cmds.has(c.name) {
				continue
			}
			_, err := parseConfig(c.name, []string{"--" + f.name, "1"}, &bytes.Buffer{}, env(nil))
			if err == nil || !strings.Contains(err.Error(), "flag provided but not defined: -"+f.name) {
				t.Errorf("%s --%s: got %v, want flag provided but not defined", c.name, f.name, err)
			}
		}
	}
}

// TestFlagsDocumented: every flag the binary defines has its row in
// docs/api.md, so the flag table cannot fall behind again.
func TestFlagsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatalf("reading docs/api.md: %v", err)
	}
	for _, f := range flagSpecs {
		if !bytes.Contains(doc, []byte("| `--"+f.name+"`")) && !bytes.Contains(doc, []byte("/ `--"+f.name+"` |")) {
			t.Errorf("--%s: no row in docs/api.md", f.name)
		}
	}
}

// TestReserveBatchFlag: --reserve-batch takes 1..1000, from the flag or
// FLASHGATE_RESERVE_BATCH, and says what it wants otherwise.
func TestReserveBatchFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want int
		err  string
	}{
		{nil, nil, 128, ""},
		{[]string{"--reserve-batch", "1"}, nil, 1, ""},
		{nil, map[string]string{"FLASHGATE_RESERVE_BATCH": "64"}, 64, ""},
		{[]string{"--reserve-batch", "0"}, nil, 0, "--reserve-batch 0: want 1..1000"},
		{[]string{"--reserve-batch", "1001"}, nil, 0, "--reserve-batch 1001: want 1..1000"},
	} {
		e := map[string]string{"FLASHGATE_JWT_SECRET": "0123456789abcdef0123456789abcdef", "FLASHGATE_ADMIN_TOKEN": "admintoken-0123456789", "FLASHGATE_REDIS": "redis://127.0.0.1:6379", "FLASHGATE_DB": "sqlite:///tmp/x.db"}
		for k, v := range tc.env {
			e[k] = v
		}
		cfg, err := parseConfig("serve", tc.args, &bytes.Buffer{}, env(e))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v: got %v, want %q", tc.args, err, tc.err)
			}
			continue
		}
		if err != nil || cfg.ReserveBatch != tc.want {
			t.Errorf("%v %v: got %v, %v; want %d", tc.args, tc.env, cfg, err, tc.want)
		}
	}
}
