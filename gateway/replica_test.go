package gateway

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/lua"
)

func TestReplicaHealth(t *testing.T) {
	tests := []struct {
		name, info string
		ok         bool
	}{
		{"linked", "role:slave\r\nmaster_link_status:up\r\nmaster_sync_in_progress:0\r\nloading:0\r\n", true},
		{"primary", "role:master\r\nconnected_slaves:1\r\nloading:0\r\n", true},
		{"link down", "role:slave\r\nmaster_link_status:down\r\nmaster_sync_in_progress:0\r\nloading:0\r\n", false},
		{"syncing", "role:slave\r\nmaster_link_status:down\r\nmaster_sync_in_progress:1\r\nloading:0\r\n", false},
		{"loading", "role:slave\r\nmaster_link_status:up\r\nmaster_sync_in_progress:0\r\nloading:1\r\n", false},
		{"async loading", "role:slave\r\nmaster_link_status:up\r\nmaster_sync_in_progress:0\r\nasync_loading:1\r\n", false},
		{"empty", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := replicaHealth(tc.info)
			if got := err == nil; got != tc.ok {
				t.Fatalf("got %v, want ok %v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, errReplicaStale) {
				t.Fatalf("got %v, want errReplicaStale", err)
			}
		})
	}
}

// TestStaleReplicaNotRead runs a real primary and replica: while the
// replica is cut off from its primary (it keeps serving its old data), the
// gateway reads sale state from the primary, and goes back to the replica
// once it is linked again.
func TestStaleReplicaNotRead(t *testing.T) {
	rs := redistest.Start(t)
	rp := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(rs.Port))
	rp.WaitReplica(t)
	primary, replica := rs.Client(t), rp.Client(t)
	ctx := context.Background()
	if err := lua.Prepare.Run(ctx, primary, lua.SaleKeys("s1"), 100, 150, 1, 500).Err(); err != nil {
		t.Fatal(err)
	}
	if err := lua.SetState.Run(ctx, primary, lua.SaleKeys("s1"), "open").Err(); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 5*time.Second, replicaHas(replica, lua.FieldStart, "1"), "the replica to get %s = 1", lua.FieldStart)
	cat := &fakeCatalog{}
	cat.put(flashgate.Sale{ID: "s1", Name: "W", PriceCents: 500, Total: 100})
	s, err := New(Config{
		Primary: primary, Replica: replica, Reserver: &fakeReserver{}, Catalog: cat, JWTSecret: testSecret,
		ReplicaCheck: time.Nanosecond, UserRate: -1, ShutdownDelay: -1, Logger: discard(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	h := s.Handler()
	state := func() string {
		t.Helper()
		s.refreshState(ctx)
		b := string(do(h, req{method: "GET", path: "/api/sales/s1"}).Body())
		_, after, _ := strings.Cut(b, `"state":"`)
		st, _, _ := strings.Cut(after, `"`)
		return st
	}
	hmgets := func() int64 { return cmdStats(t, replica)["hmget"] }
	if got := state(); got != "open" {
		t.Fatalf("linked replica: got state %q, want open", got)
	}
	if hmgets() == 0 {
		t.Fatalf("got no HMGET on the linked replica")
	}

	// Cut the replica off (it points at a port nobody listens on) and
	// close the sale on the primary: the replica still says open.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	if err := replica.Do(ctx, "REPLICAOF", "127.0.0.1", strconv.Itoa(dead)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := lua.SetState.Run(ctx, primary, lua.SaleKeys("s1"), "closed").Err(); err != nil {
		t.Fatal(err)
	}
	if v, _ := replica.HGet(ctx, lua.SaleKey("s1"), lua.FieldClosed).Result(); v == "1" {
		t.Fatalf("the cut-off replica saw the close: the test shows nothing")
	}
	before := hmgets()
	for i := 0; i < 3; i++ {
		if got := state(); got != "closed" {
			t.Fatalf("cut-off replica: got state %q, want closed (read from the primary)", got)
		}
	}
	if got := hmgets(); got != before {
		t.Fatalf("got %d HMGETs on the cut-off replica, want none", got-before)
	}

	// Linked again: reads go back to it.
	if err := replica.Do(ctx, "REPLICAOF", "127.0.0.1", strconv.Itoa(rs.Port)).Err(); err != nil {
		t.Fatal(err)
	}
	rp.WaitReplica(t)
	testwait.Eventually(t, 5*time.Second, replicaHas(replica, lua.FieldClosed, "1"), "the replica to get %s = 1", lua.FieldClosed)
	if got := state(); got != "closed" {
		t.Fatalf("relinked replica: got state %q, want closed", got)
	}
	if got := hmgets(); got == before {
		t.Fatalf("got no HMGET on the relinked replica")
	}
}

// replicaHas reports whether the replica's s1 hash holds field = want.
func replicaHas(replica *redis.Client, field, want string) func() bool {
	return func() bool {
		v, _ := replica.HGet(context.Background(), lua.SaleKey("s1"), field).Result()
		return v == want
	}
}

// TestReplicaLagNotFound: a sale the catalog knows and the replica does not
// hold yet (a replica lagging its primary; here a second server that never
// got the write) is read on the primary: its buyers get orders, not the
// 404 not_found they used to get until the replica caught up. An id the
// catalog does not know costs no primary read.
func TestReplicaLagNotFound(t *testing.T) {
	primary, replica := redistest.Start(t).Client(t), redistest.Start(t).Client(t)
	ctx := context.Background()
	if err := lua.Prepare.Run(ctx, primary, []string{lua.SaleKey("new")}, 10, 10, 1, 500).Err(); err != nil {
		t.Fatal(err)
	}
	if err := lua.SetState.Run(ctx, primary, []string{lua.SaleKey("new")}, "open").Err(); err != nil {
		t.Fatal(err)
	}
	cat := &fakeCatalog{}
	cat.put(flashgate.Sale{ID: "new", Name: "W", PriceCents: 500, Total: 10, State: flashgate.StateOpen})
	s, err := New(Config{
		Primary: primary, Replica: replica, Reserver: &fakeReserver{}, Catalog: cat, JWTSecret: testSecret,
		UserRate: -1, ShutdownDelay: -1, Logger: discard(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	h := s.Handler()
	if r := do(h, req{method: "POST", path: "/api/sales/new/orders", token: token(t, "u1")}); r.StatusCode() != 201 {
		t.Fatalf("first purchase, replica behind: got %d %s, want 201", r.StatusCode(), r.Body())
	}
	s.refreshState(ctx)
	if r := do(h, req{method: "POST", path: "/api/sales/new/orders", token: token(t, "u2")}); r.StatusCode() != 201 {
		t.Fatalf("purchase after a refresh, replica behind: got %d %s, want 201", r.StatusCode(), r.Body())
	}
	before := cmdStats(t, primary)["hmget"]
	if r := do(h, req{method: "POST", path: "/api/sales/nosuch/orders", token: token(t, "u3")}); r.StatusCode() != 404 {
		t.Fatalf("unknown id: got %d %s, want 404", r.StatusCode(), r.Body())
	}
	if got := cmdStats(t, primary)["hmget"] - before; got != 0 {
		t.Errorf("HMGETs on the primary loading an id the catalog does not know: got %d, want 0", got)
	}
	before = cmdStats(t, primary)["hmget"]
	s.refreshState(ctx)
	if got := cmdStats(t, primary)["hmget"] - before; got != 1 {
		t.Errorf("HMGETs on the primary in a refresh: got %d, want 1 (the known sale's only)", got)
	}
}

// TestReadsHitReplica runs the gateway on a real primary and replica and
// reads INFO commandstats on both.
func TestReadsHitReplica(t *testing.T) {
	rs := redistest.Start(t)
	rp := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(rs.Port))
	rp.WaitReplica(t)
	primary, replica := rs.Client(t), rp.Client(t)
	ctx := context.Background()
	if err := lua.Prepare.Run(ctx, primary, lua.SaleKeys("s1"), 100, 150, 1, 500).Err(); err != nil {
		t.Fatal(err)
	}
	if err := lua.SetState.Run(ctx, primary, lua.SaleKeys("s1"), "open").Err(); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 5*time.Second, replicaHas(replica, lua.FieldStart, "1"), "the replica to get %s = 1", lua.FieldStart)
	for _, c := range []*redis.Client{primary, replica} {
		if err := c.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	cat := &fakeCatalog{}
	cat.put(flashgate.Sale{ID: "s1", Name: "W", PriceCents: 500, Total: 100})
	fr := &fakeReserver{}
	s, err := New(Config{
		Primary: primary, Replica: replica, Reserver: fr, Catalog: cat, JWTSecret: testSecret,
		StateRefresh: 5 * time.Millisecond, FlushInterval: 5 * time.Millisecond, UserRate: -1, ShutdownDelay: -1,
		Logger: discard(),
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	h := s.Handler()
	for i := 0; i < 30; i++ {
		do(h, req{method: "GET", path: "/api/sales/s1"})
		if r := do(h, req{method: "POST", path: "/api/sales/s1/orders", token: token(t, "u"+strconv.Itoa(i))}); r.StatusCode() != 201 {
			t.Fatalf("purchase: got %d %s", r.StatusCode(), r.Body())
		}
	}
	// Wait for a few state refreshes to have read the replica.
	testwait.Eventually(t, 5*time.Second, func() bool { return cmdStats(t, replica)["hmget"] >= 3 },
		"three state refreshes to read the replica")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got, _ := primary.HGet(ctx, lua.SaleKey("s1"), lua.FieldAccess).Int64(); got != 30 {
		t.Fatalf("got access %d on the primary, want 30", got)
	}
	pStats := cmdStats(t, primary)
	rStats := cmdStats(t, replica)
	if rStats["hmget"] == 0 {
		t.Fatalf("got no HMGET on the replica (stats %v)", rStats)
	}
	if pStats["hmget"] != 0 {
		t.Fatalf("got %d HMGETs on the primary, want 0", pStats["hmget"])
	}
	if pStats["hincrby"] == 0 {
		t.Fatalf("got no HINCRBY on the primary (stats %v)", pStats)
	}
}

// TestReplicaFallback reads from the primary when the replica is down, and
// answers 503 for a new sale when both are.
func TestReplicaFallback(t *testing.T) {
	rs := redistest.Start(t)
	dead := redistest.Start(t)
	primary, replica := rs.Client(t), dead.Client(t)
	dead.Stop()
	ctx := context.Background()
	if err := lua.Prepare.Run(ctx, primary, lua.SaleKeys("s1"), 10, 15, 1, 500).Err(); err != nil {
		t.Fatal(err)
	}
	cat := &fakeCatalog{}
	s, err := New(Config{Primary: primary, Replica: replica, Reserver: &fakeReserver{}, Catalog: cat,
		JWTSecret: testSecret, Logger: discard(), RedisTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if r := do(s.Handler(), req{method: "POST", path: "/api/sales/s1/orders", token: token(t, "u1")}); errCode(r) != "not_started" {
		t.Fatalf("replica down: got %d %s, want not_started read from the primary", r.StatusCode(), r.Body())
	}
	if r := do(s.Handler(), req{method: "GET", path: "/readyz"}); r.StatusCode() != 503 {
		t.Fatalf("readyz with the replica down: got %d, want 503", r.StatusCode())
	}
	rs.Stop()
	if r := do(s.Handler(), req{method: "POST", path: "/api/sales/s2/orders", token: token(t, "u1")}); r.StatusCode() != 503 || errCode(r) != "unavailable" {
		t.Fatalf("both down: got %d %s, want 503 unavailable", r.StatusCode(), r.Body())
	}
}
