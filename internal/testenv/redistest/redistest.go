// Package redistest starts throwaway redis-server processes on free loopback
// ports for tests, and stops them when the test ends.
package redistest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/testenv/procgroup"
)

// Required reports whether missing test servers fail tests rather than skip
// them; `make test` sets FLASHGATE_TEST_REQUIRE=1.
func Required() bool { return os.Getenv("FLASHGATE_TEST_REQUIRE") == "1" }

// Server is one redis-server process listening on 127.0.0.1:Port.
type Server struct {
	Port int
	Addr string // "127.0.0.1:<Port>"
	URL  string // "redis://127.0.0.1:<Port>/0"

	bin  string
	dir  string
	args []string
	cmd  *exec.Cmd
	done chan struct{}
}

// Binary returns the path of redis-server, or "" when it is not installed.
func Binary() string {
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p
	}
	for _, p := range []string{"/usr/bin/redis-server", "/usr/local/bin/redis-server"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// Start starts a redis-server for tb with extra config args (for example
// "--replicaof", "127.0.0.1", "6379") and stops it in tb.Cleanup. Without
// redis-server it skips the test, or fails it when Required.
func Start(tb testing.TB, args ...string) *Server {
	tb.Helper()
	bin := Binary()
	if bin == "" {
		if Required() {
			tb.Fatal("redistest: redis-server not found (install Debian's redis-server)")
		}
		tb.Skip("redistest: redis-server not found")
	}
	s, err := StartServer(bin, tb.TempDir(), args...)
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	tb.Cleanup(s.Stop)
	return s
}

// StartServer starts redis-server bin with its files in dir; for TestMain,
// where there is no testing.TB. The caller stops it.
func StartServer(bin, dir string, args ...string) (*Server, error) {
	var last error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s := &Server{Port: port, Addr: fmt.Sprintf("127.0.0.1:%d", port), bin: bin, dir: dir, args: args}
		s.URL = "redis://" + s.Addr + "/0"
		if last = s.start(); last == nil {
			return s, nil
		}
	}
	return nil, last
}

func (s *Server) start() error {
	args := append([]string{
		"--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir,
		"--dbfilename", fmt.Sprintf("dump-%d.rdb", s.Port),
		"--logfile", filepath.Join(s.dir, fmt.Sprintf("redis-%d.log", s.Port)),
	}, s.args...)
	cmd := exec.Command(s.bin, args...)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting redis-server: %w", err)
	}
	s.cmd = cmd
	s.done = make(chan struct{})
	go func() { _ = cmd.Wait(); close(s.done) }()
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-s.done:
			return fmt.Errorf("redis-server on port %d exited at start (see %s)", s.Port, s.dir)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.Stop()
	return fmt.Errorf("redis-server on port %d did not answer within 10s", s.Port)
}

// Stop kills the server and waits for it to exit. Stopping twice is harmless.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// Restart stops the server and starts it again on the same port with the same
// args. Without persistence the data is gone, as after a crash.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	s.Stop()
	var err error
	for i := 0; i < 20; i++ {
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	tb.Fatalf("redistest: restart: %v", err)
}

// Client returns a client for the server, closed at the end of the test.
func (s *Server) Client(tb testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// WaitReplica waits until the server, a replica, reports a finished sync
// with its primary.
func (s *Server) WaitReplica(tb testing.TB) {
	tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer c.Close()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		info, err := c.Info(context.Background(), "replication").Result()
		if err == nil && strings.Contains(info, "master_link_status:up") {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	tb.Fatalf("redistest: replica %s never linked to its primary", s.Addr)
}

// freePort is procgroup.FreePort: one process-wide record of the ports
// handed out, so that a server started here never gets a port another
// harness has just handed to its own server.
func freePort() (int, error) {
	port, err := procgroup.FreePort()
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	return port, nil
}
