//go:build faults

package faults

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/flashgate/flashgate/internal/testwait"
)

// proc is one server process of the deployment. It runs in its own process
// group, so that kill -9, SIGSTOP and SIGCONT reach it and every child it
// has (PostgreSQL's backends).
type proc struct {
	name  string
	bin   string
	args  []string
	env   []string
	log   string              // file the output is appended to
	cred  *syscall.Credential // run as this user (PostgreSQL refuses root)
	ready func(ctx context.Context) error

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// start starts the process and waits (at most limit) until ready answers.
func (p *proc) start(limit time.Duration) error {
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "=== %s start %s\n", time.Now().Format(time.RFC3339Nano), p.name)
	cmd := exec.Command(p.bin, p.args...)
	// Only the settings given here: a FLASHGATE_* variable of the caller's
	// shell would silently change a tier's flags.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FLASHGATE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, p.env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: p.cred}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", p.name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); f.Close(); close(done) }()
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
	if p.ready == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var last error
	exited := false
	if _, ok := testwait.For(limit, func() bool {
		select {
		case <-done:
			exited = true
			return true
		default:
		}
		last = p.ready(ctx)
		return last == nil
	}); exited {
		return fmt.Errorf("%s exited during start-up (exit %v); see %s", p.name, cmd.ProcessState, p.log)
	} else if !ok {
		return fmt.Errorf("%s not ready after %v: %v; see %s", p.name, limit, last, p.log)
	}
	return nil
}

func (p *proc) running() (*exec.Cmd, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd, p.done
}

// signal sends sig to the process group.
func (p *proc) signal(sig syscall.Signal) error {
	cmd, done := p.running()
	if cmd == nil {
		return fmt.Errorf("%s never started", p.name)
	}
	select {
	case <-done:
		return fmt.Errorf("%s is not running", p.name)
	default:
	}
	return syscall.Kill(-cmd.Process.Pid, sig)
}

// kill9 kills the process group with SIGKILL and waits until it is gone.
func (p *proc) kill9() error {
	cmd, done := p.running()
	if cmd == nil {
		return nil
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGCONT) // a frozen group dies too
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s did not die of SIGKILL in 10s", p.name)
	}
}

// stop asks the process to end with sig, and kills it after limit.
func (p *proc) stop(sig syscall.Signal, limit time.Duration) error {
	cmd, done := p.running()
	if cmd == nil {
		return nil
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGCONT)
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
		return nil
	case <-time.After(limit):
		_ = p.kill9()
		return fmt.Errorf("%s did not stop on %v within %v; killed", p.name, sig, limit)
	}
}

// pid is the running process's id (0 before start).
func (p *proc) pid() int {
	cmd, _ := p.running()
	if cmd == nil {
		return 0
	}
	return cmd.Process.Pid
}

// freePort returns a loopback TCP port nothing listens on now.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

var probeClient = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// httpReady answers nil once url answers 200.
func httpReady(url string) func(context.Context) error {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := probeClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return nil
	}
}

// tail returns the last n lines of a log file, for a diagnosis.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

var errNotReady = errors.New("not ready")
