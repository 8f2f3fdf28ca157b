package ordersink

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// replicaCount is what a primary last said of its replicas (WaitAuto).
type replicaCount struct {
	online int
	at     time.Time
}

// replicasEvery is how long a primary's count of online replicas is kept
// before it is read again.
const replicasEvery = time.Second

// onlineReplicas returns how many replicas node (a primary) has online, from
// INFO replication, read at most every replicasEvery per primary. A primary
// that cannot tell (miniredis, INFO renamed) counts as having none, noted
// once; a read that fails is an error (the batch waits).
func (d *Drainer) onlineReplicas(ctx context.Context, node *redis.Client) (int, error) {
	addr := node.Options().Addr
	last, ok := d.replicas[addr]
	if ok && time.Since(last.at) < replicasEvery {
		return last.online, nil
	}
	info, err := node.Info(ctx, "replication").Result()
	var refused redis.Error
	switch {
	case errors.As(err, &refused) || (err == nil && !strings.Contains(info, "connected_slaves:")):
		if !d.blind {
			d.blind = true
			d.log.Info("redis cannot tell its replicas (INFO replication): the order sink commits without WAIT", "primary", addr, "err", err)
		}
		d.noteReplicas(addr, 0)
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("ordersink: counting the replicas of %s: %w", addr, err)
	}
	n := countOnline(info)
	d.noteReplicas(addr, n)
	return n, nil
}

// noteReplicas keeps what the primary at addr said of its online replicas,
// and logs a change.
func (d *Drainer) noteReplicas(addr string, n int) {
	if d.replicas == nil {
		d.replicas = map[string]replicaCount{}
	}
	if last, ok := d.replicas[addr]; ok && n != last.online {
		d.log.Info("the primary's online replicas changed; the sink waits for each", "primary", addr, "was", last.online, "now", n)
	}
	d.replicas[addr] = replicaCount{online: n, at: time.Now()}
}

// countOnline counts the replicas in state online in the text of INFO
// replication ("slave0:ip=…,port=…,state=online,offset=…,lag=…").
func countOnline(info string) int {
	n := 0
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && strings.HasPrefix(k, "slave") && strings.Contains(v, "state=online") {
			n++
		}
	}
	return n
}
