package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/inventory"
	"github.com/flashgate/flashgate/lua"
	"github.com/flashgate/flashgate/ordersink"
	"github.com/flashgate/flashgate/sqldb"
)

// TestSinkHelperProcess is not a test: TestOrdersinkRestart runs the test
// binary again with FLASHGATE_SINK_HELPER=1 to get an order sink process of
// its own (its own pid), configured through FLASHGATE_* variables.
func TestSinkHelperProcess(t *testing.T) {
	if os.Getenv("FLASHGATE_SINK_HELPER") != "1" {
		t.Skip("helper process only")
	}
	err := run(context.Background(), []string{"ordersink"}, os.Stdout, os.Stderr, os.Getenv)
	fmt.Fprintln(os.Stderr, "ordersink exited:", err)
	os.Exit(exitCode(err))
}

// TestOrdersinkRestart kills an order sink process (kill -9) while it
// holds a read but unacknowledged entry (its database insert blocked by a
// write lock), and starts another process with the same flags: the entry
// is in the database within 2s. Under a name with the pid in it, the entry
// waited 30s for another sink to claim it.
func TestOrdersinkRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	rs := redistest.Start(t)
	rdb := rs.Client(t)
	ctx := context.Background()
	dbPath := filepath.Join(t.TempDir(), "fg.db")
	db, err := sqldb.Open(ctx, "sqlite://"+dbPath) // creates the schema
	if err != nil {
		t.Fatal(err)
	}
	_ = db.Close()
	const sale = "rs"
	if err := rdb.SAdd(ctx, lua.SalesKey(), sale).Err(); err != nil {
		t.Fatal(err)
	}
	if err := lua.Prepare.Run(ctx, rdb, lua.SaleKeys(sale), 10, 10, 1, 700).Err(); err != nil {
		t.Fatal(err)
	}
	if err := lua.SetState.Run(ctx, rdb, lua.SaleKeys(sale), "open").Err(); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	admin := ln.Addr().String()
	_ = ln.Close()
	start := func() *exec.Cmd {
		t.Helper()
		cmd := exec.Command(os.Args[0], "-test.run=^TestSinkHelperProcess$")
		cmd.Env = append(os.Environ(), "FLASHGATE_SINK_HELPER=1", "FLASHGATE_REDIS="+rs.URL,
			"FLASHGATE_DB=sqlite://"+dbPath, "FLASHGATE_ADMIN_LISTEN="+admin, "FLASHGATE_LOG_LEVEL=warn")
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	first := start()
	testwait.Eventually(t, 30*time.Second, func() bool {
		g, err := rdb.XInfoGroups(ctx, lua.OrdersKey(sale)).Result()
		return err == nil && len(g) == 1
	}, "the first sink's consumer group")
	// Hold SQLite's write lock: the sink reads the entry and blocks on its
	// insert.
	lock, err := sql.Open("sqlite", dbPath+"?_busy_timeout=10000") // a commit may be under way
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	conn, err := lock.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	keys := lua.ReserveKeys(sale)
	const order = "01JBX0RESTARTEDSINK0000000"
	if err := lua.Reserve.Run(ctx, rdb, keys, order, "u1", 1, time.Now().UnixMilli(), sale).Err(); err != nil {
		t.Fatal(err)
	}
	var holder string
	testwait.Eventually(t, 10*time.Second, func() bool {
		p, err := rdb.XPending(ctx, lua.OrdersKey(sale), lua.SinkGroup).Result()
		if err != nil || p.Count != 1 {
			return false
		}
		for c := range p.Consumers {
			holder = c
		}
		return true
	}, "the first sink to hold the entry")
	_ = first.Process.Kill()
	_ = first.Wait()
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close()

	began := time.Now()
	start()
	testwait.Eventually(t, 2*time.Second, func() bool {
		var n int
		err := lock.QueryRowContext(ctx, "SELECT count(*) FROM orders WHERE order_id = ?", order).Scan(&n)
		return err == nil && n == 1
	}, "the order's row after the restart")
	t.Logf("entry held by %q stored %v after the restart", holder, time.Since(began).Round(time.Millisecond))
	// The entry is acknowledged right after its row commits.
	testwait.Eventually(t, 2*time.Second, func() bool {
		p, err := rdb.XPending(ctx, lua.OrdersKey(sale), lua.SinkGroup).Result()
		return err == nil && p.Count == 0
	}, "the entry acknowledged after the restart")
}

