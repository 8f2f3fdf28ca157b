package queueleader

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/fairqueue"
	"github.com/flashgate/flashgate/lua"
)

// rankQueue reads every pre-start entrant, sorts them by rank key and,
// unless Redis holds the ranks already, writes them.
func (l *Leader) rankQueue(ctx context.Context, id string, run *queueRun, f queueFigures, fence int64) error {
	seedHex, err := l.rdb.HGet(ctx, lua.SaleKey(id), lua.FieldQueueSeed).Result()
	if err != nil {
		return fmt.Errorf("reading the seed: %w: %w", flashgate.ErrUnavailable, err)
	}
	seed, err := hex.DecodeString(seedHex)
	if err != nil || len(seed) != 32 {
		return fmt.Errorf("sale %s: malformed seed in redis", id)
	}
	pre := make([]queueEntrant, 0, f.Prequeued)
	ranker := fairqueue.NewRanker(seed)
	var cursor uint64
	for {
		kv, next, err := l.rdb.HScan(ctx, lua.QueueKey(id), cursor, "", queueScanCount).Result()
		if err != nil {
			return fmt.Errorf("reading the queue: %w: %w", flashgate.ErrUnavailable, err)
		}
		for i := 0; i+1 < len(kv); i += 2 {
			if v := kv[i+1]; v == "p" || strings.HasPrefix(v, "r") {
				e := queueEntrant{user: kv[i]}
				ranker.Key(id, e.user, &e.key)
				pre = append(pre, e)
			}
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	slices.SortFunc(pre, func(a, b queueEntrant) int { return bytes.Compare(a.key[:], b.key[:]) })
	if int64(len(pre)) != f.Prequeued {
		return fmt.Errorf("sale %s: %d pre-start entrants in the queue, queue_prequeued says %d", id, len(pre), f.Prequeued)
	}
	if !f.Ranked {
		if err := lua.QueueRank.Load(ctx, l.rdb).Err(); err != nil {
			return fmt.Errorf("ranking the queue: %w: %w", flashgate.ErrUnavailable, err)
		}
		// queueRankPipeline chunks per round trip, in order: the last
		// chunk, which marks the queue ranked, goes last. Ranked again
		// after a restore, the rank keys at the frontiers follow.
		theta, etheta := "-", "-"
		if f.Admitted > 0 {
			key := func(p int64) string {
				if p = min(p, int64(len(pre))); p <= 0 {
					return ""
				}
				return hex.EncodeToString(pre[p-1].key[:])
			}
			theta, etheta = key(f.Admitted), key(f.Expired)
		}
		for i := 0; i == 0 || i < len(pre); {
			pipe := l.rdb.Pipeline()
			var cmds []*redis.Cmd
			for c := 0; c < queueRankPipeline && (i == 0 || i < len(pre)); c++ {
				chunk := pre[i:min(i+queueRankChunk, len(pre))]
				last := "0"
				if i+queueRankChunk >= len(pre) {
					last = "1"
				}
				args := make([]any, 0, 4+2*len(chunk))
				args = append(args, fence, last, theta, etheta)
				for j, e := range chunk {
					args = append(args, e.user, "r"+strconv.Itoa(i+j+1))
				}
				cmds = append(cmds, lua.QueueRank.EvalSha(ctx, pipe, lua.QueueRankKeys(id), args...))
				i += queueRankChunk
			}
			if _, err := pipe.Exec(ctx); err != nil {
				return fmt.Errorf("ranking the queue: %w: %w", flashgate.ErrUnavailable, err)
			}
			for _, c := range cmds {
				if n, _ := c.Int(); n < 0 {
					return fmt.Errorf("ranking the queue: a newer leader's fencing token: %w", flashgate.ErrUnavailable)
				}
			}
		}
		l.log.Info("fair queue ranked", "sale", id, "pre_start_entrants", len(pre))

	}
	run.pre, run.ranked = pre, true
	return nil
}

// user returns the user at position pos (1-based), reading the late list
// as far as needed.
func (l *Leader) queueUser(ctx context.Context, id string, run *queueRun, pos int64) (string, error) {
	if pos <= int64(len(run.pre)) {
		return run.pre[pos-1].user, nil
	}
	n := pos - int64(len(run.pre)) // arrival number
	if n > int64(len(run.late)) {
		more, err := l.rdb.LRange(ctx, lua.QueueLateKey(id), int64(len(run.late)), n-1+queueScanCount).Result()
		if err != nil {
			return "", fmt.Errorf("reading late entrants: %w: %w", flashgate.ErrUnavailable, err)
		}
		run.late = append(run.late, more...)
	}
	if n > int64(len(run.late)) {
		return "", fmt.Errorf("sale %s: late entrant %d missing", id, n)
	}
	return run.late[n-1], nil
}
