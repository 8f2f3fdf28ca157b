package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/inventory"
	"github.com/flashgate/flashgate/lua"
)

// testCluster is the Redis Cluster the package's cluster variants share,
// started by the first test that asks for it and stopped by TestMain.
var testCluster redistest.SharedCluster

// TestMain stops the shared cluster after the tests, then fails them if
// any goroutine outlives them (see leakOptions).
func TestMain(m *testing.M) {
	code := m.Run()
	testCluster.Stop()
	if code == 0 {
		if err := goleak.Find(leakOptions...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

func TestContractCluster(t *testing.T) {
	cc := testCluster.Get(t).Client(t, false)
	t.Run("service", func(t *testing.T) {
		testContract(t, cc, inventory.New(cc, inventory.Config{Logger: quiet()}))
	})
	testCluster.Get(t)
	t.Run("client", func(t *testing.T) {
		c, _ := serve(t, inventory.New(cc, inventory.Config{Logger: quiet()}))
		testContract(t, cc, c)
	})
}

// commandCalls returns cmdstat_<cmd>'s calls on each node of the cluster.
func commandCalls(t *testing.T, cl *redistest.Cluster, cmd string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, addr := range cl.Addrs {
		c := redis.NewClient(&redis.Options{Addr: addr})
		out[addr] = redistest.Commands(t, c)[cmd].Calls
		_ = c.Close()
	}
	return out
}

// salesOnEachPrimary returns one sale id per primary of the cluster, with
// the primary's address, chosen by CLUSTER KEYSLOT and MasterForKey.
func salesOnEachPrimary(t *testing.T, cc *redis.ClusterClient) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{} // primary address → sale
	for i := 0; len(out) < 3 && i < 1000; i++ {
		sale := "s" + strconv.Itoa(i)
		slot, err := cc.ClusterKeySlot(ctx, lua.SaleKey(sale)).Result()
		if err != nil {
			t.Fatalf("CLUSTER KEYSLOT: %v", err)
		}
		for _, k := range []string{lua.BuyersKey(sale), lua.OrdersKey(sale), lua.ReleasedKey(sale)} {
			if s, _ := cc.ClusterKeySlot(ctx, k).Result(); s != slot {
				t.Fatalf("%s is in slot %d, %s in %d: a sale's keys must share one slot", k, s, lua.SaleKey(sale), slot)
			}
		}
		m, err := cc.MasterForKey(ctx, lua.SaleKey(sale))
		if err != nil {
			t.Fatalf("MasterForKey: %v", err)
		}
		if _, seen := out[m.Options().Addr]; !seen {
			out[m.Options().Addr] = sale
		}
	}
	if len(out) != 3 {
		t.Fatalf("sales spread over %d primaries, want 3", len(out))
	}
	return out
}

// TestClusterSalesOnEveryPrimary runs a crowd over sales on different
// primaries at once (through the cluster client's automatic pipelining):
// each sells exactly its stock, and each reserve ran on its sale's primary.
func TestClusterSalesOnEveryPrimary(t *testing.T) {
	cl := testCluster.Get(t)
	cc := cl.Client(t, false)
	ctx := context.Background()
	placed := salesOnEachPrimary(t, cc)
	const total, users = 50, 400
	for _, sale := range placed {
		prepSale(t, cc, sale, total, 1, "open")
	}
	var sales []string
	for _, s := range placed {
		sales = append(sales, s)
	}
	// Each reserve sent alone checks its buyer with one HGET (a batch reads
	// its buyers with one HMGET).
	before := commandCalls(t, cl, "hget")
	svc := inventory.New(cc, inventory.Config{Logger: quiet(), MaxReserveBatch: 1})
	var ok atomic.Int64
	var mu sync.Mutex
	sold := map[string]int{}
	run(3*users, 64, func(i int) {
		sale := sales[i%3]
		_, err := svc.Reserve(ctx, sale, "user-"+strconv.Itoa(i/3), "", 1)
		switch {
		case err == nil:
			ok.Add(1)
			mu.Lock()
			sold[sale]++
			mu.Unlock()
		case errors.Is(err, flashgate.ErrSoldOut):
		default:
			t.Errorf("Reserve %s: %v", sale, err)
		}
	})
	after := commandCalls(t, cl, "hget")
	for addr, sale := range placed {
		if sold[sale] != total || booked(t, cc, sale) != total {
			t.Errorf("sale %s on %s: got %d sold, booked %d; want %d", sale, addr, sold[sale], booked(t, cc, sale), total)
		}
		if n, _ := cc.HLen(ctx, lua.BuyersKey(sale)).Result(); n != total {
			t.Errorf("sale %s buyers: got %d, want %d", sale, n, total)
		}
		if after[addr]-before[addr] < users {
			t.Errorf("primary %s checked %d buyers, want at least %d (its sale's reserves)", addr, after[addr]-before[addr], users)
		}
	}
}

// TestClusterWaitOnOwnConnection shows that with WaitReplicas a reserve is
// on the sale's replica when it answers and that WAIT went to the sale's
// primary alone, not to every shard.
func TestClusterWaitOnOwnConnection(t *testing.T) {
	cl := testCluster.Get(t)
	cc := cl.Client(t, false)
	ctx := context.Background()
	placed := salesOnEachPrimary(t, cc)
	var primary, sale string
	for primary, sale = range placed {
		break
	}
	prepSale(t, cc, sale, 100, 1, "open")
	// The scripts are loaded first: a reserve's first EVALSHA on a primary
	// that lacks them answers NOSCRIPT after its WAIT ran, and the retry
	// sends a second WAIT.
	if err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		for _, sc := range []*redis.Script{lua.Reserve, lua.ReserveMany} {
			if err := sc.Load(ctx, c).Err(); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("loading the scripts: %v", err)
	}
	before := commandCalls(t, cl, "wait")
	svc := inventory.New(cc, inventory.Config{Logger: quiet(), WaitReplicas: 1, WaitTimeout: 5 * time.Second})
	var replica *redis.Client
	var mu sync.Mutex
	_ = cc.ForEachSlave(ctx, func(ctx context.Context, c *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		info, _ := c.Info(ctx, "replication").Result()
		if strings.Contains(info, "master_port:"+primary[strings.LastIndex(primary, ":")+1:]+"\r\n") {
			replica = c
		}
		return nil
	})
	if replica == nil {
		t.Fatalf("no replica of %s", primary)
	}
	const n = 20
	for i := range n {
		user := fmt.Sprintf("u%d", i)
		id, err := svc.Reserve(ctx, sale, user, "", 1)
		if err != nil {
			t.Fatalf("Reserve: %v", err)
		}
		got, err := replica.Do(ctx, "HGET", lua.BuyersKey(sale), user).Text()
		if err != nil && strings.HasPrefix(err.Error(), "MOVED") {
			// The replica answers reads once the connection is READONLY.
			_ = replica.Do(ctx, "READONLY").Err()
			got, err = replica.Do(ctx, "HGET", lua.BuyersKey(sale), user).Text()
		}
		if err != nil || got != id {
			t.Fatalf("replica buyer %s right after Reserve: got %q, %v; want %q", user, got, err, id)
		}
	}
	after := commandCalls(t, cl, "wait")
	for _, addr := range cl.Addrs {
		want := int64(0)
		if addr == primary {
			want = n
		}
		if got := after[addr] - before[addr]; got != want {
			t.Errorf("WAIT calls on %s: got %d, want %d", addr, got, want)
		}
	}
}
