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
