package main

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// reloadOnFailure is a go-redis hook for a cluster client over a Sentinel's
// master (redisTune.poolPerPrimary): a call that got no answer (refused,
// reset, timed out, or failed at once by go-redis's dial breaker; not an
// error reply, nor one the caller's own context ended) has the client reload its
// view of the master, which asks the Sentinels again. go-redis reloads it
// on the Sentinel's +switch-master, which a client whose subscription broke
// (its Sentinel died with the primary) never hears, and otherwise only
// every minute. A reload runs at most once per 200 ms (go-redis's
// LazyReload), so a dead primary costs the Sentinels two questions per
// reload, however many calls fail.
type reloadOnFailure struct{ cc *redis.ClusterClient }

func (h reloadOnFailure) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h reloadOnFailure) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.check(ctx, err)
		return err
	}
}

func (h reloadOnFailure) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.check(ctx, err)
		return err
	}
}

// check reloads the client's view after a call that failed with err
// unanswered.
func (h reloadOnFailure) check(ctx context.Context, err error) {
	var reply redis.Error
	if err != nil && ctx.Err() == nil && !errors.As(err, &reply) {
		h.cc.ReloadState(ctx)
	}
}
