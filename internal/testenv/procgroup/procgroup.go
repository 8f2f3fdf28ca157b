// Package procgroup runs the server processes of the fault suite
// (systemtest/faults) and of `make bench` (cmd/flashgate-bench): each in a
// process group of its own, so that a signal reaches it and every child it
// has (PostgreSQL's backends), with its output in a log file, and ready once
// a probe answers. A Proc is one run of a process; a restart is a new Start.
package procgroup

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
)

// Spec says how to run a process.
type Spec struct {
	// Name names the process in errors and in the log's start line.
	Name string
	// Args is the program (Args[0], looked up in PATH) and its arguments.
	Args []string
	// Env is the process's whole environment; nil means this process's
	// (as exec.Cmd.Env).
	Env []string
	// Log is the file the output goes to. Start appends to it, after a
	// line "=== <time> start <Name>", so that the runs of a restarted
	// process follow each other; with FreshLog it starts the file afresh
	// and writes only the output. Empty: the output is discarded.
	Log      string
	FreshLog bool
	// Cred, when set, runs the process as that user (PostgreSQL refuses
	// root).
	Cred *syscall.Credential
	// DieWithParent asks the kernel to SIGKILL the process when the thread
	// that started it exits (Pdeathsig): a run that dies without cleaning
	// up leaves no server behind.
	DieWithParent bool
}

// Command returns the command of s, not started, in a process group of its
// own. With ctx not nil, ctx's end kills the whole group (SIGKILL).
func Command(ctx context.Context, s Spec) *exec.Cmd {
	var cmd *exec.Cmd
	if ctx != nil {
		cmd = exec.CommandContext(ctx, s.Args[0], s.Args[1:]...)
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	} else {
		cmd = exec.Command(s.Args[0], s.Args[1:]...)
	}
	cmd.Env = s.Env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: s.Cred}
	if s.DieWithParent {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	return cmd
}

// Proc is one run of a server process, started by Start.
type Proc struct {
	name, log string
	cmd       *exec.Cmd
	done      chan struct{}
	err       error // cmd.Wait's, set before done is closed
}

// Start starts the process of s in the background.
func Start(s Spec) (*Proc, error) {
	if len(s.Args) == 0 {
		return nil, fmt.Errorf("procgroup: %s: no program", s.Name)
	}
	var f *os.File
	if s.Log != "" {
		flags := os.O_CREATE | os.O_WRONLY | os.O_APPEND
		if s.FreshLog {
			flags = os.O_CREATE | os.O_WRONLY | os.O_TRUNC
		}
		var err error
		if f, err = os.OpenFile(s.Log, flags, 0o644); err != nil {
			return nil, fmt.Errorf("procgroup: %s: %w", s.Name, err)
		}
		if !s.FreshLog {
			fmt.Fprintf(f, "=== %s start %s\n", time.Now().Format(time.RFC3339Nano), s.Name)
		}
	}
	cmd := Command(nil, s)
	if f != nil {
		cmd.Stdout, cmd.Stderr = f, f
	}
	if err := cmd.Start(); err != nil {
		if f != nil {
			f.Close()
		}
		return nil, fmt.Errorf("procgroup: starting %s: %w", s.Name, err)
	}
	p := &Proc{name: s.Name, log: s.Log, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		if f != nil {
			f.Close()
		}
		close(p.done)
	}()
	return p, nil
}

// Name is the process's name from its Spec.
func (p *Proc) Name() string { return p.name }

// Log is the process's log file from its Spec.
func (p *Proc) Log() string { return p.log }

