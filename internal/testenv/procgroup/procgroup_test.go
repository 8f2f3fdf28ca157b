package procgroup_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/flashgate/flashgate/internal/testenv/procgroup"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
)

// TestMain runs the test binary as a helper process when PROCGROUP_HELPER
// names a role: "serve ADDR" answers every GET with 200 on ADDR and prints
// "serving" and, on SIGTERM, "bye" before it exits 0; "child PIDFILE"
// starts a copy of itself as "sleep" in its own process group, writes that
// child's pid to PIDFILE and sleeps; "sleep" sleeps.
func TestMain(m *testing.M) {
	switch os.Getenv("PROCGROUP_HELPER") {
	case "":
		goleak.VerifyTestMain(m)
	case "serve":
		helperServe(os.Args[len(os.Args)-1])
	case "child":
		helperChild(os.Args[len(os.Args)-1])
	case "sleep":
		// Not a synchronisation: the helper lives until the test kills its
		// group; the minute only bounds it if the test never does.
		time.Sleep(time.Minute)
	}
	os.Exit(0)
}

func helperServe(addr string) {
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Println(err)
		os.Exit(2)
	}
	fmt.Println("serving")
	go func() { _ = http.Serve(ln, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})) }()
	<-term
	fmt.Println("bye")
}

func helperChild(pidfile string) {
	self, _ := os.Executable()
	// In this process's group: not through procgroup, which would give it
	// a group of its own.
	child := exec.Command(self)
	child.Env = append(os.Environ(), "PROCGROUP_HELPER=sleep")
	if err := child.Start(); err != nil {
		fmt.Println(err)
		os.Exit(2)
	}
	if err := os.WriteFile(pidfile, []byte(strconv.Itoa(child.Process.Pid)), 0o644); err != nil {
		os.Exit(2)
	}
	// Not a synchronisation: the parent lives until the test kills its
	// group; the minute only bounds it if the test never does.
	time.Sleep(time.Minute)
}

// helper is the Spec of a helper process in role with arg.
func helper(t *testing.T, name, role, arg string) procgroup.Spec {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return procgroup.Spec{
		Name: name, Args: []string{self, "-test.run=^$", arg},
		Env: append(os.Environ(), "PROCGROUP_HELPER="+role),
		Log: filepath.Join(t.TempDir(), name+".log"), DieWithParent: true,
	}
}

// gone reports whether no process has pid (a zombie counts as gone: it is
// no longer running).
func gone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && strings.HasPrefix(s[i+1:], " Z")
}

func freeAddr(t *testing.T) string {
	t.Helper()
	port, err := procgroup.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return "127.0.0.1:" + strconv.Itoa(port)
}

func TestStartReadyStop(t *testing.T) {
	addr := freeAddr(t)
	spec := helper(t, "server", "serve", addr)
	ctx := context.Background()
	for run := 1; run <= 2; run++ {
		p, err := procgroup.Start(spec)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.WaitReady(ctx, 30*time.Second, procgroup.HTTPReady("http://"+addr+"/ready")); err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		if err := p.WaitReady(ctx, 30*time.Second, procgroup.TCPReady(addr)); err != nil {
			t.Fatalf("run %d: TCPReady: %v", run, err)
		}
		if !p.Alive() || p.Err() != nil || p.State() != nil {
			t.Fatalf("run %d: got alive %v, err %v, state %v while serving, want true, nil, nil", run, p.Alive(), p.Err(), p.State())
		}
		if err := p.Stop(syscall.SIGTERM, 30*time.Second); err != nil {
			t.Fatalf("run %d: Stop: %v", run, err)
		}
		if p.Alive() || p.Err() != nil || !p.State().Success() {
			t.Errorf("run %d: got alive %v, err %v after Stop, want false, nil (exit 0)", run, p.Alive(), p.Err())
		}
		if err := p.Signal(syscall.SIGCONT); err == nil {
			t.Errorf("run %d: Signal after the exit: got nil, want an error", run)
		}
	}
	// Each start appends to the log after a start line.
	b, err := os.ReadFile(spec.Log)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Count(string(b), "start server\nserving\nbye\n")
	if got != 2 {
		t.Errorf("log: got %d runs of start line, serving, bye, want 2:\n%s", got, b)
	}
	if tail := procgroup.Tail(spec.Log, 2); tail != "serving\nbye" {
		t.Errorf("Tail(2): got %q, want %q", tail, "serving\nbye")
	}
}

