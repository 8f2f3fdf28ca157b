package redistest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a local Redis Cluster of three primaries and three replicas,
// each a Server with its bus on a port of its own.
type Cluster struct {
	Nodes []*Server // in the order given to redis-cli --cluster create
	Addrs []string  // every node's "127.0.0.1:<port>"
}

// StartCluster starts a Cluster for tb and stops it in tb.Cleanup. Without
// redis-server or redis-cli it skips the test, or fails it when Required.
func StartCluster(tb testing.TB) *Cluster {
	tb.Helper()
	bin := need(tb)
	c, err := StartClusterServers(bin, tb.TempDir())
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	tb.Cleanup(c.Stop)
	return c
}

// need returns redis-server's path, or skips (fails when Required) tb
// without redis-server or redis-cli.
func need(tb testing.TB) string {
	tb.Helper()
	bin := Binary()
	_, cliErr := exec.LookPath("redis-cli")
	if bin == "" || cliErr != nil {
		if Required() {
			tb.Fatal("redistest: redis-server or redis-cli not found (install Debian's redis-server and redis-tools)")
		}
		tb.Skip("redistest: redis-server or redis-cli not found")
	}
	return bin
}

// StartClusterServers starts six cluster-enabled servers with their files in
// dir, joins them into a cluster with one replica per primary and waits until
// every node reports cluster_state:ok and every replica is in sync; for
// TestMain, where there is no testing.TB. The caller stops it.
func StartClusterServers(bin, dir string) (*Cluster, error) {
	c := &Cluster{}
	for i := 0; i < 6; i++ {
		bus, err := freePort()
		if err != nil {
			c.Stop()
			return nil, err
		}
		s, err := StartServer(bin, dir, "--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, fmt.Sprintf("nodes-%d-%d.conf", i, bus)),
			"--cluster-node-timeout", "2000", "--cluster-port", strconv.Itoa(bus),
			"--cluster-require-full-coverage", "no", "--repl-diskless-sync-delay", "0",
			"--repl-ping-replica-period", "1")
		if err != nil {
			c.Stop()
			return nil, err
		}
		c.Nodes = append(c.Nodes, s)
		c.Addrs = append(c.Addrs, s.Addr)
	}
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		c.Stop()
		return nil, fmt.Errorf("redis-cli --cluster create: %v: %s", err, out)
	}
	if err := c.waitOK(30 * time.Second); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// waitOK waits until every live node reports cluster_state:ok and knows every
// node, and every replica's link to its primary is up.
func (c *Cluster) waitOK(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	var last string
	for time.Now().Before(deadline) {
		if last = c.notOK(); last == "" {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("cluster not ready within %v: %s", limit, last)
}

// notOK returns why the cluster is not ready yet, or "".
func (c *Cluster) notOK() string {
	ctx := context.Background()
	for _, s := range c.Nodes {
		if s.cmd == nil {
			continue
		}
		n := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
		info, err := n.ClusterInfo(ctx).Result()
		repl, err2 := n.Info(ctx, "replication").Result()
		slots, err3 := n.ClusterSlots(ctx).Result()
		_ = n.Close()
		if err != nil || err2 != nil || err3 != nil {
			return fmt.Sprintf("%s: %v %v %v", s.Addr, err, err2, err3)
		}
		if !strings.Contains(info, "cluster_state:ok") {
			return s.Addr + ": cluster_state not ok"
		}
		// CLUSTER SLOTS lists a replica only once it has synced; clients
		// learn the replicas from it.
		listed := 0
		for _, r := range slots {
			listed += len(r.Nodes)
		}
		if listed != c.live() {
			return fmt.Sprintf("%s lists %d of %d nodes in CLUSTER SLOTS", s.Addr, listed, c.live())
		}
		if strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
			return s.Addr + ": replica link down"
		}
	}
	return ""
}

// live counts the nodes not stopped.
func (c *Cluster) live() int {
	n := 0
	for _, s := range c.Nodes {
		if s.cmd != nil {
			n++
		}
	}
	return n
}

// WaitOK waits until the cluster is healthy again, for example after a
// failover.
func (c *Cluster) WaitOK(tb testing.TB) {
	tb.Helper()
	if err := c.waitOK(30 * time.Second); err != nil {
		tb.Fatalf("redistest: %v", err)
	}
}

// Stop stops every node.
func (c *Cluster) Stop() {
	for _, s := range c.Nodes {
		s.Stop()
	}
}

// Client returns a cluster client, closed at the end of the test; readOnly
// routes read-only commands to replicas.
func (c *Cluster) Client(tb testing.TB, readOnly bool) *redis.ClusterClient {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, ReadOnly: readOnly, PoolSize: 64, ReadTimeout: 3 * time.Second})
	tb.Cleanup(func() { _ = cc.Close() })
	return cc
}

// URL is the cluster in flashgate's --redis form.
func (c *Cluster) URL() string { return "redis+cluster://" + strings.Join(c.Addrs, ",") }

