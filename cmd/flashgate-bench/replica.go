package main

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/flashgate/flashgate"
)

// The (r) scenarios: purchases of the large stock with one replica
// attached to the stack's Redis, the stack's own serve (default flags:
// --wait-replicas auto, so each reserve batch waits for the replica) in
// place of flashgate and a second serve on the same Redis and database with
// --wait-replicas 0 in place of the bare server, in the same alternating
// rounds: the ratio is what the promise (no 201 lost in a failover) costs.

// replicaEnv is the (r) scenarios' second serve and replica.
type replicaEnv struct {
	off     *stack // the serve with --wait-replicas 0
	batches waitHist
}

// startReplicaEnv attaches a replica to st's Redis, waits until the primary
// reports it online and starts the --wait-replicas 0 serve beside st's.
func (b *bench) startReplicaEnv(ctx context.Context, st *stack, extra ...string) (*replicaEnv, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	host, port, _ := net.SplitHostPort(addr)
	_, pport, _ := net.SplitHostPort(st.redisAddr)
	b.r.alias(addr, "$REDIS_REPLICA")
	rdir := b.path("redis-replica")
	os.MkdirAll(rdir, 0o755)
	rp, err := b.r.start("redis-replica", nil, "redis-server", "--port", port, "--bind", host,
		"--save", "", "--appendonly", "no", "--dir", rdir, "--replicaof", host, pport)
	if err != nil {
		return nil, err
	}
	if err := waitTCP(ctx, addr, rp, 10*time.Second); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err := st.rdb.Info(ctx, "replication").Result()
		if err == nil && flashgate.OnlineReplicas(info) == 1 {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the replica never came online: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The serves' count of replicas is up to a second old.
	time.Sleep(1100 * time.Millisecond)
	off := &stack{name: "httpoff", db: st.db, redisAddr: st.redisAddr, rdb: st.rdb}
	if err := b.startServe(ctx, off, append(append([]string{}, extra...), "--wait-replicas", "0")...); err != nil {
		return nil, err
	}
	return &replicaEnv{off: off}, nil
}

// waitHist is flashgate_reserve_wait_batch's cumulative buckets (le →
// count) and its sum and count.
type waitHist struct {
	buckets    map[float64]float64
	sum, count float64
}

// waitBatches reads flashgate_reserve_wait_batch from the stack's /metrics.
func (b *bench) waitBatches(st *stack) (waitHist, error) {
	h := waitHist{buckets: map[float64]float64{}}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + st.admin + "/metrics")
	if err != nil {
		return h, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, val, ok := strings.Cut(line, " ")
		if !ok || !strings.HasPrefix(name, "flashgate_reserve_wait_batch") {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			continue
		}
		switch {
		case name == "flashgate_reserve_wait_batch_sum":
			h.sum = v
		case name == "flashgate_reserve_wait_batch_count":
			h.count = v
		default:
			le, ok := strings.CutPrefix(name, `flashgate_reserve_wait_batch_bucket{le="`)
			if !ok {
				continue
			}
			le = strings.TrimSuffix(le, `"}`)
			bound := math.Inf(1)
			if le != "+Inf" {
				if bound, err = strconv.ParseFloat(le, 64); err != nil {
					continue
				}
			}
			h.buckets[bound] = v
		}
	}
	return h, sc.Err()
}

// minus is h less an earlier reading.
func (h waitHist) minus(o waitHist) waitHist {
	d := waitHist{buckets: map[float64]float64{}, sum: h.sum - o.sum, count: h.count - o.count}
	for le, v := range h.buckets {
		d.buckets[le] = v - o.buckets[le]
	}
	return d
}

// plus is h and another reading together.
func (h waitHist) plus(o waitHist) waitHist {
	d := waitHist{buckets: map[float64]float64{}, sum: h.sum + o.sum, count: h.count + o.count}
	for le, v := range h.buckets {
		d.buckets[le] = v + o.buckets[le]
	}
	for le, v := range o.buckets {
		if _, ok := h.buckets[le]; !ok {
			d.buckets[le] = v
		}
	}
	return d
}

// median is the smallest bucket bound that holds half of the WAITs, the
// mean and the number of WAITs; "" without any.
func (h waitHist) String() string {
	if h.count <= 0 {
		return "no WAIT"
	}
	les := make([]float64, 0, len(h.buckets))
	for le := range h.buckets {
		les = append(les, le)
	}
	sort.Float64s(les)
	med := "?"
	for _, le := range les {
		if h.buckets[le] >= h.count/2 {
			if math.IsInf(le, 1) {
				med = "> 128"
			} else {
				med = "≤ " + strconv.FormatFloat(le, 'f', -1, 64)
			}
			break
		}
	}
	return fmt.Sprintf("%s WAITs, median batch %s reserves (histogram bucket), mean %.1f", num(h.count), med, h.sum/h.count)
}

// fsyncEnv is the (f) scenario's two stacks: Redis with AOF, fsync always
// and everysec.
type fsyncEnv struct{ always, everysec *stack }

// startFsyncEnv starts the (f) stacks, each with its own database, and
// opens sale on both.
func (b *bench) startFsyncEnv(ctx context.Context, sale string, extra ...string) (*fsyncEnv, error) {
	e := &fsyncEnv{}
	for _, f := range []struct {
		name string
		st   **stack
	}{{"always", &e.always}, {"everysec", &e.everysec}} {
		db, err := b.dbURL(ctx, "bench_fsync_"+f.name)
		if err != nil {
			return nil, err
		}
		st, err := b.startStackRedis(ctx, "fsync"+f.name, db, []string{"--save", "", "--appendonly", "yes", "--appendfsync", f.name}, extra...)
		if err != nil {
			return nil, err
		}
		if err := b.createSale(st, sale, maxUnits, true); err != nil {
			return nil, err
		}
		*f.st = st
	}
	time.Sleep(300 * time.Millisecond) // the gateways' state refresh
	return e, nil
}
