package flashgate_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// goFolders returns each folder of the module that holds Go files
// ("." for the root), with the folders of the module its non-test files
// import (build tags aside: a file for any tag counts).
func goFolders(t *testing.T) map[string]map[string]bool {
	t.Helper()
	mod := ""
	gomod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(gomod), "\n") {
		if m, ok := strings.CutPrefix(l, "module "); ok {
			mod = strings.TrimSpace(m)
		}
	}
	if mod == "" {
		t.Fatal("go.mod names no module")
	}
	out := map[string]map[string]bool{}
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != "." && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); path != "." && err == nil {
				return filepath.SkipDir // a module of its own
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		dir := filepath.ToSlash(filepath.Dir(path))
		if out[dir] == nil {
			out[dir] = map[string]bool{}
		}
		if strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			if p == mod {
				out[dir]["."] = true
			} else if rest, ok := strings.CutPrefix(p, mod+"/"); ok {
				out[dir][rest] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// mapRows reads the table of docs/internals.md's "Map" section: each
// row's folder ("." for `flashgate`) and the folders its third cell names.
func mapRows(t *testing.T) map[string][]string {
	t.Helper()
	doc, err := os.ReadFile("docs/internals.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(doc), "\n## Map\n")
	if !ok {
		t.Fatal(`docs/internals.md has no "## Map" section`)
	}
	if i := strings.Index(sec, "\n## "); i >= 0 {
		sec = sec[:i]
	}
	code := regexp.MustCompile("`([^`]+)`")
	rows := map[string][]string{}
	for _, l := range strings.Split(sec, "\n") {
		cells := strings.Split(strings.Trim(l, "| "), " | ")
		if !strings.HasPrefix(l, "| `") || len(cells) != 3 {
			continue
		}
		folder := code.FindStringSubmatch(cells[0])[1]
		if folder == "flashgate" {
			folder = "."
		}
		var callers []string
		for _, m := range code.FindAllStringSubmatch(cells[2], -1) {
			c := m[1]
			if c == "flashgate" {
				c = "."
			}
			callers = append(callers, c)
		}
		if _, dup := rows[folder]; dup {
			t.Errorf("docs/internals.md, Map: %s has two rows", folder)
		}
		rows[folder] = callers
	}
	return rows
}

// TestInternalsMap: docs/internals.md's map has a row for every folder of
// Go code and none for a folder that has none, and each row's callers are
// the folders whose non-test code imports it ("x/…" standing for some of
// the folders under x).
func TestInternalsMap(t *testing.T) {
	folders := goFolders(t)
	rows := mapRows(t)
	callers := map[string][]string{}
	for from, imports := range folders {
		for to := range imports {
			callers[to] = append(callers[to], from)
		}
	}
	name := func(f string) string {
		if f == "." {
			return "flashgate"
		}
		return f
	}
	for f := range folders {
		if _, ok := rows[f]; !ok {
			t.Errorf("docs/internals.md, Map: folder %s is missing", name(f))
		}
	}
	for f, named := range rows {
		if _, ok := folders[f]; !ok {
			t.Errorf("docs/internals.md, Map: folder %s holds no Go code", name(f))
			continue
		}
		got := callers[f]
		slices.Sort(got)
		covers := func(tok, c string) bool {
			if p, ok := strings.CutSuffix(tok, "/…"); ok {
				return strings.HasPrefix(c, p+"/")
			}
			return tok == c
		}
		for _, c := range got {
			if !slices.ContainsFunc(named, func(tok string) bool { return covers(tok, c) }) {
				t.Errorf("docs/internals.md, Map: %s is called by %s, which its row leaves out", name(f), name(c))
			}
		}
		for _, tok := range named {
			if !slices.ContainsFunc(got, func(c string) bool { return covers(tok, c) }) {
				t.Errorf("docs/internals.md, Map: %s's row names %s as a caller, which does not import it", name(f), name(tok))
			}
		}
	}
}
