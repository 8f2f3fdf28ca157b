package replwait

import (
	"context"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/flashgate/flashgate/internal/testenv/redistest"
)

// TestMain fails the package's tests if any goroutine outlives them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestWantReadsOncePerEvery: concurrent writes that find the count old
// read it once, and wait for that read; Reread reads at once.
func TestWantReadsOncePerEvery(t *testing.T) {
	var c Count
	reads := 0
	read := func(c *Count) { reads++; c.Store(2) }
	var wg sync.WaitGroup
	got := make([]int, 8)
	for i := range got {
		wg.Go(func() { got[i] = c.Want(read) })
	}
	wg.Wait()
	for i, n := range got {
		if n != 2 {
			t.Errorf("write %d: got %d replicas, want 2", i, n)
		}
	}
	if reads != 1 {
		t.Errorf("got %d reads, want 1", reads)
	}
	if n := c.Reread(func(c *Count) { reads++; c.Store(1) }); n != 1 || reads != 2 {
		t.Errorf("Reread: got %d replicas after %d reads, want 1 after 2", n, reads)
	}
	var cs Counts
	if cs.Of("a") != cs.Of("a") || cs.Of("a") == cs.Of("b") {
		t.Error("Of: want one Count per address")
	}
}

// TestRead: a primary on its own has 0 online replicas and can tell.
func TestRead(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	n, known, err := Read(context.Background(), rdb)
	if n != 0 || !known || err != nil {
		t.Errorf("Read: got %d, %v, %v; want 0, true, nil", n, known, err)
	}
}
