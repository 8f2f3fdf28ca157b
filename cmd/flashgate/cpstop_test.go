package main

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
)

// TestControlplaneStopsWhileWaitingForPrimary stops (as at SIGTERM) a
// `flashgate controlplane` on a Sentinel set-up whose primary and replica
// were both killed, so that the Sentinel names a primary that never answers,
// while an admin call waits for it (for up to sentinelDialPatience). The
// call must be answered (503) and the process end without an error. Before,
// the stop waited the whole 10 s of the admin server's shutdown for the
// call, ended with "admin: context deadline exceeded", and the call's
// connection was closed unanswered; and the client's dial went on, on a
// goroutine of go-redis's, for a minute after Close (the package's leak
// check failed).
func TestControlplaneStopsWhileWaitingForPrimary(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	sen := redistest.StartSentinel(t)
	const adminTok = "stop-admin"
	cp := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var errb lockedBuffer
	done := make(chan error, 1)
	args := []string{"controlplane", "--redis", sen.URL(), "--db", "sqlite://" + filepath.Join(t.TempDir(), "fg.db"),
		"--admin-token", adminTok, "--admin-listen", cp, "--log-level", "debug"}
	go func() { done <- run(ctx, args, io.Discard, &errb, env(nil)) }()
	do := func(method, path, body string) (int, error) {
		req, _ := http.NewRequest(method, "http://"+cp+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+adminTok)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err
		}
		defer res.Body.Close()
		_, _ = io.Copy(io.Discard, res.Body)
		return res.StatusCode, nil
	}
	testwait.Eventually(t, 20*time.Second, func() bool {
		code, err := do("POST", "/admin/sales", `{"id":"stop","name":"Stop","price_cents":100,"total":5}`)
		return err == nil && code == 201
	}, "the control plane to create a sale")

	sen.Primary.Stop()
	sen.Replica.Stop()
	type answer struct {
		code int
		err  error
	}
	call := make(chan answer, 1)
	go func() {
		code, err := do("POST", "/admin/sales/stop/start", "")
		call <- answer{code, err}
	}()
	// The stop comes once the call is in its handler: a call still in the
	// listen queue at the stop is refused (connection reset), which is not
	// what this test is about. The leader's tick, not the call, may have
	// logged the first dial of the dead primary.
	testwait.Eventually(t, 20*time.Second, func() bool {
		s := errb.String()
		return strings.Contains(s, "dialling again") && strings.Contains(s, "path=/admin/sales/stop/start")
	}, "the admin call to wait for the primary")
	stopped := time.Now()
	cancel()
	err := <-done
	took := time.Since(stopped)
	a := <-call
	t.Logf("run returned %v after %v", err, took.Round(time.Millisecond))
	if err != nil {
		t.Errorf("run after the stop: got %v, want nil", err)
	}
	if a.err != nil || a.code != http.StatusServiceUnavailable {
		t.Errorf("the admin call waiting at the stop: got %d (err %v), want 503", a.code, a.err)
	}
}
