package main

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// reloadOnFailure is a go-redis hook for a cluster client over a Sentinel's
// master (redisTune.poolPerPrimary): a call that got no answer (refused,
// reset, timed out, or failed at once by go-redis's dial breaker; not an
// error reply, nor one the caller's own context ended) has the client reload its
// view of the master, which asks the Sentinels again. go-redis reloads it
// on the Sentinel's +switch-master, which a client whose subscription broke
// (its Sentinel died with the primary) never hears, and otherwise only
// every minute. A reload is asked for at most once per reloadEvery, so a
// dead primary costs the Sentinels two questions per reload, however many
// calls fail. go-redis's LazyReload waits as long after a reload only when
// it succeeded: with no Sentinel answering, each failed call would start
// another at once.
type reloadOnFailure struct {
	reload func(context.Context) // the cluster client's ReloadState
	now    func() time.Time
	last   atomic.Int64 // when a reload was last asked for, unix nanoseconds
}

// newReloadOnFailure returns the hook for cc.
func newReloadOnFailure(cc *redis.ClusterClient) *reloadOnFailure {
	return &reloadOnFailure{reload: cc.ReloadState, now: time.Now}
}

// reloadEvery is the least time between two reloads reloadOnFailure asks
// for (go-redis's own LazyReload's wait after one).
const reloadEvery = 200 * time.Millisecond

func (h *reloadOnFailure) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *reloadOnFailure) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.check(ctx, err)
		return err
	}
}

func (h *reloadOnFailure) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.check(ctx, err)
		return err
	}
}

// check reloads the client's view after a call that failed with err
// unanswered, unless a reload was asked for within reloadEvery.
func (h *reloadOnFailure) check(ctx context.Context, err error) {
	var reply redis.Error
	if err == nil || ctx.Err() != nil || errors.As(err, &reply) {
		return
	}
	now := h.now().UnixNano()
	last := h.last.Load()
	if now-last < int64(reloadEvery) || !h.last.CompareAndSwap(last, now) {
		return
	}
	h.reload(ctx)
}
