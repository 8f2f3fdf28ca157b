package controlplane

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/internal/fencing"
	"github.com/flashgate/flashgate/lua"
)

// WithFencingToken returns ctx whose writes (Start, Stop, Resync,
// ExpireDue) carry fencing token tok instead of one of their own, as the
// leader's loops do with their lease's: for tools and tests that act as a
// leader holding tok.
func WithFencingToken(ctx context.Context, tok int64) context.Context {
	return fencing.WithValue(ctx, tok)
}

// fenceAttempts bounds the tries of an admin call whose writes a newer
// token refused.
const fenceAttempts = 3

// fencedCall runs f with a fencing token. Under ctx's own (the leader's
// loops) f runs once. Otherwise (an admin call's Start, Stop, Resync or
// ExpireDue) it runs with the lease's token when this control plane leads
// (its term is live), else with a fresh one (lua.TakeFence), and again with
// a fresh one, up to fenceAttempts times in all, while a newer token
// refuses its writes.
//
// A fresh token outranks every token before it, the leader's included: a
// leader paused past its lease stays fenced off from what the call wrote,
// and the current leader's writes there are refused until it takes a newer
// token at its next renewal (lead), a tick later; an admin call that meets
// the leader's newer token then tries again.
func (s *Service) fencedCall(ctx context.Context, f func(context.Context) error) error {
	if fencing.Of(ctx) > 0 {
		return f(ctx)
	}
	var err error
	for i := range fenceAttempts {
		tok := int64(0)
		if i == 0 {
			tok = s.termFence()
		}
		if tok < 1 {
			var terr error
			if tok, terr = s.takeFence(ctx); terr != nil {
				return terr
			}
		}
		if err = f(WithFencingToken(ctx, tok)); !errors.Is(err, flashgate.ErrFenced) {
			return err
		}
	}
	return err
}

// takeFence takes a fresh fencing token (lua.TakeFence).
func (s *Service) takeFence(ctx context.Context) (int64, error) {
	return s.takeFenceAbove(ctx, 0)
}

// takeFenceAbove takes a fresh fencing token above floor, a token this
// Service holds, even if the counter fell below it (lua.TakeFence).
func (s *Service) takeFenceAbove(ctx context.Context, floor int64) (int64, error) {
	tok, err := lua.TakeFence.Run(ctx, s.rdb, lua.FenceKeys(), time.Now().UnixMilli(), floor).Int64()
	if err != nil {
		return 0, fmt.Errorf("taking a fencing token: %w: %w", flashgate.ErrUnavailable, err)
	}
	return tok, nil
}

// mark sets pairs of fields of a sale or bucket hash under ctx's fencing
// token (fencing.Mark).
func (s *Service) mark(ctx context.Context, tag string, pairs ...any) error {
	return fencing.Mark(ctx, s.rdb, tag, pairs...)
}
