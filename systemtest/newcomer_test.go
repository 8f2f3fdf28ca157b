package systemtest

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestNewcomerCommands runs what the README's first screen tells a newcomer
// to run, as they would: `make demo`, then `bin/flashgate demo --serve` with
// its default flags, and opens the item page and dashboard URLs it prints. A
// README command that fails on a fresh machine cannot land again.
func TestNewcomerCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the real binary")
	}
	root := moduleRoot(t)
	// demo --serve listens on its defaults, :8080 and 127.0.0.1:8081.
	for _, addr := range []string{":8080", "127.0.0.1:8081"} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			if os.Getenv("CI") == "" {
				t.Skipf("%s is in use on this machine (demo --serve needs it): %v", addr, err)
			}
			t.Fatalf("%s is in use (demo --serve needs it): %v", addr, err)
		}
		ln.Close()
	}

	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	// make demo: builds bin/flashgate and runs the whole demo.
	mk := exec.CommandContext(ctx, "make", "--no-print-directory", "demo")
	mk.Dir = root
	mk.Env = cleanEnv()
	out, err := mk.CombinedOutput()
	if err != nil {
		t.Fatalf("make demo: %v\n%s", err, out)
	}
	if !bytes.Contains(out, []byte("demo: every invariant held")) {
		t.Fatalf("make demo did not report every invariant held:\n%s", out)
	}
	// A warning or an error in the demo's output reads as something broken
	// to a newcomer: the demo has none (the embedded store's lack of
	// replication is said at info).
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
			t.Errorf("make demo logged a warning or an error: %s", l)
		}
	}

	// bin/flashgate demo --serve, no other flags.
	cmd := exec.CommandContext(ctx, filepath.Join(root, "bin", "flashgate"), "demo", "--serve")
	cmd.Env = cleanEnv()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	urls := make(chan map[string][]string, 1)
	go func() {
		found := map[string][]string{}
		line := regexp.MustCompile(`^\s+(item page|dashboard)\s+(http://\S+)`)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := line.FindStringSubmatch(sc.Text()); m != nil {
				found[m[1]] = append(found[m[1]], m[2])
			}
			if strings.HasPrefix(strings.TrimSpace(sc.Text()), "token") {
				urls <- found
				_, _ = io.Copy(io.Discard, stdout)
				break
			}
		}
		close(urls)
		exited <- cmd.Wait()
	}()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("demo --serve did not stop within 15s of SIGINT")
		}
	}()

	var found map[string][]string
	select {
	case found = <-urls:
	case <-ctx.Done():
		t.Fatalf("demo --serve printed no URLs; stderr:\n%s", stderr.String())
	}
	if found == nil {
		t.Fatalf("demo --serve ended before printing its URLs; stderr:\n%s", stderr.String())
	}
	if len(found["item page"]) == 0 || len(found["dashboard"]) == 0 {
		t.Fatalf("demo --serve printed %v, want item page and dashboard URLs; stderr:\n%s", found, stderr.String())
	}
	client := &http.Client{Timeout: 10 * time.Second}
	for _, u := range append(found["item page"], found["dashboard"]...) {
		if strings.Contains(u, "[::]") || strings.Contains(u, "0.0.0.0") {
			t.Errorf("printed URL %s is not one a browser can use", u)
		}
		resp, err := client.Get(u)
		if err != nil {
			t.Errorf("GET %s: %v", u, err)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Contains(bytes.ToLower(body), []byte("<html")) {
			t.Errorf("GET %s = %d (%d bytes), want 200 and a page", u, resp.StatusCode, len(body))
		}
	}
}

// moduleRoot is the folder of go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// cleanEnv is the test's environment without FLASHGATE_ settings, so the
// binary runs with its defaults as a newcomer's would.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FLASHGATE_") {
			env = append(env, kv)
		}
	}
	return env
}
