package controlplane

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	dto "github.com/prometheus/client_model/go"
)

// TestMeasureIdleRedis measures what an idle control plane costs Redis with
// a sale of 100,000 released orders (FLASHGATE_TEST_IDLE_N sets another
// number): Redis busy time per second (INFO commandstats) and the slowest
// command (SLOWLOG) over 5 idle seconds of the leader's loops at their
// default periods. It only reports; run it by hand:
//
//	FLASHGATE_MEASURE=1 go test -run TestMeasureIdleRedis -v ./controlplane
func TestMeasureIdleRedis(t *testing.T) {
	if os.Getenv("FLASHGATE_MEASURE") == "" {
		t.Skip("a measurement: set FLASHGATE_MEASURE=1")
	}
	n := 100_000
	if v, err := strconv.Atoi(os.Getenv("FLASHGATE_TEST_IDLE_N")); err == nil && v > 0 {
		n = v
	}
	e := newEnv(t, sqliteDSN(t), func(c *Config) { c.Logger = nil })
	e.bigReleasedSale("big", n)
	ctx, stop := context.WithCancel(e.ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = e.svc.Run(ctx) }()
	defer func() { stop(); wg.Wait() }()
	// The first passes deliver what there is; once the pending releases are
	// empty and a re-sync pass after that has run, the system is idle.
	testwait.Eventually(t, 60*time.Second, func() bool {
		list, _, err := e.db.PendingReleases(e.ctx, "big", 1)
		return err == nil && len(list) == 0
	}, "the pending releases to drain")
	passes := e.resyncPasses()
	testwait.Eventually(t, 60*time.Second, func() bool { return e.resyncPasses() > passes+1 },
		"a re-sync pass after the queue drained")
	for _, c := range [][]any{{"config", "set", "slowlog-log-slower-than", "0"}, {"config", "set", "slowlog-max-len", "100000"},
		{"slowlog", "reset"}, {"config", "resetstat"}} {
		if err := e.rdb.Do(e.ctx, c...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	const idle = 5 * time.Second
	time.Sleep(idle) // the window measured: not a wait
	info, err := e.rdb.Info(e.ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var usec, calls int64
	for name, st := range redistest.CommandStats(info) {
		if name != "info" {
			usec += st.Usec
			calls += st.Calls
		}
	}
	logs, err := e.rdb.SlowLogGet(e.ctx, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	var slowest time.Duration
	var slowCmd string
	for _, l := range logs {
		if l.Duration > slowest && len(l.Args) > 0 && !strings.EqualFold(l.Args[0], "info") {
			slowest, slowCmd = l.Duration, strings.ToLower(l.Args[0])
		}
	}
	t.Logf("idle with %d released orders: Redis busy %.3f ms per second (%d calls in %v); slowest command %s %v",
		n, float64(usec)/1000/idle.Seconds(), calls, idle, slowCmd, slowest)
}

// resyncPasses is the flashgate_resync_total of e's control plane.
func (e *env) resyncPasses() float64 {
	var m dto.Metric
	if err := e.svc.metrics.Resyncs.Write(&m); err != nil {
		e.t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