func TestSinkFlags(t *testing.T) {
	base := []string{"ordersink", "--redis", "redis://127.0.0.1:1/0"}
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string // substring of the error; "" = valid
	}{
		{[]string{"--sink-wait-replicas", "-1"}, nil, "sink-wait-replicas"},
		{[]string{"--sink-wait-replicas", "some"}, nil, "sink-wait-replicas"},
		{[]string{"--sink-wait-timeout", "0s"}, nil, "--sink-wait-timeout must be positive"},
		{[]string{"--sink-claim-idle", "-1s"}, nil, "--sink-claim-idle must be positive"},
		{[]string{"--sink-name", "two words"}, nil, "--sink-name"},
		{nil, map[string]string{"FLASHGATE_SINK_NAME": "ordersink-0", "FLASHGATE_SINK_WAIT_REPLICAS": "1"}, ""},
	} {
		cfg, err := parseConfig("ordersink", append(base[1:], tc.args...), &bytes.Buffer{}, env(tc.env))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q %v: got %v, want no error", tc.args, tc.env, err)
		case tc.want == "" && (cfg.SinkName != "ordersink-0" || cfg.SinkWaitReplicas != 1 || cfg.SinkClaimIdle != 30*time.Second):
			t.Errorf("%v: got name %q, wait %d, claim %v; want ordersink-0, 1, 30s", tc.env, cfg.SinkName, cfg.SinkWaitReplicas, cfg.SinkClaimIdle)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: got %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}

// TestSinkWaitReplicasFlag: --sink-wait-replicas defaults to auto (the
// replicas the primary has), 0 turns WAIT off, a number asks for exactly
// that many.
func TestSinkWaitReplicasFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int
	}{
		{nil, ordersink.WaitAuto},
		{[]string{"--sink-wait-replicas", "auto"}, ordersink.WaitAuto},
		{[]string{"--sink-wait-replicas", "0"}, ordersink.WaitOff},
		{[]string{"--sink-wait-replicas", "2"}, 2},
	} {
		cfg, err := parseConfig("ordersink", append([]string{"--redis", "redis://127.0.0.1:1/0"}, tc.args...), &bytes.Buffer{}, env(nil))
		if err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		if cfg.SinkWaitReplicas != tc.want {
			t.Errorf("%q: got %d, want %d", tc.args, cfg.SinkWaitReplicas, tc.want)
		}
		if got := sinkConfig(&stack{log: slog.New(slog.DiscardHandler)}, cfg).WaitReplicas; got != tc.want {
			t.Errorf("%q: ordersink.Config.WaitReplicas: got %d, want %d", tc.args, got, tc.want)
		}
	}
}

// TestWaitReplicasFlag: --wait-replicas defaults to auto (the replicas the
// sale's primary has online), 0 turns WAIT off, a number asks for exactly
// that many.
func TestWaitReplicasFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int
	}{
		{nil, inventory.WaitAuto},
		{[]string{"--wait-replicas", "auto"}, inventory.WaitAuto},
		{[]string{"--wait-replicas", "0"}, inventory.WaitOff},
		{[]string{"--wait-replicas", "2"}, 2},
	} {
		cfg, err := parseConfig("inventory", append([]string{"--redis", "redis://127.0.0.1:1/0"}, tc.args...), &bytes.Buffer{}, env(nil))
		if err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		if got := inventoryWait(cfg.WaitReplicas); got != tc.want {
			t.Errorf("%q: got %d, want %d", tc.args, got, tc.want)
		}
	}
}
