package inventory_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/inventory"
	"github.com/flashgate/flashgate/lua"
)

// TestWaitAutoOnline: with the default WaitReplicas (WaitAuto), a reserve
// is on the primary's online replica when it is answered, and a crowd's
// reserves share their WAITs (one per batch).
func TestWaitAutoOnline(t *testing.T) {
	primary := redistest.Start(t, "--repl-diskless-sync-delay", "0")
	rdb := primary.Client(t)
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port))
	replica.WaitReplica(t)
	waitOnline(t, rdb, 1)
	rc := replica.Client(t)
	ctx := context.Background()
	prepSale(t, rdb, "auto", 1000, 1, "open")
	reg := prometheus.NewRegistry()
	svc := inventory.New(rdb, inventory.Config{Logger: quiet(), Metrics: reg})
	before := redistest.Commands(t, rdb)["wait"].Calls
	for i := range 10 {
		user := "u" + strconv.Itoa(i)
		id, err := svc.Reserve(ctx, "auto", user, "", 1)
		if err != nil {
			t.Fatalf("Reserve: %v", err)
		}
		if got, err := rc.HGet(ctx, lua.BuyersKey("auto"), user).Result(); err != nil || got != id {
			t.Fatalf("replica buyer %s right after Reserve: got %q, %v; want %q", user, got, err, id)
		}
	}
	// The first reserve's EVALSHA finds no script: its WAIT goes twice.
	if got := redistest.Commands(t, rdb)["wait"].Calls - before; got != 11 {
		t.Errorf("WAITs for 10 reserves one after another: got %d, want 11", got)
	}

	// A crowd: 200 reserves at once share fewer WAITs.
	const crowd = 200
	before = redistest.Commands(t, rdb)["wait"].Calls
	var wg sync.WaitGroup
	errs := make(chan error, crowd)
	for i := range crowd {
		wg.Go(func() {
			if _, err := svc.Reserve(ctx, "auto", "c"+strconv.Itoa(i), "", 1); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("crowd Reserve: %v", err)
	}
	if n, err := rc.HLen(ctx, lua.BuyersKey("auto")).Result(); err != nil || n != 10+crowd {
		t.Errorf("replica buyers after the crowd: got %d, %v; want %d", n, err, 10+crowd)
	}
	waits := redistest.Commands(t, rdb)["wait"].Calls - before
	if waits < 1 || waits >= crowd {
		t.Errorf("WAITs for a crowd of %d: got %d, want 1..%d", crowd, waits, crowd-1)
	}
	// A batch whose EVALSHA finds no script (ReserveMany's first) sends
	// its WAIT twice; the metric counts batches.
	count, sum := waitBatch(t, reg)
	if count <= 10 || count > 10+uint64(waits) || sum != 10+crowd {
		t.Errorf("flashgate_reserve_wait_batch: got %d WAITs covering %v reserves, want 11..%d covering %d", count, sum, 10+waits, 10+crowd)
	}
	if count > 10 {
		t.Logf("a crowd of %d reserves: %d batches, %.1f reserves each", crowd, count-10, float64(crowd)/float64(count-10))
	}
}

// waitOnline waits until primary reports n replicas online, as a primary
// that had them for a second would.
func waitOnline(t *testing.T, primary *redis.Client, n int) {
	t.Helper()
	if _, ok := testwait.For(10*time.Second, func() bool {
		info, err := primary.Info(context.Background(), "replication").Result()
		return err == nil && flashgate.OnlineReplicas(info) == n
	}); !ok {
		t.Fatalf("the primary never had %d replicas online", n)
	}
}

// waitBatch reads flashgate_reserve_wait_batch's count and sum from reg.
func waitBatch(t *testing.T, reg *prometheus.Registry) (uint64, float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "flashgate_reserve_wait_batch" {
			var h *dto.Histogram = mf.GetMetric()[0].GetHistogram()
			return h.GetSampleCount(), h.GetSampleSum()
		}
	}
	t.Fatal("no flashgate_reserve_wait_batch")
	return 0, 0
}

