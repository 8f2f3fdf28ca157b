// Package browsertest starts headless Chromium for tests, with the flags a
// machine without outside network needs.
package browsertest

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Binary returns the path of Chromium, or "" when it is not installed.
func Binary() string {
	for _, p := range []string{"/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	return ""
}

// New starts a headless Chromium for t with a window of w×h pixels and
// returns a chromedp context that ends after timeout; the browser closes
// with the test. Without Chromium it skips the test, or fails it when
// FLASHGATE_TEST_REQUIRE=1.
func New(t *testing.T, parent context.Context, w, h int, timeout time.Duration) context.Context {
	t.Helper()
	bin := Binary()
	if bin == "" {
		if os.Getenv("FLASHGATE_TEST_REQUIRE") == "1" {
			t.Fatal("browsertest: chromium not found (install Debian's chromium)")
		}
		t.Skip("browsertest: chromium not found")
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(bin),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(w, h),
		chromedp.UserDataDir(t.TempDir()),
	}
	actx, cancelA := chromedp.NewExecAllocator(parent, opts...)
	ctx, cancelB := chromedp.NewContext(actx)
	ctx, cancelT := context.WithTimeout(ctx, timeout)
	t.Cleanup(func() { cancelT(); cancelB(); cancelA() })
	return ctx
}
