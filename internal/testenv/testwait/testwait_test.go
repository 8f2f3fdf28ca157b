package testwait

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestFor(t *testing.T) {
	var n atomic.Int64
	took, ok := For(5*time.Second, func() bool { return n.Add(1) == 4 })
	if !ok || n.Load() != 4 {
		t.Errorf("For: got ok %v after %d calls, want true after 4", ok, n.Load())
	}
	if took > 4*time.Second {
		t.Errorf("For: took %v for a condition true on the 4th call", took)
	}

	n.Store(0)
	took, ok = For(30*time.Millisecond, func() bool { n.Add(1); return false })
	if ok {
		t.Errorf("For on a condition never true: got ok, want false")
	}
	if took < 30*time.Millisecond {
		t.Errorf("For on a condition never true: gave up after %v, want at least the 30ms timeout", took)
	}
	if n.Load() < 2 {
		t.Errorf("For on a condition never true: got %d calls, want several", n.Load())
	}

	n.Store(0)
	if _, ok := For(0, func() bool { n.Add(1); return true }); !ok || n.Load() != 1 {
		t.Errorf("For with no time: got ok %v after %d calls, want one call that counts", ok, n.Load())
	}
}

// fatalTB records a Fatalf and stops its goroutine as testing.T does.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestEventually(t *testing.T) {
	run := func(cond func() bool) string {
		f := &fatalTB{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			Eventually(f, 20*time.Millisecond, cond, "the %s", "thing")
		}()
		<-done
		return f.msg
	}
	if got := run(func() bool { return true }); got != "" {
		t.Errorf("Eventually on a true condition: got failure %q, want none", got)
	}
	if got, want := run(func() bool { return false }), "waited 20ms for the thing"; got != want {
		t.Errorf("Eventually on a false condition: got %q, want %q", got, want)
	}
}

func TestUntil(t *testing.T) {
	at := time.Now().Add(30 * time.Millisecond)
	Until(at)
	if now := time.Now(); now.Before(at) {
		t.Errorf("Until(%v) returned at %v, before it", at, now)
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