func TestFreshLog(t *testing.T) {
	addr := freeAddr(t)
	spec := helper(t, "server", "serve", addr)
	spec.FreshLog = true
	for run := 0; run < 2; run++ {
		p, err := procgroup.Start(spec)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.WaitReady(context.Background(), 30*time.Second, procgroup.TCPReady(addr)); err != nil {
			t.Fatal(err)
		}
		if err := p.Stop(syscall.SIGTERM, 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(spec.Log)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != "serving\nbye\n" {
		t.Errorf("log: got %q, want only the last run's output", b)
	}
}

func TestExitDuringStartup(t *testing.T) {
	addr := freeAddr(t)
	ln, err := net.Listen("tcp", addr) // the helper cannot listen: it exits 2
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	p, err := procgroup.Start(helper(t, "server", "serve", addr))
	if err != nil {
		t.Fatal(err)
	}
	err = p.WaitReady(context.Background(), 30*time.Second, func(context.Context) error { return errors.New("never") })
	if err == nil || !strings.Contains(err.Error(), "exited during start-up") || !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("WaitReady: got %v, want an exit during start-up with the log's end", err)
	}
	if p.Err() == nil {
		t.Errorf("Err: got nil, want exit status 2")
	}
}

func TestNotReady(t *testing.T) {
	p, err := procgroup.Start(helper(t, "sleeper", "sleep", ""))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	err = p.WaitReady(context.Background(), 200*time.Millisecond, func(context.Context) error { return errors.New("not yet") })
	if err == nil || !strings.Contains(err.Error(), "not ready after 200ms: not yet") {
		t.Errorf("WaitReady: got %v, want not ready after 200ms", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.WaitReady(ctx, time.Minute, func(context.Context) error { return errors.New("not yet") }); !errors.Is(err, context.Canceled) {
		t.Errorf("WaitReady with an ended context: got %v, want context.Canceled", err)
	}
}

// TestGroup checks that Signal and Kill reach the process's children (its
// group), and that a frozen group dies of Kill.
func TestGroup(t *testing.T) {
	pidfile := filepath.Join(t.TempDir(), "pid")
	p, err := procgroup.Start(helper(t, "parent", "child", pidfile))
	if err != nil {
		t.Fatal(err)
	}
	var child int
	testwait.Eventually(t, 30*time.Second, func() bool {
		b, _ := os.ReadFile(pidfile)
		child, _ = strconv.Atoi(string(b))
		return child > 0
	}, "the child's pid in %s", pidfile)
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if p.Alive() {
		t.Errorf("parent alive after Kill")
	}
	testwait.Eventually(t, 10*time.Second, func() bool { return gone(child) }, "child %d gone", child)
}

// TestCommandContext checks that the end of Command's context kills the
// whole group, not only its first process.
func TestCommandContext(t *testing.T) {
	pidfile := filepath.Join(t.TempDir(), "pid")
	spec := helper(t, "parent", "child", pidfile)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := procgroup.Command(ctx, spec)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var child int
	testwait.Eventually(t, 30*time.Second, func() bool {
		b, _ := os.ReadFile(pidfile)
		child, _ = strconv.Atoi(string(b))
		return child > 0
	}, "the child's pid in %s", pidfile)
	cancel()
	if err := cmd.Wait(); err == nil {
		t.Errorf("Wait after cancel: got nil, want killed")
	}
	testwait.Eventually(t, 10*time.Second, func() bool { return gone(child) }, "child %d gone", child)
}
