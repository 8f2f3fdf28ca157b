package systemtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flashgate/flashgate/internal/testenv/testwait"
)

// edgeSentinel runs the cluster on Sentinel (cluster.sh up --redis-sentinel:
// a primary, a replica, three Sentinels, every tier on redis+sentinel://)
// with the default flags, nginx in front. A crowd buys through nginx and
// the primary is killed (SIGKILL) once the sale has booked its first units;
// the Sentinels promote the replica, the tiers follow it, and buyers who
// keep coming buy the rest. Exactly the stock is sold: as many rows as
// units, as many 201s (the default --wait-replicas auto answers a 201 only
// once the replica holds it, so none is lost in the failover), and later
// buyers are told sold_out.
func edgeSentinel(t *testing.T, bin, root string) {
	c := startEdgeClusterArgs(t, bin, root, "sentinel", []string{"--redis-sentinel"})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const sale, units = "sentinel", 150
	c.openSale(t, sale, units)
	primary := c.pid(t, "redis-primary")

	// The crowd before and during the failover: 40 buyers a second for
	// 10 s. The primary dies once 30 units are booked.
	killed := make(chan time.Time, 1)
	go func() {
		if _, ok := testwait.For(60*time.Second, func() bool {
			f, err := c.saleFigures(sale)
			booked, _ := f["booked"].(float64)
			return ctx.Err() != nil || err == nil && booked >= 30
		}); !ok || ctx.Err() != nil {
			return
		}
		if err := syscall.Kill(primary, syscall.SIGKILL); err != nil {
			t.Errorf("killing the primary (pid %d): %v", primary, err)
		}
		killed <- time.Now()
	}()
	first := purchases(ctx, t, c.target, "/api/sales/"+sale+"/orders", c.tokens(t, sentinelUsers("s1-", 400)), 40, 16)
	var at time.Time
	select {
	case at = <-killed:
	case <-ctx.Done():
		t.Fatal("the primary was never killed")
	}
	tally := tallyAnswers(first)
	sold := tally["201"]
	t.Logf("crowd during the failover: %v", tally)
	// The failover was mid-crowd when some of the crowd's purchases failed
	// (503, no answer) or units were left for the buyers after it. A quick
	// failover may let the crowd's own retries buy every unit.
	failed := 0
	for k, n := range tally {
		if !strings.HasPrefix(k, "201") && !strings.HasPrefix(k, "409") {
			failed += n
		}
	}
	if sold >= units && failed == 0 {
		t.Fatalf("the first crowd bought %d of %d units and none of its purchases failed: the failover was not mid-crowd", sold, units)
	}

	// Buyers keep coming, 20 at a time, until they are told sold_out.
	var after map[string]int
	for batch := 0; after["409 sold_out"] == 0; batch++ {
		if ctx.Err() != nil {
			t.Fatalf("after the failover %v: %d 201s in all, never sold_out; gave up", after, sold)
		}
		ans := tallyAnswers(purchases(ctx, t, c.target, "/api/sales/"+sale+"/orders", c.tokens(t, sentinelUsers(fmt.Sprintf("s2-%d-", batch), 20)), 0, 4))
		after = sentinelMerge(after, ans)
		sold += ans["201"]
		if ans["201"] == 0 && ans["409 sold_out"] == 0 {
			// Not a synchronisation: buyers told 503 (still failing over) back off before the next batch.
			time.Sleep(200 * time.Millisecond)
		}
	}
	t.Logf("after the kill (%.1f s until sold out): %v", time.Since(at).Seconds(), after)
	// With --wait-replicas auto (the default) a 201 is on the replica
	// before it is sent: none is lost in the failover, so as many 201s as
	// units (a 201 more would be one answered on the old primary and lost).
	if sold != units {
		t.Errorf("201s: got %d, want %d", sold, units)
	}
	// The replica took over: the Sentinels promoted it.
	if out, err := exec.Command("redis-cli", "-p", c.redisPort(t, "redis-replica"), "role").Output(); err != nil || !strings.HasPrefix(string(out), "master") {
		t.Errorf("the replica's role after the failover: %q (%v), want master", out, err)
	}
	late := tallyAnswers(purchases(ctx, t, c.target, "/api/sales/"+sale+"/orders", c.tokens(t, sentinelUsers("s3-", 50)), 0, 8))
	if late["409 sold_out"] != 50 {
		t.Errorf("50 buyers after the sell-out: got %v, want 50 × 409 sold_out", late)
	}
	var f map[string]any
	if _, ok := testwait.For(30*time.Second, func() bool {
		f = c.adminCall(t, "GET", "/admin/sales/"+sale, "")
		orders, _ := f["orders"].(map[string]any)
		return f["booked"] == float64(units) && orders["persisted"] == float64(units)
	}); !ok {
		t.Fatalf("sale figures after the failover: %v, want booked %d and %d rows", f, units, units)
	}
}

// sentinelSoldOut reports whether buyers have been told sold_out and the
// sale has booked all its units.
func sentinelSoldOut(c *edgeCluster, sale string, answers map[string]int, units int) bool {
	if answers["409 sold_out"] == 0 {
		return false
	}
	f, err := c.saleFigures(sale)
	return err == nil && f["booked"] == float64(units)
}

// sentinelUsers returns n user names with the prefix.
func sentinelUsers(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + strconv.Itoa(i)
	}
	return out
}

func sentinelMerge(a, b map[string]int) map[string]int {
	if a == nil {
		a = map[string]int{}
	}
	for k, v := range b {
		a[k] += v
	}
	return a
}

// saleFigures is GET /admin/sales/{id} without failing the test (for use
// off the test's goroutine).
func (c *edgeCluster) saleFigures(sale string) (map[string]any, error) {
	req, err := http.NewRequest("GET", c.admin+"/admin/sales/"+sale, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+string(c.adminToken))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var v map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return nil, fmt.Errorf("GET /admin/sales/%s: %d: %w", sale, resp.StatusCode, err)
	}
	return v, nil
}

// redisPort returns the port of the Redis server cluster.sh recorded as name
// (its check is redis://127.0.0.1:PORT).
func (c *edgeCluster) redisPort(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.dir, "pids"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 4 && f[0] == name {
			return f[3][strings.LastIndex(f[3], ":")+1:]
		}
	}
	t.Fatalf("cluster.sh recorded no %s", name)
	return ""
}

// pid returns the pid cluster.sh recorded for the process name.
func (c *edgeCluster) pid(t *testing.T, name string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.dir, "pids"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == name {
			pid, err := strconv.Atoi(f[1])
			if err != nil {
				t.Fatalf("pids: %q", line)
			}
			return pid
		}
	}
	t.Fatalf("cluster.sh recorded no %s", name)
	return 0
}
