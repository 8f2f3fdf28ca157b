package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/flashgate/flashgate/internal/testenv/procgroup"
)

// runner starts every process of the run, records the command lines for
// the report, and stops what is still running when the run ends.
type runner struct {
	dir     string
	env     []string // added to every child's environment
	mu      sync.Mutex
	procs   []*procgroup.Proc
	cmds    []string
	aliases [][2]string // literal → symbol, applied to recorded commands
}

// alias makes recorded commands show sym instead of literal (ports, the
// temp dir, secrets).
func (r *runner) alias(literal, sym string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.aliases = append(r.aliases, [2]string{literal, sym})
}

func (r *runner) record(env []string, args []string) {
	var b strings.Builder
	for _, e := range env {
		b.WriteString(e + " ")
	}
	for i, a := range args {
		if i > 0 {
			b.WriteByte(' ')
		}
		// Double quotes, so that the placeholders the report puts in
		// ($TOKEN_…) still read as variables.
		if a == "" || strings.ContainsAny(a, " \"'{}$*") {
			a = "\"" + strings.NewReplacer(`"`, `\"`, "`", "\\`").Replace(a) + "\""
		}
		b.WriteString(a)
	}
	r.mu.Lock()
	r.cmds = append(r.cmds, b.String())
	r.mu.Unlock()
}

// commands returns the recorded command lines with aliases applied, each
// once, in the order first run.
func (r *runner) commands() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	// Longer literals first, so that a port inside an address is not
	// replaced before the address.
	al := append([][2]string(nil), r.aliases...)
	for i := range al {
		for j := i + 1; j < len(al); j++ {
			if len(al[j][0]) > len(al[i][0]) {
				al[i], al[j] = al[j], al[i]
			}
		}
	}
	seen := map[string]bool{}
	var out []string
	for _, c := range r.cmds {
		for _, a := range al {
			c = strings.ReplaceAll(c, a[0], a[1])
		}
		if !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	return out
}

func (r *runner) command(ctx context.Context, env []string, args []string) *exec.Cmd {
	// Its own process group, so that stopping it stops its children too;
	// and killed with the run if the run dies without cleaning up.
	return procgroup.Command(ctx, procgroup.Spec{Args: args, Env: r.environ(env), DieWithParent: true})
}

// environ is the environment of a child: this process's, the runner's
// additions, then env.
func (r *runner) environ(env []string) []string {
	return append(append(os.Environ(), r.env...), env...)
}

// start runs a server in the background, its output in DIR/name.log.
func (r *runner) start(name string, env []string, args ...string) (*procgroup.Proc, error) {
	r.record(env, args)
	p, err := procgroup.Start(procgroup.Spec{
		Name: name, Args: args, Env: r.environ(env),
		Log: filepath.Join(r.dir, name+".log"), FreshLog: true, DieWithParent: true,
	})
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.procs = append(r.procs, p)
	r.mu.Unlock()
	return p, nil
}

// stop sends SIGTERM to the server's process group, then SIGKILL after
// 10 s.
func stop(p *procgroup.Proc) {
	if !p.Alive() {
		return
	}
	_ = p.Signal(syscall.SIGTERM)
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		_ = p.Kill()
	}
}

// stopAll stops every server still running, newest first.
func (r *runner) stopAll() {
	r.mu.Lock()
	ps := append([]*procgroup.Proc(nil), r.procs...)
	r.mu.Unlock()
	for i := len(ps) - 1; i >= 0; i-- {
		stop(ps[i])
	}
}

// output runs a command in the foreground, at most for limit, and returns
// its standard output.
func (r *runner) output(ctx context.Context, limit time.Duration, env []string, args ...string) (string, *os.ProcessState, error) {
	r.record(env, args)
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cmd := r.command(ctx, env, args)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		msg := strings.TrimSpace(errb.String())
		if len(msg) > 800 {
			msg = msg[len(msg)-800:]
		}
		switch {
		case parent.Err() != nil:
			return out.String(), cmd.ProcessState, parent.Err()
		case ctx.Err() != nil:
			err = fmt.Errorf("not done within %s", limit)
		}
		return out.String(), cmd.ProcessState, fmt.Errorf("%s: %w: %s", filepath.Base(args[0]), err, msg)
	}
	return out.String(), cmd.ProcessState, nil
}

// freeAddr returns a loopback address nobody listens on right now.
func freeAddr() (string, error) {
	port, err := procgroup.FreePort()
	if err != nil {
		return "", err
	}
	return "127.0.0.1:" + strconv.Itoa(port), nil
}

// waitHTTP polls url until it answers 200, at most for limit.
func waitHTTP(ctx context.Context, url string, p *procgroup.Proc, limit time.Duration) error {
	return p.WaitReady(ctx, limit, procgroup.HTTPReady(url))
}

// waitTCP polls addr until it accepts a connection, at most for limit.
func waitTCP(ctx context.Context, addr string, p *procgroup.Proc, limit time.Duration) error {
	return p.WaitReady(ctx, limit, procgroup.TCPReady(addr))
}

// procStatus reads a field of /proc/PID/status in kB (VmRSS, VmHWM).
func procStatus(pid int, field string) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				return strconv.ParseInt(f[0], 10, 64)
			}
		}
	}
	return 0, errors.New(field + " not found")
}

// cpuSeconds is the user and system time a live process has used so far.
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ is 100 on Linux
}

// openFDs counts a process's open file descriptors.
func openFDs(pid int) int {
	es, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	return len(es)
}

// rss is a process's resident set, in MB.
func rss(pid int) float64 {
	kb, _ := procStatus(pid, "VmRSS")
	return float64(kb) / 1024
}

func peakRSS(pid int) float64 {
	kb, _ := procStatus(pid, "VmHWM")
	return float64(kb) / 1024
}