// Pid is the process's id, which is also its process group's.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Done is closed once the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Alive reports whether the process still runs.
func (p *Proc) Alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Err is how the process ended (exec.Cmd.Wait's error) once Done is
// closed; nil before.
func (p *Proc) Err() error {
	select {
	case <-p.done:
		return p.err
	default:
		return nil
	}
}

// State is the process's exit state once Done is closed; nil before.
func (p *Proc) State() *os.ProcessState {
	select {
	case <-p.done:
		return p.cmd.ProcessState
	default:
		return nil
	}
}

// Signal sends sig to the process group.
func (p *Proc) Signal(sig syscall.Signal) error {
	if !p.Alive() {
		return fmt.Errorf("%s is not running", p.name)
	}
	return syscall.Kill(-p.Pid(), sig)
}

// killWait is how long Kill waits for the process to be gone.
const killWait = 10 * time.Second

// Kill sends SIGKILL to the process group (after SIGCONT, so that a frozen
// group dies too) and waits until the process is gone.
func (p *Proc) Kill() error {
	_ = syscall.Kill(-p.Pid(), syscall.SIGCONT)
	_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
	select {
	case <-p.done:
		return nil
	case <-time.After(killWait):
		return fmt.Errorf("%s did not die of SIGKILL in %v", p.name, killWait)
	}
}

// Stop asks the process (not its group: PostgreSQL's postmaster stops its
// own backends) to end with sig, after a SIGCONT to the group, and kills
// the group after limit.
func (p *Proc) Stop(sig syscall.Signal, limit time.Duration) error {
	_ = syscall.Kill(-p.Pid(), syscall.SIGCONT)
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
		return nil
	case <-time.After(limit):
		_ = p.Kill()
		return fmt.Errorf("%s did not stop on %v within %v; killed", p.name, sig, limit)
	}
}

// pollEvery is how often WaitReady asks its probe.
const pollEvery = 50 * time.Millisecond

// WaitReady asks ready every 50ms until it answers nil, at most for limit
// (each probe gets a context that ends then). It fails early when the
// process exits or ctx ends.
func (p *Proc) WaitReady(ctx context.Context, limit time.Duration, ready func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var last error
	for {
		select {
		case <-p.done:
			return fmt.Errorf("%s exited during start-up (%v); the end of %s:\n%s", p.name, p.cmd.ProcessState, p.log, Tail(p.log, 20))
		default:
		}
		if last = ready(ctx); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			if errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
				return fmt.Errorf("%s not ready after %v: %v; see %s", p.name, limit, last, p.log)
			}
			return ctx.Err()
		case <-p.done:
		case <-time.After(pollEvery):
		}
	}
}

var probeClient = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// HTTPReady is a probe for WaitReady that answers nil once url answers a
// GET with 200.
func HTTPReady(url string) func(context.Context) error {
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

// TCPReady is a probe for WaitReady that answers nil once addr accepts a
// connection.
func TCPReady(addr string) func(context.Context) error {
	return func(ctx context.Context) error {
		d := net.Dialer{Timeout: time.Second}
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return c.Close()
	}
}

// handedOut holds the ports FreePort returned, which it never returns
// again: the kernel may offer a port it gave out a moment ago, before the
// process it was meant for has bound it (a fault run saw a gateway and a
// sink's metrics listener handed the same port).
var handedOut struct {
	sync.Mutex
	ports map[int]bool
}

// FreePort returns a loopback TCP port nothing listens on now and that no
// earlier call in this process returned.
func FreePort() (int, error) { return freePort(kernelPort) }

// kernelPort returns the loopback port the kernel gives a listener on port
// 0, closing the listener.
func kernelPort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// freePort is FreePort with the ports offered by pick.
func freePort(pick func() (int, error)) (int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.ports == nil {
		handedOut.ports = map[int]bool{}
	}
	for range 1000 {
		port, err := pick()
		if err != nil {
			return 0, err
		}
		if !handedOut.ports[port] {
			handedOut.ports[port] = true
			return port, nil
		}
	}
	return 0, errors.New("procgroup: no loopback port left that was not handed out already")
}

// Tail returns the last n lines of the file at path, for a diagnosis (the
// error's text when it cannot be read).
func Tail(path string, n int) string {
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
