package ordersink_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/ordersink"
)

// TestCloseEndsRun: Close ends a Run whose context never ends; a second Close is safe, a Run after Close
// returns at once, and goleak (no option but the goroutines that were there
// before) finds nothing the Drainer started.
func TestCloseEndsRun(t *testing.T) {
	e := newEnv(t, "sqlite://"+filepath.Join(t.TempDir(), "fg.db"))
	before := goleak.IgnoreCurrent()
	d := drainer(e, nil, ordersink.Config{Block: 20 * time.Millisecond})
	done := make(chan error, 1)
	go func() { done <- d.Run(context.Background()) }()
	ids := e.reserve(t, "u", 50)
	testwait.Eventually(t, 10*time.Second, func() bool {
		f, _ := e.db.Figures(context.Background(), sale)
		return f.Persisted == int64(len(ids))
	}, "all rows")
	if err := d.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: got %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run still running 10 s after Close")
	}
	if err := d.Close(); err != nil {
		t.Fatalf("Close again: %v", err)
	}
	ran := make(chan error, 1)
	go func() { ran <- d.Run(context.Background()) }()
	select {
	case err := <-ran:
		if err != nil {
			t.Errorf("Run after Close: got %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run after Close did not return")
	}
	e.check(t, ids)
	if err := goleak.Find(before); err != nil {
		t.Errorf("goroutines left after Close: %v", err)
	}
}