// Flush empties every primary (replicas follow) and waits until the
// replicas are empty too.
func (c *Cluster) Flush(tb testing.TB) {
	tb.Helper()
	ctx := context.Background()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs})
	defer cc.Close()
	if err := cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		return n.FlushAll(ctx).Err()
	}); err != nil {
		tb.Fatalf("redistest: FLUSHALL: %v", err)
	}
	if err := cc.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error {
		for i := 0; i < 100; i++ {
			if k, err := n.DBSize(ctx).Result(); err == nil && k == 0 {
				return nil
			}
			time.Sleep(20 * time.Millisecond)
		}
		return fmt.Errorf("%s still holds keys", n.Options().Addr)
	}); err != nil {
		tb.Fatalf("redistest: flush: %v", err)
	}
}

// Node returns the Server listening on addr, or nil.
func (c *Cluster) Node(addr string) *Server {
	for _, s := range c.Nodes {
		if s.Addr == addr {
			return s
		}
	}
	return nil
}

// Sentinel is a primary, one replica and one redis-server in Sentinel mode
// (quorum 1) watching the primary as master Name.
type Sentinel struct {
	Name     string
	Primary  *Server
	Replica  *Server
	Addr     string // the Sentinel's "127.0.0.1:<port>"
	cmd      *exec.Cmd
	done     chan struct{}
	stopOnce sync.Once
}

// StartSentinel starts a Sentinel set-up for tb and stops it in tb.Cleanup.
func StartSentinel(tb testing.TB) *Sentinel {
	tb.Helper()
	bin := need(tb)
	s, err := StartSentinelServers(bin, tb.TempDir())
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	tb.Cleanup(s.Stop)
	return s
}

// StartSentinelServers starts a Sentinel set-up with its files in dir; for
// TestMain. The caller stops it.
func StartSentinelServers(bin, dir string) (*Sentinel, error) {
	st := &Sentinel{Name: "flashgate"}
	var err error
	if st.Primary, err = StartServer(bin, dir, "--repl-diskless-sync-delay", "0"); err != nil {
		return nil, err
	}
	if st.Replica, err = StartServer(bin, dir, "--replicaof", "127.0.0.1", strconv.Itoa(st.Primary.Port), "--repl-diskless-sync-delay", "0"); err != nil {
		st.Stop()
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		st.Stop()
		return nil, err
	}
	st.Addr = fmt.Sprintf("127.0.0.1:%d", port)
	conf := filepath.Join(dir, fmt.Sprintf("sentinel-%d.conf", port))
	text := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nlogfile %s\nsentinel monitor %s 127.0.0.1 %d 1\nsentinel down-after-milliseconds %s 1000\nsentinel failover-timeout %s 3000\n",
		port, dir, filepath.Join(dir, fmt.Sprintf("sentinel-%d.log", port)), st.Name, st.Primary.Port, st.Name, st.Name)
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		st.Stop()
		return nil, err
	}
	st.cmd = exec.Command(bin, conf, "--sentinel")
	if err := st.cmd.Start(); err != nil {
		st.Stop()
		return nil, fmt.Errorf("starting sentinel: %w", err)
	}
	st.done = make(chan struct{})
	go func() { _ = st.cmd.Wait(); close(st.done) }()
	// Ready once the Sentinel knows the master and its replica.
	sc := redis.NewSentinelClient(&redis.Options{Addr: st.Addr, MaxRetries: -1})
	defer sc.Close()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		reps, err := sc.Replicas(ctx, st.Name).Result()
		cancel()
		if err == nil && len(reps) == 1 && reps[0]["flags"] == "slave" && reps[0]["master-link-status"] == "ok" {
			return st, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	st.Stop()
	return nil, fmt.Errorf("sentinel on %s never saw the replica (see %s)", st.Addr, dir)
}

// URL is the set-up in flashgate's --redis form.
func (s *Sentinel) URL() string { return "redis+sentinel://" + s.Addr + "/" + s.Name }

// Stop stops the Sentinel and both servers.
func (s *Sentinel) Stop() {
	s.stopOnce.Do(func() {
		if s.cmd != nil && s.cmd.Process != nil {
			_ = s.cmd.Process.Kill()
			<-s.done
		}
	})
	if s.Replica != nil {
		s.Replica.Stop()
	}
	if s.Primary != nil {
		s.Primary.Stop()
	}
}

// SharedCluster is one Cluster that the tests of a package share: the first
// Get starts it, and the package's TestMain calls Stop after m.Run. The zero
// value is ready to use.
type SharedCluster struct {
	once sync.Once
	c    *Cluster
	dir  string
	err  error // why the cluster could not start; every Get fails with it
}

// Get returns the shared cluster, healthy and emptied. Without redis-server
// or redis-cli it skips tb, or fails it when Required.
func (s *SharedCluster) Get(tb testing.TB) *Cluster {
	tb.Helper()
	bin := need(tb)
	s.once.Do(func() {
		if s.dir, s.err = os.MkdirTemp("", "fg-cluster-"); s.err == nil {
			s.c, s.err = StartClusterServers(bin, s.dir)
		}
	})
	if s.err != nil {
		tb.Fatalf("redistest: starting the shared cluster: %v", s.err)
	}
	s.c.WaitOK(tb)
	s.c.Flush(tb)
	return s.c
}

// Stop stops the cluster, if one was started, and removes its files.
func (s *SharedCluster) Stop() {
	if s.c != nil {
		s.c.Stop()
	}
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
}
