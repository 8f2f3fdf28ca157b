package main

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// goBenchRow is one benchmark over GOBENCH_COUNT runs.
type goBenchRow struct {
	Name          string
	NsOp          []float64
	BOp, AllocsOp string
}

var reGoBench = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\d+\s+([\d.]+) ns/op(?:\s+(\d+) B/op\s+(\d+) allocs/op)?`)

// goBench runs the Go benchmarks of every package.
func (b *bench) goBench(ctx context.Context) error {
	if b.cfg.GoBench == 0 {
		return nil
	}
	pkgs, err := benchPackages(b.root)
	if err != nil || len(pkgs) == 0 {
		return fmt.Errorf("finding the packages with benchmarks: %v", err)
	}
	args := append([]string{"go", "test", "-run", "^$", "-bench", ".", "-benchmem", "-count", strconv.Itoa(b.cfg.GoBench)}, pkgs...)
	out, _, runErr := b.r.output(ctx, 15*time.Minute, nil, args...)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	rows := map[string]*goBenchRow{}
	var order []string
	pkg := ""
	for _, l := range strings.Split(out, "\n") {
		if p, ok := strings.CutPrefix(l, "pkg: "); ok {
			pkg = strings.TrimPrefix(strings.TrimSpace(p), "github.com/flashgate/flashgate/")
			continue
		}
		m := reGoBench.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		name := pkg + " " + m[1]
		r := rows[name]
		if r == nil {
			r = &goBenchRow{Name: name}
			rows[name] = r
			order = append(order, name)
		}
		ns, _ := strconv.ParseFloat(m[2], 64)
		r.NsOp = append(r.NsOp, ns)
		r.BOp, r.AllocsOp = m[3], m[4]
	}
	for _, n := range order {
		b.rep.goBench = append(b.rep.goBench, *rows[n])
	}
	if runErr != nil {
		// The benchmarks that ran are reported; the failure is too.
		return runErr
	}
	if len(order) == 0 {
		return fmt.Errorf("go test printed no benchmark")
	}
	return nil
}

// benchPackages lists the packages (./dir) whose tests hold a benchmark, so
// that only those are compiled.
func benchPackages(root string) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		dir, _ := filepath.Rel(root, filepath.Dir(path))
		if bytes.Contains(src, []byte("\nfunc Benchmark")) && !seen[dir] {
			seen[dir] = true
			out = append(out, "./"+filepath.ToSlash(dir))
		}
		return nil
	})
	sort.Strings(out)
	return out, err
}
