package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRunnerStartStop runs a real redis-server the way the run starts its
// servers: recorded, its output in DIR/name.log (afresh on each start),
// ready once it accepts connections, stopped by stopAll.
func TestRunnerStartStop(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("no redis-server")
	}
	r := &runner{dir: t.TempDir()}
	ctx := context.Background()
	for run := 0; run < 2; run++ {
		addr, err := freeAddr()
		if err != nil {
			t.Fatal(err)
		}
		port := addr[strings.LastIndexByte(addr, ':')+1:]
		p, err := r.start("redis", nil, "redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
		if err != nil {
			t.Fatal(err)
		}
		if err := waitTCP(ctx, addr, p, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		r.stopAll()
		if p.Alive() {
			t.Fatalf("run %d: redis-server alive after stopAll", run)
		}
		if !p.State().Success() {
			t.Errorf("run %d: redis-server ended with %v, want exit 0 on SIGTERM", run, p.State())
		}
	}
	b, err := os.ReadFile(filepath.Join(r.dir, "redis.log"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "Ready to accept connections"); n != 1 {
		t.Errorf("redis.log: got %d starts, want 1 (each start writes it afresh):\n%s", n, b)
	}
	if got := r.commands(); len(got) != 2 || !strings.HasPrefix(got[0], "redis-server --port ") {
		t.Errorf("commands: got %q, want the two redis-server command lines", got)
	}
}