// TestWaitAutoHeldBack: a replica that is online but held back (its link
// paused) holds the answer: the reserve is answered ErrUnavailable (503,
// never 201) within the bound, and so is a retry while it lags (a 409
// naming the order would confirm it); once the replica catches up, the
// retry finds the order with its id.
func TestWaitAutoHeldBack(t *testing.T) {
	primary := redistest.Start(t, "--repl-diskless-sync-delay", "0")
	rdb := primary.Client(t)
	link := redistest.StartProxy(t, primary.Addr)
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(link.Port))
	replica.WaitReplica(t)
	waitOnline(t, rdb, 1)
	rc := replica.Client(t)
	ctx := context.Background()
	prepSale(t, rdb, "held", 10, 1, "open")
	// A generous bound while the replica is in step (a busy machine), a
	// short one while it is held back.
	if _, err := inventory.New(rdb, inventory.Config{Logger: quiet(), WaitTimeout: 5 * time.Second}).Reserve(ctx, "held", "first", "", 1); err != nil {
		t.Fatalf("Reserve with the replica in step: %v", err)
	}
	svc := inventory.New(rdb, inventory.Config{Logger: quiet(), WaitTimeout: 250 * time.Millisecond})

	link.Pause()
	id, err := svc.Reserve(ctx, "held", "u1", "", 1)
	if id != "" || !errors.Is(err, flashgate.ErrUnavailable) {
		t.Fatalf("Reserve with the replica held back: got %q, %v; want \"\", ErrUnavailable", id, err)
	}
	stored, err := rdb.HGet(ctx, lua.BuyersKey("held"), "u1").Result()
	if err != nil || !flashgate.ValidOrderID(stored) {
		t.Fatalf("buyer entry after the short WAIT: got %q, %v; want an order id", stored, err)
	}
	if id, err := svc.Reserve(ctx, "held", "u1", "", 1); id != "" || !errors.Is(err, flashgate.ErrUnavailable) {
		t.Fatalf("retry with the replica still held back: got %q, %v; want \"\", ErrUnavailable", id, err)
	}
	if n, _ := rc.HExists(ctx, lua.BuyersKey("held"), "u1").Result(); n {
		t.Fatal("the held-back replica holds the order already")
	}

	link.Resume()
	var pe *flashgate.PurchasedError
	if _, ok := testwait.For(10*time.Second, func() bool {
		_, err = svc.Reserve(ctx, "held", "u1", "", 1)
		return errors.As(err, &pe)
	}); !ok {
		t.Fatalf("retry after the replica caught up: got %v; want PurchasedError{%s}", err, stored)
	}
	if pe.OrderID != stored {
		t.Errorf("retry after the replica caught up: got order %s, want %s", pe.OrderID, stored)
	}
	if got, err := rc.HGet(ctx, lua.BuyersKey("held"), "u1").Result(); err != nil || got != stored {
		t.Errorf("replica buyer after the retry: got %q, %v; want %q", got, err, stored)
	}
}

// TestWaitAutoReplicaGone: a replica that dies is not waited for: the
// reserve right after is answered, not 503 for the second the count of
// online replicas is kept.
func TestWaitAutoReplicaGone(t *testing.T) {
	primary := redistest.Start(t, "--repl-diskless-sync-delay", "0")
	rdb := primary.Client(t)
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port))
	replica.WaitReplica(t)
	waitOnline(t, rdb, 1)
	ctx := context.Background()
	prepSale(t, rdb, "gone", 10, 1, "open")
	svc := inventory.New(rdb, inventory.Config{Logger: quiet(), WaitTimeout: 2 * time.Second})
	if _, err := svc.Reserve(ctx, "gone", "u0", "", 1); err != nil {
		t.Fatalf("Reserve with the replica up: %v", err)
	}
	replica.Stop()
	waitOnline(t, rdb, 0)
	if id, err := svc.Reserve(ctx, "gone", "u1", "", 1); err != nil || !flashgate.ValidOrderID(id) {
		t.Fatalf("Reserve right after the replica died: got %q, %v; want an order id", id, err)
	}
}

// TestWaitAutoNoReplica: a primary without replicas is not waited on, and
// its replica count is read once, not once a reserve.
func TestWaitAutoNoReplica(t *testing.T) {
	_, rdb := newRedis(t)
	ctx := context.Background()
	prepSale(t, rdb, "alone", 1000, 1, "open")
	svc := inventory.New(rdb, inventory.Config{Logger: quiet()})
	before := redistest.Commands(t, rdb)
	const n = 300
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if _, err := svc.Reserve(ctx, "alone", "u"+strconv.Itoa(i), "", 1); err != nil {
				t.Errorf("Reserve: %v", err)
			}
		})
	}
	wg.Wait()
	after := redistest.Commands(t, rdb)
	if got := after["wait"].Calls - before["wait"].Calls; got != 0 {
		t.Errorf("WAITs without a replica: got %d, want 0", got)
	}
	// INFO: one read of the replicas (two if a second passed), plus the
	// test's own INFO commandstats.
	if got := after["info"].Calls - before["info"].Calls; got < 2 || got > 3 {
		t.Errorf("INFO calls for %d reserves: got %d, want 2..3 (one replica count, one commandstats)", n, got)
	}
}

// TestWaitOff: WaitOff never waits, even with a replica online.
func TestWaitOff(t *testing.T) {
	primary := redistest.Start(t, "--repl-diskless-sync-delay", "0")
	rdb := primary.Client(t)
	redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port)).WaitReplica(t)
	waitOnline(t, rdb, 1)
	ctx := context.Background()
	prepSale(t, rdb, "off", 10, 1, "open")
	svc := inventory.New(rdb, inventory.Config{Logger: quiet(), WaitReplicas: inventory.WaitOff})
	before := redistest.Commands(t, rdb)["wait"].Calls
	for i := range 3 {
		if _, err := svc.Reserve(ctx, "off", "u"+strconv.Itoa(i), "", 1); err != nil {
			t.Fatalf("Reserve: %v", err)
		}
	}
	if got := redistest.Commands(t, rdb)["wait"].Calls - before; got != 0 {
		t.Errorf("WAITs with WaitOff: got %d, want 0", got)
	}
}
