package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// machineInfo describes where the run ran.
type machineInfo struct {
	CPUs                   int
	CPUModel, Memory       string
	Kernel, Go, Redis, Wrk string
	Postgres               string
	Commit                 string
	Date                   string
	LoadStart, LoadEnd     string
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}

func (b *bench) machine(ctx context.Context) machineInfo {
	m := machineInfo{CPUs: runtime.NumCPU(), Go: runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH,
		Date: time.Now().UTC().Format("2006-01-02 15:04 UTC"), LoadStart: loadavg()}
	if ci, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(ci), "\n") {
			if v, ok := strings.CutPrefix(l, "model name"); ok {
				m.CPUModel = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	if mi, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(mi), "\n") {
			if v, ok := strings.CutPrefix(l, "MemTotal:"); ok {
				kb, _ := strconv.ParseFloat(strings.Fields(v)[0], 64)
				m.Memory = fmt.Sprintf("%.1f GiB", kb/1024/1024)
			}
		}
	}
	k, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	m.Kernel = "Linux " + strings.TrimSpace(string(k))
	out, _ := exec.CommandContext(ctx, "redis-server", "--version").Output()
	if f := strings.Fields(string(out)); len(f) >= 3 {
		m.Redis = strings.Join(f[:3], " ")
	}
	out, _ = exec.CommandContext(ctx, "wrk", "-v").CombinedOutput()
	m.Wrk = firstLine(string(out))
	if b.cfg.Postgres != "" {
		if c, err := pgx.Connect(ctx, b.cfg.Postgres); err == nil {
			var v string
			c.QueryRow(ctx, "SHOW server_version").Scan(&v)
			var fsync string
			c.QueryRow(ctx, "SHOW fsync").Scan(&fsync)
			m.Postgres = "PostgreSQL " + v + " (fsync=" + fsync + ")"
			c.Close(ctx)
		}
	}
	out, _ = exec.CommandContext(ctx, "git", "rev-parse", "--short", "HEAD").Output()
	m.Commit = strings.TrimSpace(string(out))
	if st, _ := exec.CommandContext(ctx, "git", "status", "--porcelain", "--untracked-files=no",
		"--", ".", ":!README.md", ":!docs/BENCHMARKS.md").Output(); len(bytes.TrimSpace(st)) > 0 {
		m.Commit += " with local changes"
	}
	return m
}
