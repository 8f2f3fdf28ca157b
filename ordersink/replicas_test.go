package ordersink_test

import (
	"context"
	"errors"

	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/lua"
	"github.com/flashgate/flashgate/ordersink"
)

// refusing is a Store that refuses, as a database refuses a row, the
// orders whose ids are in refuse, until they are taken out.
type refusing struct {
	ordersink.Store
	mu     sync.Mutex
	refuse map[string]bool
}

func (r *refusing) InsertOrders(ctx context.Context, orders []flashgate.Order) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, o := range orders {
		if r.refuse[o.ID] {
			return 0, &flashgate.FieldError{Field: "order_id", Reason: "refused for the test"}
		}
	}
	return r.Store.InsertOrders(ctx, orders)
}

// TestDeadLetters has the store refuse two orders: they move, with their
// fields and the reason, to the sale's dead-letter stream (they used to be
// deleted), the others are stored, and the metric counts them per sale.
func TestDeadLetters(t *testing.T) {
	e := newEnv(t, "sqlite://"+filepath.Join(t.TempDir(), "fg.db"))
	ctx := context.Background()
	ids := e.reserve(t, "u", 10)
	store := &refusing{Store: e.db, refuse: map[string]bool{ids[2]: true, ids[7]: true}}
	reg := prometheus.NewRegistry()
	d := drainer(e, store, ordersink.Config{Metrics: reg})
	if n, err := d.DrainOnce(ctx); err != nil || n != 8 {
		t.Fatalf("DrainOnce: got %d, %v, want 8, nil", n, err)
	}
	good := append(append([]string{}, ids[:2]...), ids[3:7]...)
	good = append(good, ids[8:]...)
	e.check(t, good)
	dead, err := e.rdb.XRange(ctx, lua.DeadKey(sale), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 2 {
		t.Fatalf("dead letters: got %d, want 2", len(dead))
	}
	for i, want := range []string{ids[2], ids[7]} {
		v := dead[i].Values
		if e, _ := lua.ReadEntry(v); e.Order != want || e.User == "" || e.Quantity != "1" || e.Price == "" || e.Time == "" {
			t.Errorf("dead letter %d: got %v, want order %s with its fields", i, v, want)
		}
		if r, _ := v[lua.DeadReason].(string); !strings.Contains(r, "refused") || v[lua.DeadSource] == "" || v[lua.DeadTime] == "" {
			t.Errorf("dead letter %d: got %v, want a source id, a time and the reason", i, v)
		}
	}
	if got := counter(t, reg, "flashgate_sink_dead_letters_total"); got != 2 {
		t.Errorf("flashgate_sink_dead_letters_total: got %v, want 2", got)
	}
}

// TestWaitReplicas runs a drainer with WaitReplicas 1 against a real
// primary whose replica reaches it through a proxy: while the link is
// down nothing is committed (the entries stay pending), and once it is back
// everything is.
func TestWaitReplicas(t *testing.T) {
	primary := redistest.Start(t, "--repl-diskless-sync-delay", "0")
	p := newProxy(t, primary.Addr)
	host, port, _ := strings.Cut(p.ln.Addr().String(), ":")
	replica := redistest.Start(t, "--replicaof", host, port, "--repl-timeout", "60")
	replica.WaitReplica(t)
	e := &env{rs: primary, rdb: primary.Client(t)}
	e.db = openDB(t, "sqlite://"+filepath.Join(t.TempDir(), "fg.db"))
	e.prepare(t, 100)
	ctx := context.Background()
	testwait.Eventually(t, 10*time.Second, func() bool {
		return strings.Contains(e.rdb.Info(ctx, "replication").Val(), "state=online")
	}, "the primary to count its replica online")
	d := drainer(e, nil, ordersink.Config{WaitReplicas: 1, WaitTimeout: 300 * time.Millisecond})

	ids := e.reserve(t, "u", 5)
	// WAIT gives up after 300ms, and on a loaded machine the replica's
	// acknowledgement can take longer: the batch then stays pending and
	// goes at the next pass, never before the replica has it.
	got := 0
	testwait.Eventually(t, 10*time.Second, func() bool {
		n, err := d.DrainOnce(ctx)
		if err != nil && !errors.Is(err, ordersink.ErrReplicasBehind) {
			t.Fatalf("DrainOnce with the replica up: got %d, %v, want 5, nil", n, err)
		}
		got += n
		return got >= 5
	}, "the batch committed with the replica up")
	if got != 5 {
		t.Fatalf("DrainOnce with the replica up: committed %d, want 5", got)
	}

	p.cut(true)
	testwait.Eventually(t, 10*time.Second, func() bool {
		info := e.rdb.Info(ctx, "replication").Val()
		return strings.Contains(info, "connected_slaves:0")
	}, "the primary to see its replica gone")
	more := e.reserve(t, "v", 5)
	for i := 0; i < 2; i++ {
		if _, err := d.DrainOnce(ctx); !errors.Is(err, ordersink.ErrReplicasBehind) {
			t.Fatalf("DrainOnce with the replica down: got %v, want ErrReplicasBehind", err)
		}
	}
	if f, _ := e.db.Figures(ctx, sale); f.Persisted != 5 {
		t.Fatalf("rows while the replica is down: got %d, want 5", f.Persisted)
	}
	if pend := e.rdb.XPending(ctx, lua.OrdersKey(sale), lua.SinkGroup).Val(); pend == nil || pend.Count != 5 {
		t.Errorf("pending while the replica is down: got %+v, want 5", pend)
	}

	p.cut(false)
	testwait.Eventually(t, 10*time.Second, func() bool {
		_, _ = d.DrainOnce(ctx)
		f, _ := e.db.Figures(ctx, sale)
		return f.Persisted == 10
	}, "rows once the replica is back")
	e.check(t, append(ids, more...))
	if got := replica.Client(t).XLen(ctx, lua.OrdersKey(sale)).Val(); got != 0 {
		t.Errorf("replica stream length: got %d, want 0", got)
	}
}

// startOneNodeCluster starts a real redis-server in cluster mode owning
// every slot, with one replica: Redis refuses a command over keys of
// different slots (CROSSSLOT) exactly as on a larger cluster.
func startOneNodeCluster(t *testing.T) *redis.ClusterClient {
	t.Helper()
	start := func() (*redistest.Server, *redis.Client) {
		s := redistest.Start(t, "--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(t.TempDir(), "nodes.conf"),
			"--repl-diskless-sync-delay", "0")
		return s, s.Client(t)
	}
	s, c := start()
	r, rc := start()
	ctx := context.Background()
	if err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
		t.Fatal(err)
	}
	host, port, _ := strings.Cut(s.Addr, ":")
	if err := rc.ClusterMeet(ctx, host, port).Err(); err != nil {
		t.Fatal(err)
	}
	id := c.ClusterMyID(ctx).Val()
	testwait.Eventually(t, 10*time.Second, func() bool {
		return rc.ClusterReplicate(ctx, id).Err() == nil
	}, "the replica to join")
	r.WaitReplica(t)
	testwait.Eventually(t, 10*time.Second, func() bool {
		return strings.Contains(c.Info(ctx, "replication").Val(), "state=online")
	}, "the primary to count its replica online")
	testwait.Eventually(t, 10*time.Second, func() bool {
		return strings.Contains(c.ClusterInfo(ctx).Val(), "cluster_state:ok")
	}, "cluster_state:ok")
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{s.Addr}})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// openSale writes an open sale with the plain commands a cluster accepts.
func openSale(t testing.TB, rdb redis.UniversalClient, id string, total int) {
	t.Helper()
	ctx := context.Background()
	err := rdb.HSet(ctx, lua.SaleKey(id), lua.FieldTotal, total, lua.FieldBooked, 0, lua.FieldReserved, 0,
		lua.FieldStart, 1, lua.FieldPerUser, 1, lua.FieldPrice, 700).Err()
	if err == nil {
		err = rdb.SAdd(ctx, lua.SalesKey(), id).Err()
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestClusterSeveralSales drains three sales whose streams hash to
// different slots of a real cluster node (one XREADGROUP over them all is
// refused there with CROSSSLOT), with WAIT for the node's replica: every order of each sale
// is stored, and a sale with a few orders is stored while a busy one still
// has a backlog.
func TestClusterSeveralSales(t *testing.T) {
	cc := startOneNodeCluster(t)
	db := openDB(t, "sqlite://"+filepath.Join(t.TempDir(), "fg.db"))
	ctx := context.Background()
	sales := map[string]int{"busy": 300, "small": 3, "other": 20}
	slots := map[int64]bool{}
	var all []string
	for s, n := range sales {
		openSale(t, cc, s, 1000)
		slots[cc.ClusterKeySlot(ctx, lua.OrdersKey(s)).Val()] = true
		for i := 0; i < n; i++ {
			id := ulid.Make().String()
			keys := lua.ReserveKeys(s)
			res, err := lua.Reserve.Run(ctx, cc, keys, id, "u"+strconv.Itoa(i), 1, time.Now().UnixMilli(), s).Slice()
			if err != nil || res[0].(int64) != lua.ReserveOK {
				t.Fatalf("reserve in %s: %v, %v", s, res, err)
			}
			all = append(all, id)
		}
	}
	if len(slots) != len(sales) {
		t.Fatalf("streams in %d slots, want %d", len(slots), len(sales))
	}
	rec := &recorder{Store: db}
	d := ordersink.New(cc, rec, ordersink.Config{Consumer: "c1", Batch: 50, WaitReplicas: 1, Logger: quiet})
	n, err := d.DrainOnce(ctx)
	if err != nil || n != len(all) {
		t.Fatalf("DrainOnce: got %d, %v, want %d, nil", n, err, len(all))
	}
	for _, id := range all {
		if _, err := db.Order(ctx, id); err != nil {
			t.Errorf("order %s: %v", id, err)
		}
	}
	// The small sale went in with the busy sale's first batch, not after
	// its last.
	first := map[string]int{}
	for i, s := range rec.calls {
		if _, ok := first[s]; !ok {
			first[s] = i
		}
	}
	if first["small"] > len(sales) {
		t.Errorf("small sale first stored in call %d of %v, want among the first %d", first["small"], rec.calls, len(sales))
	}
	if bl, err := d.Backlog(ctx); err != nil || bl != 0 {
		t.Errorf("Backlog: got %d, %v, want 0", bl, err)
	}
}

// recorder is a Store that notes the sale of each insert call.
type recorder struct {
	ordersink.Store
	mu    sync.Mutex
	calls []string
}

func (r *recorder) InsertOrders(ctx context.Context, orders []flashgate.Order) (int, error) {
	r.mu.Lock()
	if len(orders) > 0 {
		r.calls = append(r.calls, orders[0].SaleID)
	}
	r.mu.Unlock()
	return r.Store.InsertOrders(ctx, orders)
}
